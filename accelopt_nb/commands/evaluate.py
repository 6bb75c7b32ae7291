"""`accelopt evaluate KERNEL.py --problem NAME`: the evaluation service from the command line.

Exit status: 0 when every kernel is correct, 1 when some kernel is not (rejected, failed, cheat,
...), 2 for usage and infrastructure errors (unknown problem, missing toolchain).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from accelopt_nb.commands import emit_json
from accelopt_nb.errors import ConfigError
from accelopt_nb.evaluation.api import evaluate, make_job
from accelopt_nb.evaluation.backends import backend_names
from accelopt_nb.evaluation.job import FIDELITIES, EvalOptions
from accelopt_nb.evaluation.result import EvalResult, Status
from accelopt_nb.perf.hardware import presets as hardware_names
from accelopt_nb.renamed import add_renamed
from nkibench.problem import DEFAULT_TOLERANCE, PRESETS

NAME = "evaluate"
HELP = ("check NKI kernels for correctness (seeds, adversarial inputs, coverage, precision) and "
        "profile them, sandboxed, on the simulator or real Trainium")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("kernels", nargs="+", metavar="KERNEL.py", help="kernel file(s) defining `kernel`")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--problem", help="NKIBench problem name (e.g. matmul)")
    src.add_argument("--task", help="task file in the NKIBench format instead of a problem")
    p.add_argument("--shapes", choices=PRESETS, default="small", help="shape preset of --problem (default small)")
    add_renamed(p, "--preset", "--shapes", dest="shapes", choices=PRESETS)
    p.add_argument("--backend", choices=backend_names(), default="simulator")
    p.add_argument("--fidelity", choices=FIDELITIES, default="full",
                   help="full (default): every check at --shapes; screen: seeds and adversarial "
                        "inputs at the small shape, latency from a trace-only run at --shapes; "
                        "confirm: full checks at --shapes, for the kernels that matter; "
                        "trace: no correctness check, only the latency of a trace-only run at --shapes")
    p.add_argument("--hw", choices=hardware_names(), default="trn1")
    p.add_argument("--workers", type=int, default=None,
                   help="parallel local workers (default: one per core, or per NeuronCore)")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="Dask scheduler address (tcp://host:8786) to evaluate on a cluster")
    p.add_argument("--timeout", type=float, default=None,
                   help="wall-time limit per kernel, s (default: 180 for the small preset, 1800 for paper)")
    p.add_argument("--memory-mb", type=int, default=None,
                   help="memory limit per kernel, MiB (default: 4096 for the small preset, 16384 for paper)")
    p.add_argument("--tolerance", type=float, default=None,
                   help=f"relative L2 tolerance (default: the problem's, {DEFAULT_TOLERANCE:g} unless it says otherwise)")
    p.add_argument("--no-adversarial", action="store_true", help="skip the adversarial inputs")
    p.add_argument("--no-cache", action="store_true", help="do not read or write the result cache")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object per kernel (with a `status` field)")


def run(args: argparse.Namespace) -> int:
    problem = Path(args.task) if args.task else args.problem
    if args.task and not Path(args.task).is_file():
        raise ConfigError(f"task file not found: {args.task}")
    cache = not args.no_cache
    sources = []
    for k in args.kernels:
        path = Path(k)
        if not path.is_file():
            raise ConfigError(f"kernel file not found: {path}")
        sources.append((path, path.read_text()))

    def options(path: Path) -> EvalOptions:
        return EvalOptions(timeout_s=args.timeout, memory_mb=args.memory_mb,
                           tolerance=args.tolerance, adversarial=not args.no_adversarial,
                           kernel_filename=path.name)

    if len(sources) == 1 and args.workers is None and args.scheduler is None:
        path, text = sources[0]
        results = [evaluate(problem, text, backend=args.backend, hw=args.hw, preset=args.shapes,
                            options=options(path), cache=cache, label=str(path),
                            fidelity=args.fidelity)]
    else:
        results = _evaluate_batch(args, problem, sources, options, cache)

    for r in results:
        if args.json:
            emit_json(r.to_dict())
        else:
            print(f"== {r.label}")
            print(r.summary())
    passed = (Status.PROFILED,) if args.fidelity == "trace" else (Status.CORRECT,)
    return 0 if all(r.status in passed for r in results) else 1


def _evaluate_batch(args, problem, sources, options, cache) -> list[EvalResult]:
    from accelopt_nb.evaluation.executors import DaskEvaluator, LocalPoolEvaluator
    from accelopt_nb.evaluation.service import evaluate_many

    jobs = [make_job(problem, text, backend=args.backend, hw=args.hw, preset=args.shapes,
                     options=options(path), label=str(path), fidelity=args.fidelity)
            for path, text in sources]
    # Neuron jobs additionally wait for a NeuronCore lease, so extra workers never share a core.
    executor = DaskEvaluator(args.scheduler) if args.scheduler else LocalPoolEvaluator(args.workers)
    order = {str(p): i for i, (p, _) in enumerate(sources)}
    with executor:
        results = list(evaluate_many(jobs, executor, progress=not args.json, cache=cache))
    return sorted(results, key=lambda r: order.get(r.label or "", 0))
