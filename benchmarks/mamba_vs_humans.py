"""Mamba: the NKI tutorial's v1 (the paper's baseline) and the human expert steps v2, v3 (and, optionally, an
AccelOpt kernel), as % of peak on the paper's shape with the model's error bars, beside the paper's measured
trn1 numbers, like the paper's "Mamba vs human experts" figure.

A thin command line over :mod:`accelopt_nb.reproduce.humans` (the notebook
``notebooks/24_human_experts.ipynb`` draws the same figure from a run store).

    python benchmarks/mamba_vs_humans.py [--hw trn1] [--accelopt-kernel best.py] [--plot figures/mamba_vs_humans_trn1.png]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from accelopt_nb.reproduce.humans import CHECK_SHAPE, mamba_progression, plot_humans


def run(hw: str, accelopt: Path | None) -> list[dict]:
    df = mamba_progression(hw, accelopt.read_text() if accelopt else None)
    for r in df.itertuples():
        measured = f"  measured {r.measured_pct_peak:5.1f}%" if r.measured_pct_peak == r.measured_pct_peak else ""
        if r.pct_peak != r.pct_peak:        # the paper's own agent: a measurement only
            print(f"  {r.kernel:28s}{measured}", flush=True)
            continue
        print(f"  {r.kernel:28s} {'ok ' if r.correct else 'BAD'} err {r.l2_error:.1e}  {r.latency_ms:8.3f} ms  "
              f"{r.pct_peak:5.1f}% of peak ({r.pct_peak_low:.1f}-{r.pct_peak_high:.1f})  {r.bound:7s} "
              f"spills {r.spill_mb:.0f} MB{measured}", flush=True)
    return df.to_dict("records")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hw", default="trn1")
    ap.add_argument("--accelopt-kernel", type=Path, help="a mamba kernel found by AccelOpt (NKIBench layout)")
    ap.add_argument("--plot", type=Path)
    args = ap.parse_args(argv)
    print(f"mamba vs human experts on {args.hw} (checked at {CHECK_SHAPE}, profiled at the paper's shape)")
    rows = run(args.hw, args.accelopt_kernel)
    modelled = [r for r in rows[1:] if r["pct_peak"] == r["pct_peak"]]
    print("\n  speedups over v1 (the model): " + ", ".join(f"{r['kernel']} {r['speedup']:.2f}x" for r in modelled))
    if args.plot:
        import pandas as pd

        from accelopt_nb.reproduce.figures import FigureSink, Provenance
        sink = FigureSink(args.plot.parent, "mamba_vs_humans")
        fig = plot_humans(pd.DataFrame(rows), sink, hw=args.hw, shape_label="(M=7168, C=256, S=16)")
        Provenance(model="none" if args.accelopt_kernel is None else f"the kernel in {args.accelopt_kernel.name}",
                   shapes="paper (M=7168, C=256, S=16)",
                   fidelity=f"{args.hw} performance model, trace-only (correct at M=1024); measured: the paper's trn1 "
                            "numbers").stamp(fig)
        fig.savefig(args.plot, dpi=110, bbox_inches="tight")
    return 0 if all(r["correct"] for r in rows if r["pct_peak"] == r["pct_peak"]) else 1


if __name__ == "__main__":
    sys.exit(main())
