"""The paper's 14 NKIBench baselines, unchanged, on the simulator at the paper's shapes.

Each kernel (``NKIBench/kernels/*.py`` of the AccelOpt repository) is loaded as it is and run on the
inputs its own reference file builds (``NKIBench/reference/*.py``: ``get_inputs`` seeded by
``np.random.seed``, ``transform_to_nki_inputs``); its output is compared with that file's
``forward`` by the paper's metric (relative L2 error). Pairs come from the repository's
``summary.json``. Prints, per kernel: status, L2 error, the problem's tolerance, simulation time,
instruction count.

    python benchmarks/paper_baselines.py --accelopt-repo DIR [--trace-only] [--only lora,silu] [--json out.json]

``--trace-only`` skips the arithmetic (shapes and instruction stream only: what the performance model
needs). Without ``--accelopt-repo`` (a local checkout of github.com/zhang677/AccelOpt) it skips.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

import numpy as np

from accelopt_nb.errors import AccelOptError
from accelopt_nb.sim import SimOptions, load_kernel, simulate
from accelopt_nb.taskfile import l2_relative_error


def suite(repo: Path, only: set[str] | None):
    import nkibench
    problems = nkibench.load_external_suite(repo / "NKIBench" / "summary.json")
    return [p for p in problems if only is None or p.name.split("/")[0] in only]


def run_one(problem, trace_only: bool, seed: int) -> dict:
    row: dict = {"kernel": problem.kernel_path.name, "problem": problem.name, "tolerance": problem.tolerance}
    task = problem.task()
    inputs = task.get_inputs(seed=seed)
    args = task.to_nki(inputs)
    try:
        kern = load_kernel(problem.kernel_path)
        t0 = time.perf_counter()
        res = simulate(kern, *args, options=SimOptions(trace_only=trace_only))
        row["sim_s"] = time.perf_counter() - t0
        row["instructions"] = len(res.trace)
    except AccelOptError as exc:
        row.update(status="error", error=f"{type(exc).__name__}: {exc}")
        return row
    except Exception as exc:  # a simulator bug: keep going, report where
        row.update(status="crash", error="".join(traceback.format_exception_only(type(exc), exc)).strip())
        return row
    if trace_only:
        row["status"] = "traced"
        return row
    t0 = time.perf_counter()
    ref = task.forward(*inputs)
    row["numpy_s"] = time.perf_counter() - t0
    refs = ref if isinstance(ref, tuple) else (ref,)
    outs = task.from_nki(res.outputs[0] if len(res.outputs) == 1 else tuple(res.outputs), ref)
    errs = [l2_relative_error(o, r) for o, r in zip(outs, refs)]
    row["l2_error"] = max(errs)
    row["status"] = "correct" if row["l2_error"] <= problem.tolerance else "WRONG"
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--accelopt-repo", type=Path, help="local checkout of github.com/zhang677/AccelOpt")
    ap.add_argument("--trace-only", action="store_true", help="shapes and instructions only, no values")
    ap.add_argument("--only", help="comma-separated problem names (e.g. lora,silu)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, help="write the rows here")
    args = ap.parse_args(argv)
    if args.accelopt_repo is None:
        print("skipped: pass --accelopt-repo DIR (a checkout of github.com/zhang677/AccelOpt) to run the paper's "
              "NKIBench baselines")
        return 0
    if not (args.accelopt_repo / "NKIBench" / "summary.json").is_file():
        print(f"error: {args.accelopt_repo} has no NKIBench/summary.json", file=sys.stderr)
        return 2
    only = set(args.only.split(",")) if args.only else None
    rows = []
    mode = "trace-only" if args.trace_only else "values"
    print(f"{'problem':24s} {'status':8s} {'L2 error':>9s} {'tol':>7s} {'sim s':>8s} {'numpy s':>8s} {'instr':>8s}  ({mode})")
    for problem in suite(args.accelopt_repo, only):
        row = run_one(problem, args.trace_only, args.seed)
        rows.append(row)
        err = f"{row['l2_error']:9.2e}" if "l2_error" in row else f"{'-':>9s}"
        print(f"{row['problem']:24s} {row['status']:8s} {err} {row['tolerance']:7.0e} {row.get('sim_s', float('nan')):8.2f} "
              f"{row.get('numpy_s', float('nan')):8.2f} {row.get('instructions', 0):8d}", flush=True)
        if "error" in row:
            print(f"    {row['error'][:600]}")
    ok = sum(r["status"] in ("correct", "traced") for r in rows)
    print(f"{ok}/{len(rows)} {'traced' if args.trace_only else 'correct'}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0 if ok == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
