"""Evaluation throughput: evaluations per minute with 1 and 2 local workers, in one run.

    .venv/bin/python benchmarks/eval_throughput.py [--problem matmul] [--preset small] [--n 16]

Each evaluation is the full service path (static check, sandboxed worker process, 5 seeds plus
the problem's adversarial inputs on the simulator, performance-model profile), with the cache off.
The kernels are the problem's baseline with a distinct comment each, so no two are identical.
Scaling efficiency = (rate with W workers / rate with 1 worker) / W.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import nkibench  # noqa: E402
from accelopt_nb.evaluation import LocalPoolEvaluator, Status, evaluate_many, make_job  # noqa: E402


def measure(problem: str, preset: str, n: int, workers: int) -> dict:
    source = nkibench.get_problem(problem).baseline_source()
    jobs = [make_job(problem, f"{source}\n# variant {workers}-{i}\n", preset=preset, label=str(i))
            for i in range(n)]
    t0 = time.perf_counter()
    with LocalPoolEvaluator(workers=workers) as pool:
        results = list(evaluate_many(jobs, pool, progress=False, cache=False))
    wall = time.perf_counter() - t0
    bad = [r for r in results if r.status is not Status.CORRECT]
    if bad:
        raise SystemExit(f"baseline evaluation failed: {bad[0].summary()}")
    per_eval = sorted(r.wall_time_s for r in results)
    return {"workers": workers, "evaluations": n, "wall_s": wall, "per_minute": 60.0 * n / wall,
            "median_eval_s": per_eval[len(per_eval) // 2]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problem", default="matmul")
    ap.add_argument("--preset", default="small")
    ap.add_argument("--n", type=int, default=16, help="evaluations per worker setting")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeat", type=int, default=1,
                    help="interleaved repetitions; the median rate per setting is reported (use >1 "
                         "on a shared machine, where other load shifts single measurements)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    # warm the file-system caches (imports, bytecode) so the first setting is not penalised
    measure(args.problem, args.preset, 2, 1)
    runs: dict[int, list[dict]] = {w: [] for w in args.workers}
    for _ in range(args.repeat):
        for w in args.workers:
            runs[w].append(measure(args.problem, args.preset, args.n, w))
    rows = []
    for w in args.workers:
        ordered = sorted(runs[w], key=lambda r: r["per_minute"])
        row = dict(ordered[len(ordered) // 2])
        row["all_per_minute"] = [round(r["per_minute"], 1) for r in runs[w]]
        rows.append(row)
    base = rows[0]["per_minute"] / rows[0]["workers"]
    for r in rows:
        r["scaling_efficiency"] = r["per_minute"] / (base * r["workers"])
    if args.json:
        print(json.dumps({"problem": args.problem, "preset": args.preset, "cpus": os.cpu_count(),
                          "rows": rows}, indent=1))
        return 0
    print(f"problem {args.problem} (preset {args.preset}), {args.n} evaluations per setting, "
          f"{args.repeat} interleaved repetition(s), {os.cpu_count()} CPU cores")
    print(f"{'workers':>7} {'wall s':>8} {'evals/min':>10} {'median eval s':>14} {'efficiency':>11}"
          f"  all runs (evals/min)")
    for r in rows:
        print(f"{r['workers']:>7} {r['wall_s']:>8.2f} {r['per_minute']:>10.1f} "
              f"{r['median_eval_s']:>14.2f} {r['scaling_efficiency']:>10.0%}  {r['all_per_minute']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
