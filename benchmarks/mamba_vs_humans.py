"""Mamba: the NKIBench baseline vs the human expert steps of the NKI tutorial (and, optionally, an
AccelOpt kernel), as % of peak on the paper's shape, like the paper's "Mamba vs human experts" figure.

Each kernel is first checked against the NKIBench reference on a smaller shape (functional
simulation), then profiled at the paper's shape (trace-only). The tutorial kernels take a leading
batch dimension; they get the task's arrays with batch = 1.

    python benchmarks/mamba_vs_humans.py [--hw trn1] [--accelopt-kernel best.py] [--plot figures/mamba_vs_humans_trn1.png]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

import nkibench
from accelopt_nb.perf import estimate
from accelopt_nb.sim import SimOptions, load_kernel, simulate
from accelopt_nb.taskfile import l2_relative_error

HERE = Path(__file__).resolve().parent
CHECK_SHAPE = {"M": 1024, "C": 256, "S": 16}     # two 512-long sequence tiles, two channel tiles
PAPER_PERCENT = {"NKIBench baseline": 28.4, "human best (tutorial)": 52.7, "AccelOpt": 54.6}  # the paper, trn1


def batched(inputs):
    delta, u, a, b, c = inputs
    return [delta[None], u[None], a, b[None], c[None]]


def kernels(accelopt: Path | None):
    prob = nkibench.get_problem("mamba")
    out = [("NKIBench baseline", load_kernel(source=prob.baseline_source()), False)]
    tutorial = HERE / "kernels" / "mamba_tutorial.py"
    for name, label in (("mamba_v1", "human v1 (tutorial)"), ("mamba_v2", "human v2 (tutorial)"),
                        ("mamba_v3", "human v3 (tutorial)")):
        out.append((label, load_kernel(tutorial, name=name), True))
    if accelopt is not None:
        out.append(("AccelOpt", load_kernel(accelopt), False))
    return out


def run(hw: str, accelopt: Path | None) -> list[dict]:
    prob = nkibench.get_problem("mamba")
    check = prob.task(CHECK_SHAPE)
    paper = prob.task("paper")
    peak_ms = prob.peak("paper", hw).ms
    inputs = check.get_inputs(seed=0)
    ref = check.forward(*inputs)
    paper_inputs = paper.get_inputs(seed=0)
    rows = []
    for label, kern, needs_batch in kernels(accelopt):
        args = batched(inputs) if needs_batch else check.to_nki(inputs)
        out = simulate(kern, *args).outputs[0].reshape(ref.shape)
        err = l2_relative_error(out, ref)
        big = batched(paper_inputs) if needs_batch else paper.to_nki(paper_inputs)
        prof = estimate(simulate(kern, *big, options=SimOptions(trace_only=True)).trace, hw=hw)
        rows.append({"kernel": label, "l2_error": err, "correct": err < prob.tolerance, "latency_ms": prof.latency,
                     "pct_peak": 100 * peak_ms / prof.latency, "bound": prof.bound,
                     "spill_mb": (prof.spill_save_bytes + prof.spill_reload_bytes) / 1e6})
        r = rows[-1]
        print(f"  {label:22s} {'ok ' if r['correct'] else 'BAD'} err {err:.1e}  {r['latency_ms']:8.3f} ms  "
              f"{r['pct_peak']:5.1f}% of peak  {r['bound']:7s} spills {r['spill_mb']:.0f} MB", flush=True)
    return rows


def plot(rows: list[dict], hw: str, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    labels = [r["kernel"] for r in rows]
    ax.bar(labels, [r["pct_peak"] for r in rows], color=["#888"] + ["#4c72b0"] * 3 + ["#dd8452"] * (len(rows) - 4))
    for i, r in enumerate(rows):
        ax.text(i, r["pct_peak"] + 1, f"{r['pct_peak']:.1f}%", ha="center", fontsize=9)
    ax.axhline(PAPER_PERCENT["human best (tutorial)"], ls="--", color="#4c72b0", lw=1,
               label=f"paper: human best {PAPER_PERCENT['human best (tutorial)']}% (measured)")
    ax.axhline(PAPER_PERCENT["NKIBench baseline"], ls=":", color="#888", lw=1,
               label=f"paper: baseline = tutorial v1, {PAPER_PERCENT['NKIBench baseline']}% (measured)")
    ax.set_ylim(0, max(r["pct_peak"] for r in rows) * 1.18)
    ax.set_ylabel("% of peak throughput")
    ax.set_title(f"Mamba (M=7168, C=256, S=16) on {hw}: baseline vs human expert steps (model)")
    ax.legend(fontsize=8)
    plt.setp(ax.get_xticklabels(), rotation=15, ha="right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hw", default="trn1")
    ap.add_argument("--accelopt-kernel", type=Path, help="a mamba kernel found by AccelOpt (NKIBench layout)")
    ap.add_argument("--plot", type=Path)
    args = ap.parse_args(argv)
    print(f"mamba vs human experts on {args.hw} (checked at {CHECK_SHAPE}, profiled at the paper's shape)")
    rows = run(args.hw, args.accelopt_kernel)
    base = rows[0]["latency_ms"]
    print("\n  speedups over the NKIBench baseline: "
          + ", ".join(f"{r['kernel']} {base / r['latency_ms']:.2f}x" for r in rows[1:]))
    if args.plot:
        plot(rows, args.hw, args.plot)
    return 0 if all(r["correct"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
