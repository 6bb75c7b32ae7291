"""Where search saturates: per problem, the headroom to the roofline, the HBM traffic efficiency and the
bound, before (baseline) and after (best kernel of a run store).

Headroom is latency / roofline time (1.0 = at peak); traffic efficiency is the problem's minimum HBM bytes
over the bytes the kernel moves (1.0 = no redundant traffic). A problem near peak, or memory-bound with
traffic efficiency near 1, leaves a search little to find (the paper: transpose_matmul at ~80-83% of
peak; bmm memory-bound at 0.96 traffic efficiency).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

from accelopt_nb.reproduce.figures import FigureSink, new_figure
from accelopt_nb.reproduce.nkibench_table import bench_baseline_and_best
from accelopt_nb.reproduce.published import nkibench_trn1

COLUMNS = ["problem", "hw", "roofline_bound", "profile_bound_before", "profile_bound_after", "headroom_before",
           "headroom_after", "pct_peak_before", "pct_peak_after", "traffic_eff_before", "traffic_eff_after",
           "paper_headroom_before"]


def saturation_table(preset: str = "small", hw: str = "trn1", best: pd.DataFrame | None = None,
                     problems: Sequence[str] | None = None) -> pd.DataFrame:
    base, tuned = bench_baseline_and_best(preset, hw, best, problems)
    paper = nkibench_trn1().set_index("problem")
    rows = []
    for b in base.itertuples(index=False):
        t = tuned.loc[b.problem]
        rows.append({"problem": b.problem, "hw": hw, "roofline_bound": b.bound,
                     "profile_bound_before": b.profile_bound, "profile_bound_after": t["profile_bound"],
                     "headroom_before": b.latency_ms / b.peak_ms, "headroom_after": t["latency_ms"] / t["peak_ms"],
                     "pct_peak_before": b.pct_peak, "pct_peak_after": t["pct_peak"],
                     "traffic_eff_before": b.traffic_efficiency, "traffic_eff_after": t["traffic_efficiency"],
                     "paper_headroom_before": 100.0 / paper.loc[b.problem, "baseline_pct_peak"]
                     if hw == "trn1" and b.problem in paper.index else np.nan})
    return pd.DataFrame(rows, columns=COLUMNS)


def plot_saturation(df: pd.DataFrame, sink: FigureSink, *, preset: str) -> Any:
    """Left: headroom before/after per problem (log scale). Right: traffic efficiency vs % of peak."""
    fig, (a1, a2) = new_figure(14, 4.8, ncols=2)
    d = df.sort_values("headroom_before", ascending=False).reset_index(drop=True)
    y = np.arange(len(d))
    a1.barh(y - 0.2, d["headroom_before"], 0.4, color="#8c8c8c", label="baseline")
    a1.barh(y + 0.2, d["headroom_after"], 0.4, color="#4c72b0", label="best of run store")
    if d["paper_headroom_before"].notna().any():
        a1.scatter(d["paper_headroom_before"], y - 0.2, marker="|", s=120, color="#dd8452", zorder=3,
                   label="paper baseline (trn1, measured)")
    a1.set_yticks(y)
    a1.set_yticklabels([f"{p} [{b}]" for p, b in zip(d["problem"], d["roofline_bound"])], fontsize=8)
    a1.axvline(1.0, color="black", lw=0.8)
    a1.set_xlabel("headroom = latency / roofline time (1 = at peak) [roofline bound]")
    a1.legend(fontsize=7)
    a1.grid(axis="x", alpha=0.3)
    markers = {"memory": "o", "mm": "s", "vec": "^"}
    for bound, g in df.groupby("roofline_bound"):
        a2.scatter(g["traffic_eff_before"], g["pct_peak_before"], marker=markers.get(bound, "x"), s=70,
                   facecolors="none", edgecolors="#555", label=f"{bound}-bound, baseline (hollow)")
        a2.scatter(g["traffic_eff_after"], g["pct_peak_after"], marker=markers.get(bound, "x"), color="#4c72b0",
                   label=f"{bound}-bound, best")
        for r in g.itertuples():
            if (r.traffic_eff_before, r.pct_peak_before) != (r.traffic_eff_after, r.pct_peak_after):
                a2.annotate("", xy=(r.traffic_eff_after, r.pct_peak_after),
                            xytext=(r.traffic_eff_before, r.pct_peak_before), arrowprops={"arrowstyle": "->", "lw": 0.7})
            a2.annotate(r.problem, (r.traffic_eff_after, r.pct_peak_after), fontsize=6, xytext=(3, 2),
                        textcoords="offset points")
    a2.set_xlabel("HBM traffic efficiency (minimum bytes / bytes moved)")
    a2.set_ylabel("% of peak")
    a2.set_xlim(0, 1.08)
    a2.set_ylim(0, 105)
    a2.legend(fontsize=6, ncol=2)
    a2.grid(alpha=0.3)
    fig.suptitle(sink.title(f"Where search saturates: headroom to the roofline, traffic and bound "
                            f"({df['hw'].iloc[0]}, {preset} shapes)"), fontsize=10)
    fig.tight_layout()
    return fig
