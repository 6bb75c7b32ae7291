"""Where one candidate's evaluation spends its time: screening and confirmation, stage by stage.

    .venv/bin/python benchmarks/eval_breakdown.py [--problem matmul] [--shapes paper] [--no-jobs]

For the problem's baseline kernel at the given shape, in this process (one BLAS thread, as in
the evaluation workers), CPU seconds (``time.process_time``) of each stage:

* inputs (``get_inputs`` + ``transform_to_nki_inputs``) and the float64 reference (``forward``),
  which the shared input cache computes once per input set and machine;
* screening at the target shape: the trace-only run and the performance model's estimate of it;
* confirmation, per input set (5 seeds + the adversarial inputs): the run with values, the output
  comparison and the coverage check; and the estimate of a run with values (which a confirmation
  no longer makes: it takes the screening's profile).

Then (unless ``--no-jobs``) the whole screen and confirm jobs as the search runs them (sandboxed
warm worker, forked runner, evaluation cache off): their wall time and the CPU time of the
processes they ran, so the difference to the stages is the service's own overhead.
"""
from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")   # as in the evaluation workers

import argparse  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

import nkibench  # noqa: E402
from accelopt_nb.evaluation import EvalOptions, evaluate  # noqa: E402
from accelopt_nb.evaluation.correctness import compare_outputs, unwritten_outputs  # noqa: E402
from accelopt_nb.evaluation.job import PAPER_SEEDS  # noqa: E402
from accelopt_nb.evaluation.problems import load_problem, resolve_problem  # noqa: E402
from accelopt_nb.perf import estimate  # noqa: E402
from accelopt_nb.renamed import add_renamed  # noqa: E402
from accelopt_nb.sim import SimOptions, load_kernel, simulate  # noqa: E402


def cpu(fn):
    t0 = time.process_time()
    out = fn()
    return out, time.process_time() - t0


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problem", default="matmul", choices=nkibench.list_problems())
    ap.add_argument("--shapes", default="paper")
    add_renamed(ap, "--preset", "--shapes", dest="shapes")
    ap.add_argument("--hw", default="trn1")
    ap.add_argument("--no-jobs", action="store_true", help="stages only, not the sandboxed jobs")
    args = ap.parse_args()

    task, tol = load_problem(resolve_problem(args.problem, args.shapes), args.shapes, Path(tempfile.mkdtemp()))
    kernel_path = Path(nkibench.__file__).parent / "problems" / args.problem / "kernel.py"
    kernel = load_kernel(str(kernel_path))
    rows: list[tuple[str, float, int]] = []    # (stage, CPU s each, times per evaluation)

    (inputs, nki), t_in = cpu(lambda: (lambda x: (x, task.to_nki([np.array(a) for a in x])))(task.get_inputs(42)))
    ref, t_ref = cpu(lambda: task.forward(*inputs))
    n_sets = len(PAPER_SEEDS) + len(task.adversarial_inputs())
    rows += [("inputs (cached once per input set)", t_in, 0), ("float64 reference (cached once)", t_ref, 0)]

    traced, t_trace = cpu(lambda: simulate(kernel, *nki, options=SimOptions(trace_only=True)))
    screen_est, t_est = cpu(lambda: estimate(traced.trace, hw=args.hw))
    rows += [("screen: trace-only run", t_trace, 1), ("screen: perf estimate", t_est, 1)]

    run, t_run = cpu(lambda: simulate(kernel, *nki))
    outputs = run.outputs if isinstance(run.outputs, (tuple, list)) else (run.outputs,)
    k_res = outputs[0] if len(outputs) == 1 else tuple(outputs)
    verdict, t_cmp = cpu(lambda: compare_outputs(task.from_nki(np.asarray(k_res), ref), ref, tol))
    holes, t_cov = cpu(lambda: unwritten_outputs(run.trace))
    full_est, t_full_est = cpu(lambda: estimate(run.trace, hw=args.hw))
    assert verdict[0] and not holes, (verdict, holes)
    assert full_est.latency == screen_est.latency, "trace-only and with-values streams disagree"
    rows += [("confirm: run with values", t_run, n_sets), ("confirm: compare outputs", t_cmp, n_sets),
             ("confirm: coverage", t_cov, n_sets), ("(estimate of a run with values: not redone)", t_full_est, 0)]

    print(f"{args.problem} at the {args.shapes} shape, baseline kernel, {n_sets} input sets per confirmation, "
          f"latency {screen_est.latency:.4g} ms (same from the trace-only and the with-values stream)")
    print(f"  {'stage':<46}{'CPU s':>8}{'x':>4}{'per eval':>10}")
    for name, sec, times in rows:
        print(f"  {name:<46}{sec:8.2f}{times:>4}{sec * times:10.2f}")
    screen_sum = t_trace + t_est
    confirm_sum = (t_run + t_cmp + t_cov) * n_sets
    print(f"  stages per screen {screen_sum:.2f} s, per confirmation {confirm_sum:.2f} s "
          "(plus the small-shape checks of a screen)")

    if not args.no_jobs:
        source = kernel_path.read_text()
        for fidelity, options in (("screen", EvalOptions()), ("confirm", EvalOptions(profile=False))):
            before, w0 = children_cpu(), time.perf_counter()
            r = evaluate(args.problem, source + f"\n_BREAKDOWN = {time.time_ns()}\n", preset=args.shapes,
                         hw=args.hw, cache=False, fidelity=fidelity, options=options)
            wall, used = time.perf_counter() - w0, children_cpu() - before
            stages = screen_sum if fidelity == "screen" else confirm_sum
            print(f"  {fidelity} job: {r.status.value}, wall {wall:.1f} s, CPU {used:.1f} s of its processes "
                  f"(stages {stages:.1f} s; worker start, small-shape checks and I/O the rest)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
