"""Evaluation throughput, measured side by side in one run: v1 path vs v2, 1 vs 2 workers, small
vs paper shapes, full vs screen fidelity; per-job overhead; and the screen demo.

    .venv/bin/python benchmarks/eval_throughput.py [--problem silu] [--n-small 12] [--n-paper 3]
        [--n-screen 12] [--demo 100] [--json]

* **before** = the v1 path: a fresh sandboxed Python process per job and every input set and
  float64 reference recomputed (``LocalPoolEvaluator(warm=False)``, ``ACCELOPT_INPUT_CACHE=0``).
* **after** = v2: warm pre-imported workers that fork a limited runner per job, and the shared
  memory-mapped input cache (warmed by one evaluation first, as it is after the first candidate
  of a search).
* **overhead** = per-job wall time of a trivial job through each path minus the same job judged
  in-process without isolation: what isolation itself costs per job.
* **demo** = ``accelopt evaluate --fidelity screen`` on ``--demo`` distinct kernels at the paper
  shape, then ``--fidelity full`` on one of them, both through the CLI, wall times side by side.

Distinct kernels are mechanical variants of the problem's baseline: each gets its own constant
in the kernel body, so no two have the same normalised AST (in-batch deduplication would
otherwise evaluate them once). The cache of results is off everywhere.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
# One BLAS thread here too, as in every worker: the in-process baseline must not get more cores.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import nkibench  # noqa: E402
from accelopt_nb.evaluation import (EvalOptions, LocalPoolEvaluator, Status, evaluate_many,  # noqa: E402
                                    make_job)
from accelopt_nb.evaluation.engine import evaluate_job  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TRIVIAL_TASK = ROOT / "tests" / "fixtures" / "hostile" / "scale_task.py"
TRIVIAL_KERNEL = ROOT / "tests" / "fixtures" / "hostile" / "good_scale.py"


def variants(problem: str, n: int, tag: str) -> list[str]:
    """n distinct kernels: the baseline with a distinct dead constant as the kernel's first line."""
    source = nkibench.get_problem(problem).baseline_source()
    marker = "@nki.jit\ndef kernel("
    head, tail = source.split(marker, 1)
    signature, body = tail.split(":\n", 1)
    indent = " " * (len(body) - len(body.lstrip(" ")))
    out = []
    for i in range(n):
        out.append(f"{head}{marker}{signature}:\n{indent}variant_{tag} = {i}\n{body}")
    return out


class _InputCacheOff:
    def __enter__(self):
        self.old = os.environ.get("ACCELOPT_INPUT_CACHE")
        os.environ["ACCELOPT_INPUT_CACHE"] = "0"

    def __exit__(self, *exc):
        if self.old is None:
            os.environ.pop("ACCELOPT_INPUT_CACHE", None)
        else:
            os.environ["ACCELOPT_INPUT_CACHE"] = self.old


def measure(problem: str, preset: str, fidelity: str, mode: str, workers: int, n: int,
            tag: str) -> dict:
    jobs = [make_job(problem, s, preset=preset, fidelity=fidelity, label=str(i))
            for i, s in enumerate(variants(problem, n, tag))]
    warm = mode == "after"
    with (_InputCacheOff() if not warm else _Nothing()):
        t0 = time.perf_counter()
        with LocalPoolEvaluator(workers=workers, warm=warm) as pool:
            results = list(evaluate_many(jobs, pool, progress=False, cache=False))
        wall = time.perf_counter() - t0
    bad = [r for r in results if r.status is not Status.CORRECT]
    if bad:
        raise SystemExit(f"baseline variant evaluation failed: {bad[0].summary()}")
    lat = {round(r.latency_ms or 0.0, 9) for r in results}
    return {"preset": preset, "fidelity": fidelity, "mode": mode, "workers": workers, "n": n,
            "wall_s": wall, "per_minute": 60.0 * n / wall, "latency_ms": sorted(lat)}


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


def overhead(n: int) -> dict:
    """Per-job wall time of a trivial job: in-process (no isolation), warm fork, fresh process."""
    kernel = TRIVIAL_KERNEL.read_text()
    jobs = [make_job(TRIVIAL_TASK, kernel + f"\nV = {i}\n", options=EvalOptions(seeds=(0,),
                     adversarial=False), label=str(i)) for i in range(n)]
    with tempfile.TemporaryDirectory() as tmp:
        evaluate_job(jobs[0], Path(tmp) / "warmup", isolated=False)
        t0 = time.perf_counter()
        for i, job in enumerate(jobs):
            evaluate_job(job, Path(tmp) / f"j{i}", input_cache=Path(tmp) / "inputs", isolated=False)
        inproc = (time.perf_counter() - t0) / n
    rows = {"in-process (no isolation)": inproc}
    for label, warm in (("v2 warm worker + forked runner", True), ("v1 fresh process", False)):
        with LocalPoolEvaluator(workers=1, warm=warm) as pool:
            pool.submit(jobs[0]).result()          # start the worker, fill the input cache
            t0 = time.perf_counter()
            for job in jobs:
                r = pool.submit(job).result()
                if r.status is not Status.CORRECT:
                    raise SystemExit(f"overhead job failed: {r.summary()}")
            rows[label] = (time.perf_counter() - t0) / n
    return {k: {"per_job_ms": 1e3 * v, "overhead_ms": 1e3 * (v - inproc)} for k, v in rows.items()}


def demo(problem: str, n: int, workers: int) -> dict:
    """The CLI on n distinct kernels at the paper shape with --fidelity screen, then one --full."""
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i, src in enumerate(variants(problem, n, "demo")):
            p = Path(tmp) / f"k{i:03d}.py"
            p.write_text(src)
            paths.append(str(p))
        cli = [sys.executable, "-m", "accelopt_nb.cli", "evaluate", "--problem", problem,
               "--preset", "paper", "--no-cache", "--json"]
        out = {}
        for fidelity, files in (("screen", paths), ("full", paths[:1])):
            extra = ["--workers", str(workers)] if len(files) > 1 else []
            t0 = time.perf_counter()
            proc = subprocess.run([*cli, "--fidelity", fidelity, *extra, *files],
                                  capture_output=True, text=True, cwd=tmp)
            wall = time.perf_counter() - t0
            results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
            statuses = sorted({r["status"] for r in results})
            lat = sorted({round(r["latency_ms"] or 0, 9) for r in results})
            out[fidelity] = {"kernels": len(results), "wall_s": wall, "statuses": statuses,
                             "per_kernel_s": wall / max(1, len(results)), "latency_ms": lat,
                             "exit": proc.returncode}
        return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problem", default="silu")
    ap.add_argument("--n-small", type=int, default=12, help="evaluations per small-shape cell")
    ap.add_argument("--n-paper", type=int, default=3, help="evaluations per paper-shape full cell")
    ap.add_argument("--n-screen", type=int, default=12, help="evaluations per paper-shape screen cell")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--overhead-n", type=int, default=20)
    ap.add_argument("--demo", type=int, default=100, help="kernels in the screen demo (0: skip)")
    ap.add_argument("--skip-paper-full", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    report: dict = {"problem": args.problem, "cpus": os.cpu_count()}
    report["overhead"] = overhead(args.overhead_n)
    # fill the shared input cache once (as the first candidate of a search does)
    for preset in ("small", "paper"):
        list(evaluate_many([make_job(args.problem, variants(args.problem, 1, "fill")[0],
                                     preset=preset, fidelity="full")], progress=False, cache=False))
    cells = [("small", "full", args.n_small)]
    if not args.skip_paper_full:
        cells.append(("paper", "full", args.n_paper))
    cells.append(("paper", "screen", args.n_screen))
    rows = []
    for preset, fidelity, n in cells:
        for w in args.workers:
            modes = ("before", "after") if fidelity == "full" else ("after",)
            for mode in modes:
                rows.append(measure(args.problem, preset, fidelity, mode, w, n,
                                    f"{preset}_{fidelity}_{mode}_{w}"))
                if not args.json:
                    r = rows[-1]
                    print(f"  measured {preset:>5} {fidelity:>6} {mode:>6} {w} worker(s): "
                          f"{r['per_minute']:.1f} evals/min", file=sys.stderr)
    report["rows"] = rows
    if args.demo:
        report["demo"] = demo(args.problem, args.demo, max(args.workers))
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"problem {args.problem}, {os.cpu_count()} CPU cores (shared), result cache off")
    print("\nper-job overhead of isolation (trivial job, 1 worker, serial):")
    for k, v in report["overhead"].items():
        print(f"  {k:<34} {v['per_job_ms']:8.1f} ms/job   overhead {v['overhead_ms']:8.1f} ms")
    print(f"\n{'preset':>6} {'fidelity':>8} {'workers':>7} {'before/min':>11} {'after/min':>10} "
          f"{'speed-up':>9}")
    for preset, fidelity, _ in cells:
        for w in args.workers:
            sel = {r["mode"]: r for r in rows if (r["preset"], r["fidelity"], r["workers"])
                   == (preset, fidelity, w)}
            b, a = sel.get("before"), sel.get("after")
            ratio = f"{a['per_minute'] / b['per_minute']:8.2f}x" if a and b else "        -"
            before = f"{b['per_minute']:.1f}" if b else "-"
            print(f"{preset:>6} {fidelity:>8} {w:>7} {before:>11} {a['per_minute']:>10.1f} {ratio}")
    if "demo" in report:
        d = report["demo"]
        print(f"\naccelopt evaluate --preset paper: {d['screen']['kernels']} kernels --fidelity "
              f"screen in {d['screen']['wall_s']:.1f} s ({d['screen']['per_kernel_s']:.2f} s/kernel, "
              f"statuses {d['screen']['statuses']}), 1 kernel --fidelity full in "
              f"{d['full']['wall_s']:.1f} s (statuses {d['full']['statuses']}); latency screen "
              f"{d['screen']['latency_ms']} vs full {d['full']['latency_ms']} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
