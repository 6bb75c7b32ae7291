"""Trace-only loop replay: the same trace, in less time, and what screening then costs.

For every kernel, side by side in one run: NumPy fp32 computing the same result, the trace-only
simulation with every loop iteration executed (``SimOptions(loop_replay=False)``) and with loop replay
(the default), whether the two traces are equal field by field and give the same performance-model
profile, the share of instructions replay extrapolated, and the time of ``accelopt_nb.perf.estimate``
on the trace (screening a candidate costs trace-only simulation + estimate). Cases come from
``benchmarks/sim_speed.py``: our 14 NKIBench baselines at a preset, our arange/mask-heavy kernel
(``benchmarks/kernels/arange_mask.py``, ragged tiles on both axes) and, with ``--accelopt-repo DIR``,
the paper's 14 baselines unchanged at the paper's shapes.

CPU seconds of this process (``time.process_time``), best of ``--repeat``; ratios are to NumPy, timed after
one untimed call (the first call's page faults vary between runs).

    python benchmarks/trace_replay.py --accelopt-repo DIR --no-ours [--only matmul,lora] [--repeat 2]
"""
from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).parent))
from sim_speed import Case, arange_mask_case, best_of, our_cases, paper_cases  # noqa: E402

from accelopt_nb.perf import estimate  # noqa: E402
from accelopt_nb.sim import SimOptions, load_kernel, simulate  # noqa: E402
from accelopt_nb.sim.replay import trace_fields  # noqa: E402


def measure(case: Case, repeat: int) -> dict:
    row: dict = {"name": case.name}
    try:
        host, nki_inputs = case.make()
        with threadpool_limits(limits=1, user_api="blas"):
            case.numpy_fp32(*host)   # untimed: the first call's page faults made NumPy up to 6x slower
            row["numpy"], _ = best_of(lambda: case.numpy_fp32(*host), repeat)
        kernel = load_kernel(case.kernel_path)
        row["full"], full = best_of(lambda: simulate(kernel, *nki_inputs,
                                                     options=SimOptions(trace_only=True, loop_replay=False)), repeat)
        row["replay"], fast = best_of(lambda: simulate(kernel, *nki_inputs, options=SimOptions(trace_only=True)),
                                      repeat)
        row["instructions"] = len(fast.trace)
        row["replayed"] = fast.trace.replayed / max(1, len(fast.trace))
        row["same_trace"] = trace_fields(full.trace) == trace_fields(fast.trace)
        del full
        row["estimate"], prof_fast = best_of(lambda: estimate(fast.trace), repeat)
        row["same_profile"] = prof_fast.to_dict() == estimate(
            simulate(kernel, *nki_inputs, options=SimOptions(trace_only=True, loop_replay=False)).trace).to_dict()
    except Exception as exc:  # report and go on: one failing kernel must not hide the others
        row["failure"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"[:160]
        if "-v" in sys.argv:
            traceback.print_exc()
    return row


def _f(row: dict, key: str, spec: str) -> str:
    return format(row[key], spec) if key in row else "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="paper", help="shape preset of our problems (paper or small)")
    ap.add_argument("--only", default="", help="comma-separated problem names")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--accelopt-repo", type=Path, default=None, help="checkout of github.com/zhang677/AccelOpt")
    ap.add_argument("--no-ours", action="store_true", help="skip our 14 baselines and the arange/mask kernel")
    ap.add_argument("--arange-shape", default="4000x3000", help="rows x cols of the arange/mask kernel")
    ap.add_argument("-v", action="store_true", help="print the traceback of kernels that raise")
    args = ap.parse_args()
    only = {s.strip() for s in args.only.split(",") if s.strip()} or None
    cases = [] if args.no_ours else our_cases(args.preset, only)
    if not args.no_ours and (not only or "arange_mask" in only):
        rows_, cols_ = (int(v) for v in args.arange_shape.lower().split("x"))
        cases.append(arange_mask_case(rows_, cols_))
    if args.accelopt_repo is not None:
        cases += paper_cases(args.accelopt_repo, only)
    print(f"# trace-only loop replay, CPU seconds, best of {args.repeat}")
    print("| kernel | instr | replayed | numpy s | full s | replay s | full/np | replay/np | estimate s "
          "| (replay+est)/np | same trace | same profile |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    rows = []
    for case in cases:
        r = measure(case, args.repeat)
        rows.append(r)
        if "failure" in r:
            print(f"| {r['name']} | {r['failure']} |", flush=True)
            continue
        print(f"| {r['name']} | {r['instructions']} | {100 * r['replayed']:.0f}% | {r['numpy']:.3f} | {r['full']:.2f} "
              f"| {r['replay']:.2f} | {r['full'] / r['numpy']:.2f} | {r['replay'] / r['numpy']:.2f} "
              f"| {r['estimate']:.2f} | {(r['replay'] + r['estimate']) / r['numpy']:.2f} "
              f"| {'yes' if r['same_trace'] else 'NO'} | {'yes' if r['same_profile'] else 'NO'} |", flush=True)
    ok = [r for r in rows if "failure" not in r]
    if ok:
        gm = lambda xs: float(np.exp(np.mean(np.log(xs))))  # noqa: E731
        print(f"geometric mean: full/np {gm([r['full'] / r['numpy'] for r in ok]):.2f}, "
              f"replay/np {gm([r['replay'] / r['numpy'] for r in ok]):.2f}, "
              f"(replay+estimate)/np {gm([(r['replay'] + r['estimate']) / r['numpy'] for r in ok]):.2f}; "
              f"worst replay/np {max(r['replay'] / r['numpy'] for r in ok):.2f}; "
              f"traces equal {sum(r['same_trace'] for r in ok)}/{len(ok)}, "
              f"profiles equal {sum(r['same_profile'] for r in ok)}/{len(ok)}")


if __name__ == "__main__":
    main()
