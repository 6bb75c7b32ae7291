"""Where search saturates: per problem, the headroom to the roofline, the HBM traffic efficiency and the
bound, before (baseline) and after (best kernel of a run store, searched problems only).

Headroom is latency / roofline time (1.0 = at peak), with the performance model's error bar;
traffic efficiency is the problem's minimum HBM bytes over the bytes the kernel moves (1.0 = no
redundant traffic). A problem near peak, or memory-bound with traffic efficiency near 1, leaves a
search little to find (the paper: transpose_matmul at ~80-83% of peak; bmm memory-bound at 0.96
traffic efficiency). Both panels share one row per problem, so no label sits on another.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

from accelopt_nb.reproduce.figures import FigureSink, new_figure
from accelopt_nb.reproduce.nkibench_table import bench_baseline_and_best, paper_shapes_match
from accelopt_nb.reproduce.published import nkibench_trn1

COLUMNS = ["problem", "hw", "roofline_bound", "kernel_class", "searched", "profile_bound_before", "profile_bound_after",
           "headroom_before", "headroom_before_low", "headroom_before_high", "headroom_after", "headroom_after_low",
           "headroom_after_high", "pct_peak_before", "pct_peak_after", "traffic_eff_before", "traffic_eff_after",
           "paper_headroom_before"]
BEFORE, AFTER, PAPER = "#8c8c8c", "#0173b2", "#de8f05"
MARKERS = {"memory": "o", "mm": "s", "vec": "^"}


def saturation_table(preset: str = "small", hw: str = "trn1", best: pd.DataFrame | None = None,
                     problems: Sequence[str] | None = None) -> pd.DataFrame:
    base, tuned = bench_baseline_and_best(preset, hw, best, problems)
    paper = nkibench_trn1().set_index("problem")
    rows = []
    for _, b in base.iterrows():
        p = b["problem"]
        searched = p in tuned.index
        t = tuned.loc[p] if searched else None
        row = {"problem": p, "hw": hw, "roofline_bound": b["bound"], "kernel_class": b["kernel_class"],
               "searched": searched, "profile_bound_before": b["profile_bound"],
               **_headroom("before", b), "pct_peak_before": b["pct_peak"], "traffic_eff_before": b["traffic_efficiency"],
               "paper_headroom_before": 100.0 / paper.loc[p, "baseline_pct_peak"]
               if hw == "trn1" and paper_shapes_match(p, preset) else np.nan}
        if t is not None:
            row.update({"profile_bound_after": t["profile_bound"], **_headroom("after", t), "pct_peak_after": t["pct_peak"],
                        "traffic_eff_after": t["traffic_efficiency"]})
        rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS)


def _headroom(when: str, row: Any) -> dict[str, float]:
    peak = float(row["peak_ms"])
    lat = float(row["latency_ms"])
    low, high = row.get("latency_low_ms"), row.get("latency_high_ms")
    low = lat if low is None or pd.isna(low) else float(low)
    high = lat if high is None or pd.isna(high) else float(high)
    return {f"headroom_{when}": lat / peak, f"headroom_{when}_low": low / peak, f"headroom_{when}_high": high / peak}


def plot_saturation(df: pd.DataFrame, sink: FigureSink, *, preset: str) -> Any:
    """Left: headroom before/after per problem with the model's error bars. Right, on the same rows:
    HBM traffic efficiency before (hollow) and after (filled), marker by roofline bound."""
    d = df.sort_values("headroom_before", ascending=True).reset_index(drop=True)
    fig, (a1, a2) = new_figure(13, 0.42 * len(d) + 2.2, ncols=2)
    y = np.arange(len(d))
    searched = d["searched"].to_numpy()
    h = 0.38
    yb = np.where(searched, y - h / 2, y)
    a1.barh(yb, d["headroom_before"], h, color=BEFORE, label="baseline (model)",
            xerr=[d["headroom_before"] - d["headroom_before_low"], d["headroom_before_high"] - d["headroom_before"]],
            capsize=2, error_kw={"lw": 0.8, "ecolor": "#444"})
    if searched.any():
        s = d[searched]
        a1.barh(y[searched] + h / 2, s["headroom_after"], h, color=AFTER, label="best of run store (model)",
                xerr=[s["headroom_after"] - s["headroom_after_low"], s["headroom_after_high"] - s["headroom_after"]],
                capsize=2, error_kw={"lw": 0.8, "ecolor": "#444"})
    if d["paper_headroom_before"].notna().any():
        a1.scatter(d["paper_headroom_before"], yb, marker="|", s=160, lw=2, color=PAPER, zorder=3,
                   label="paper baseline (trn1, measured, same shapes)")
    a1.set_yticks(y)
    a1.set_yticklabels([f"{p}{' ★' if sr else ''} [{b}]" for p, sr, b in zip(d["problem"], searched, d["roofline_bound"])],
                       fontsize=8)
    a1.axvline(1.0, color="black", lw=0.8)
    a1.set_xlim(0, None)
    a1.set_xlabel("headroom = latency / roofline time (1 = at peak)\nerror bars: the model's interval (80% of held-out kernels)",
                  fontsize=9)
    a1.legend(fontsize=7, loc="lower right")
    a1.grid(axis="x", alpha=0.3)
    for bound, marker in MARKERS.items():
        sel = (d["roofline_bound"] == bound).to_numpy()
        if not sel.any():
            continue
        a2.scatter(d["traffic_eff_before"][sel], y[sel], marker=marker, s=60, facecolors="none", edgecolors=BEFORE,
                   lw=1.4, label=f"{bound}-bound: baseline")
        after = sel & searched
        if after.any():
            a2.scatter(d["traffic_eff_after"][after], y[after], marker=marker, s=60, color=AFTER,
                       label=f"{bound}-bound: best")
    for i in np.flatnonzero(searched):
        r = d.iloc[i]
        if abs(r["traffic_eff_after"] - r["traffic_eff_before"]) > 1e-3:
            a2.annotate("", xy=(r["traffic_eff_after"], i), xytext=(r["traffic_eff_before"], i),
                        arrowprops={"arrowstyle": "->", "lw": 0.8, "color": AFTER})
    a2.set_yticks(y)
    a2.set_yticklabels([f"{v:.0f}%" for v in d["pct_peak_before"]], fontsize=7)
    a2.set_ylabel("baseline % of peak (same rows as left)", fontsize=8)
    a2.set_ylim(a1.get_ylim())
    a2.set_xlim(0, 1.05)
    a2.set_xlabel("HBM traffic efficiency\n(minimum bytes / bytes moved; 1 = no redundant traffic)", fontsize=9)
    a2.legend(fontsize=7, loc="lower left", ncol=2)
    a2.grid(axis="x", alpha=0.3)
    if (d["traffic_eff_before"] > 0.995).all():
        a2.text(0.02, 0.98, f"every baseline moves the minimum HBM bytes at {preset} shapes:\n"
                            "redundant traffic is not what keeps them from peak here",
                transform=a2.transAxes, va="top", fontsize=7, bbox={"facecolor": "white", "edgecolor": "#bbb"})
    fig.suptitle(sink.title(f"Where search saturates: headroom to the roofline and HBM traffic "
                            f"({df['hw'].iloc[0]}, {preset} shapes; ★ searched)"), fontsize=10)
    fig.tight_layout()
    return fig
