"""`accelopt bench`: correctness and profile of the NKIBench baselines, as % of peak.

Writes ``<out>/nkibench_<preset>_<hw>_<backend>.{csv,json,png}`` and prints the table. On the
small preset each kernel is checked on the paper's five seeds plus the adversarial inputs; on the
paper preset on seed 42 only (``--seeds`` overrides), or not at all with ``--trace-only``.
"""
from __future__ import annotations

import argparse
import time

from accelopt_nb.commands import emit_json
from accelopt_nb.evaluation.backends import backend_names
from accelopt_nb.perf.hardware import presets as hardware_names
from accelopt_nb.renamed import add_renamed
from nkibench.problem import PRESETS

NAME = "bench"
HELP = "benchmark the NKIBench baselines (or your kernels): correctness, latency, % of peak, chart"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hw", choices=hardware_names(), default="trn1", help="hardware generation (default trn1)")
    p.add_argument("--problems", nargs="+", metavar="NAME", help="problems to run (default: all)")
    p.add_argument("--shapes", default="small", choices=PRESETS,
                   help="shape preset: small (seconds, 5 seeds) or paper (the paper's shapes; default small)")
    add_renamed(p, "--preset", "--shapes", dest="shapes", choices=PRESETS)
    p.add_argument("--backend", choices=backend_names(), default="simulator",
                   help="simulator (CPU simulator + performance model), neuron (real Trainium), or a registered "
                        "plug-in (both through the evaluation service)")
    p.add_argument("--out", default="bench_out", help="output directory for CSV, JSON and PNG (default bench_out)")
    p.add_argument("--seeds", nargs="+", type=int, metavar="SEED",
                   help="seeds to check (default: 0 21 42 63 84 on small, 42 on paper)")
    p.add_argument("--trace-only", action="store_true",
                   help="skip correctness and arithmetic: record the instruction stream and profile it")
    adv = p.add_mutually_exclusive_group()
    adv.add_argument("--adversarial", dest="adversarial", action="store_true", default=None,
                     help="also check the adversarial inputs (default on the small preset)")
    adv.add_argument("--no-adversarial", dest="adversarial", action="store_false",
                     help="skip the adversarial inputs")
    p.add_argument("--kernel", action="append", default=[], metavar="PROBLEM=FILE",
                   help="benchmark FILE instead of PROBLEM's baseline (repeatable)")
    p.add_argument("--problem-dir", action="append", default=[], metavar="DIR",
                   help="register a directory of extra problem folders (repeatable)")
    p.add_argument("--sandbox", action="store_true",
                   help="judge each kernel in a sandboxed worker instead of in this process")
    p.add_argument("--workers", type=int, default=1,
                   help="problems evaluated at once, each in a sandboxed worker (default 1: in this process; "
                        "try the core count)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the JSON summary instead of the table")


def run(args: argparse.Namespace) -> int:
    import nkibench
    from accelopt_nb.bench import format_table, run_bench, write_outputs
    from accelopt_nb.errors import ConfigError

    for d in args.problem_dir:
        nkibench.register_problem_dir(d)
    kernels = {}
    for item in args.kernel:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise ConfigError(f"--kernel expects PROBLEM=FILE, got {item!r}")
        kernels[name] = path
    problems = args.problems
    if problems is None and kernels:
        problems = sorted(kernels)
    t0 = time.monotonic()
    df = run_bench(problems, preset=args.shapes, hw=args.hw, backend=args.backend, seeds=args.seeds,
                   trace_only=args.trace_only, adversarial=args.adversarial, kernels=kernels,
                   progress=not args.no_progress, workers=args.workers, sandbox=args.sandbox)
    wall = time.monotonic() - t0
    paths = write_outputs(df, args.out, meta={"command": "accelopt bench", "wall_s": wall,
                                              "trace_only": args.trace_only, "sandbox": args.sandbox})
    if args.json:
        emit_json({**df.attrs["summary"], "wall_s": wall, "files": {k: str(v) for k, v in paths.items()}}, indent=2)
    else:
        print(format_table(df))
        print(f"wall time {wall:.1f} s; wrote {paths['csv']}, {paths['json']}, {paths['png']}")
    failed = df[df["correct"] == False]  # noqa: E712
    for r in failed.to_dict("records"):
        print(f"{r['problem']}: {r['status']}: {r['message']}")
    return 1 if len(failed) or (df["status"] == "error").any() else 0
