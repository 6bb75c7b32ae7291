"""Fidelity of the performance model against published NKI tutorial latencies (trn1).

Runs our own tutorial-style kernels (benchmarks/kernels/) through the simulator in trace-only
mode, estimates their latency with accelopt_nb.perf, and compares with the published numbers
(nki_hw_facts.md §5): per step, simulated vs published latency, the step's speedup vs the
published speedup, and the Spearman rank correlation over all points.

Target: every step ordered as published, each step's speedup within 25% of the published one.

    python benchmarks/perf_fidelity.py [--hw trn1] [--only matmul|mamba] [--json OUT.json]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import ml_dtypes
import numpy as np

from accelopt_nb.kernels import KERNELS_DIR as KERNELS
from accelopt_nb.perf import estimate
from accelopt_nb.sim import SimOptions, load_kernel, simulate


@dataclass(frozen=True)
class Point:
    suite: str
    label: str
    file: str
    kernel: str
    shape: dict
    published_ms: float


MATMUL = dict(M=4096, K=8192, N=8192)
POINTS = [
    Point("matmul", "tiled", "matmul_tutorial.py", "matmul_tiled", MATMUL, 51.80),
    Point("matmul", "hoisted loads", "matmul_tutorial.py", "matmul_hoisted", MATMUL, 42.96),
    Point("matmul", "blocked free dims", "matmul_tutorial.py", "matmul_blocked_free", MATMUL, 22.07),
    Point("matmul", "blocked M/N/K", "matmul_tutorial.py", "matmul_blocked_mnk", MATMUL, 6.97),
    Point("mamba", "v1 (L=512)", "mamba_tutorial.py", "mamba_v1", dict(batch=1, channels=4096, seq=512, state=16), 2.34),
    Point("mamba", "v2 (L=512)", "mamba_tutorial.py", "mamba_v2", dict(batch=1, channels=4096, seq=512, state=16), 1.61),
    Point("mamba", "v2 (L=8192)", "mamba_tutorial.py", "mamba_v2", dict(batch=1, channels=4096, seq=8192, state=16), 53.33),
    Point("mamba", "v3 (L=8192)", "mamba_tutorial.py", "mamba_v3", dict(batch=1, channels=4096, seq=8192, state=16), 27.8),
]
# consecutive points whose ratio is a published optimization step
STEPS = [(0, 1), (1, 2), (2, 3), (4, 5), (6, 7)]


def inputs_for(p: Point) -> list[np.ndarray]:
    """Shape-only inputs (trace-only mode never reads them), allocated lazily by the OS."""
    s = p.shape
    if p.suite == "matmul":
        bf16 = ml_dtypes.bfloat16
        return [np.empty((s["K"], s["M"]), dtype=bf16), np.empty((s["K"], s["N"]), dtype=bf16)]
    b, c, l, st = s["batch"], s["channels"], s["seq"], s["state"]
    f32 = np.float32
    return [np.empty((b, c, l), f32), np.empty((b, c, l), f32), np.empty((c, st), f32),
            np.empty((b, st, l), f32), np.empty((b, st, l), f32)]


def spearman(x: list[float], y: list[float]) -> float:
    rx = np.argsort(np.argsort(x)).astype(float)
    ry = np.argsort(np.argsort(y)).astype(float)
    return float(np.corrcoef(rx, ry)[0, 1])


def run(hw: str, only: str | None) -> dict:
    rows = []
    for p in POINTS:
        if only and p.suite != only:
            rows.append(None)
            continue
        kern = load_kernel(KERNELS / p.file, name=p.kernel)
        t0 = time.perf_counter()
        res = simulate(kern, *inputs_for(p), options=SimOptions(trace_only=True))
        t1 = time.perf_counter()
        prof = estimate(res.trace, hw=hw)
        t2 = time.perf_counter()
        rows.append(dict(suite=p.suite, label=p.label, kernel=p.kernel, shape=p.shape, published_ms=p.published_ms,
                         simulated_ms=prof.latency, instructions=len(res.trace), trace_s=t1 - t0, model_s=t2 - t1,
                         bound=prof.bound, spill_mb=(prof.spill_save_bytes + prof.spill_reload_bytes) / 1e6,
                         vector_active=prof.vector_engine_active_time_percent,
                         tensor_active=prof.tensor_engine_active_time_percent,
                         dma_active=prof.dma_active_time_percent))
        r = rows[-1]
        print(f"  {p.suite:6s} {p.label:18s} sim {r['simulated_ms']:8.3f} ms  published {p.published_ms:7.2f} ms  "
              f"[{r['instructions']} instr, trace {r['trace_s']:.1f}s, model {r['model_s']:.1f}s, {r['bound']}]",
              flush=True)
    steps = []
    for a, b in STEPS:
        ra, rb = rows[a], rows[b]
        if ra is None or rb is None:
            continue
        pub = ra["published_ms"] / rb["published_ms"]
        sim = ra["simulated_ms"] / rb["simulated_ms"]
        steps.append(dict(step=f"{ra['suite']}: {ra['label']} -> {rb['label']}", published_speedup=pub,
                          simulated_speedup=sim, ratio=sim / pub, ordered=(sim > 1) == (pub > 1),
                          within_25=abs(sim / pub - 1) <= 0.25))
    done = [r for r in rows if r is not None]
    rho = spearman([r["simulated_ms"] for r in done], [r["published_ms"] for r in done]) if len(done) > 2 else float("nan")
    return dict(hw=hw, points=done, steps=steps, spearman=rho,
                all_ordered=all(s["ordered"] for s in steps), all_within_25=all(s["within_25"] for s in steps))


def plot(out: dict, path: Path) -> None:
    """One panel per tutorial: published and simulated latency of each step, log scale."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    suites = sorted({p["suite"] for p in out["points"]})
    fig, axes = plt.subplots(1, len(suites), figsize=(6 * len(suites), 4.2), squeeze=False)
    for ax, suite in zip(axes[0], suites):
        pts = [p for p in out["points"] if p["suite"] == suite]
        x = range(len(pts))
        ax.plot(x, [p["published_ms"] for p in pts], "o-", label="published (trn1)")
        ax.plot(x, [p["simulated_ms"] for p in pts], "s--", label=f"accelopt_nb model ({out['hw']})")
        ax.set_xticks(list(x), [p["label"] for p in pts], rotation=20, ha="right", fontsize=8)
        ax.set_yscale("log")
        ax.set_ylabel("latency (ms)")
        ax.set_title(f"{suite} tutorial steps")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3, which="both")
    fig.suptitle(f"Performance model fidelity: Spearman {out['spearman']:.2f}, "
                 f"every step within 25%: {out['all_within_25']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hw", default="trn1")
    ap.add_argument("--only", choices=("matmul", "mamba"))
    ap.add_argument("--json", type=Path, help="also write the results as JSON")
    ap.add_argument("--plot", type=Path, help="also draw published vs simulated latency per step (PNG)")
    args = ap.parse_args(argv)
    print(f"perf model fidelity on {args.hw} (published numbers are trn1)")
    out = run(args.hw, args.only)
    print()
    print(f"  {'step':52s} {'published':>9s} {'simulated':>9s} {'sim/pub':>8s}")
    for s in out["steps"]:
        flag = "ok" if s["ordered"] and s["within_25"] else ("ORDER" if not s["ordered"] else ">25%")
        print(f"  {s['step']:52s} {s['published_speedup']:8.2f}x {s['simulated_speedup']:8.2f}x "
              f"{s['ratio']:8.2f}  {flag}")
    print(f"\n  Spearman rank correlation (simulated vs published latency): {out['spearman']:.3f}")
    print(f"  every step ordered as published: {out['all_ordered']}; every speedup within 25%: {out['all_within_25']}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    if args.plot:
        plot(out, args.plot)
    return 0 if out["all_ordered"] and out["all_within_25"] else 1


if __name__ == "__main__":
    sys.exit(main())
