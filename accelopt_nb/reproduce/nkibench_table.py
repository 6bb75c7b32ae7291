"""The NKIBench table: % of peak per problem for the baselines and a run store's best kernels,
on trn1 and trn2, next to the paper's published trn1 measurements and headline numbers."""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from accelopt_nb.perf.hardware import presets as hardware_names
from accelopt_nb.reproduce.published import geomean, nkibench_trn1, paper_facts

TABLE_COLUMNS = ["problem", "hw", "bound", "baseline_pct_peak", "best_pct_peak", "best_speedup",
                 "paper_baseline_pct_peak", "paper_best_pct_peak"]


def bench_baseline_and_best(preset: str, hw: str, best: pd.DataFrame | None = None,
                            problems: Sequence[str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`accelopt_nb.bench.run_bench` rows of the baselines and of ``best``'s kernels (trace-only:
    the search already checked them), both indexed by problem. ``best``: :func:`~accelopt_nb.reproduce.
    stores.best_kernels` rows; a problem without a kernel there keeps its baseline row as its best."""
    from accelopt_nb.bench import run_bench

    base = run_bench(problems, preset=preset, hw=hw, trace_only=True, progress=False, on_error="raise") \
        .set_index("problem", drop=False)
    tuned = base.copy()
    if best is not None and len(best):
        with tempfile.TemporaryDirectory() as tmp:
            kernels = {}
            for r in best.itertuples():
                if r.problem in base.index:
                    kernels[r.problem] = Path(tmp) / f"{r.problem}.py"
                    kernels[r.problem].write_text(r.source)
            if kernels:
                found = run_bench(list(kernels), preset=preset, hw=hw, trace_only=True, progress=False,
                                  kernels=kernels, on_error="raise").set_index("problem", drop=False)
                tuned.loc[found.index] = found
    return base, tuned


def nkibench_table(preset: str = "small", hws: Sequence[str] | None = None,
                   best: pd.DataFrame | None = None, problems: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per (problem, hw): baseline and best % of peak, and the paper's trn1 measurements;
    ``hws``: the hardware generations (default: every one the hardware registry ships)."""
    paper = nkibench_trn1().set_index("problem")
    hws = hardware_names() if hws is None else hws
    rows: list[dict[str, Any]] = []
    for hw in hws:
        base, tuned = bench_baseline_and_best(preset, hw, best, problems)
        for b in base.itertuples(index=False):
            best_pct = float(tuned.loc[b.problem, "pct_peak"])
            on_paper = hw == "trn1" and b.problem in paper.index
            rows.append({"problem": b.problem, "hw": hw, "bound": b.bound,
                         "baseline_pct_peak": float(b.pct_peak), "best_pct_peak": best_pct,
                         "best_speedup": best_pct / float(b.pct_peak),
                         "paper_baseline_pct_peak": float(paper.loc[b.problem, "baseline_pct_peak"]) if on_paper else np.nan,
                         "paper_best_pct_peak": float(paper.loc[b.problem, "achieved_pct_peak"]) if on_paper else np.nan})
    return pd.DataFrame(rows, columns=TABLE_COLUMNS)


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Geometric means per hw: this toolkit's baseline and best, and the paper's headline numbers."""
    facts = paper_facts()["nkibench_pct_peak"]
    rows = []
    for hw, g in table.groupby("hw"):
        rows.append({"hw": hw, "problems": len(g), "baseline_pct_peak": geomean(g["baseline_pct_peak"]),
                     "best_pct_peak": geomean(g["best_pct_peak"]),
                     "paper_baseline_pct_peak": facts.get(hw, {}).get("baseline"),
                     "paper_best_pct_peak": facts.get(hw, {}).get("accelopt")})
    return pd.DataFrame(rows)


def plot_table(table: pd.DataFrame, sink: Any, *, preset: str) -> Any:
    """Grouped bars per problem, one panel per hw; dashed lines: geometric means, dotted: the paper's."""
    from accelopt_nb.reproduce.figures import new_figure

    hws = list(dict.fromkeys(table["hw"]))
    fig, axes = new_figure(max(9.0, 0.75 * table["problem"].nunique() + 3), 3.6 * len(hws), ncols=1) \
        if len(hws) == 1 else _stacked(len(hws), table)
    axes = np.atleast_1d(axes)
    s = summary(table).set_index("hw")
    for ax, hw in zip(axes, hws):
        g = table[table["hw"] == hw].reset_index(drop=True)
        x = np.arange(len(g))
        series = [("baseline (this toolkit)", g["baseline_pct_peak"], "#8c8c8c")]
        if (table["best_pct_peak"] != table["baseline_pct_peak"]).any():   # else no store had a better kernel
            series.append(("best of run store (this toolkit)", g["best_pct_peak"], "#4c72b0"))
        if g["paper_baseline_pct_peak"].notna().any():
            series += [("paper baseline (measured)", g["paper_baseline_pct_peak"], "#e0b080"),
                       ("paper best (measured)", g["paper_best_pct_peak"], "#dd8452")]
        w = 0.8 / len(series)
        for i, (label, vals, color) in enumerate(series):
            ax.bar(x + (i - (len(series) - 1) / 2) * w, vals, w, label=label, color=color)
        ax.axhline(s.loc[hw, "baseline_pct_peak"], color="#555", ls="--", lw=1,
                   label=f"geomean: baseline {s.loc[hw, 'baseline_pct_peak']:.1f}%, best {s.loc[hw, 'best_pct_peak']:.1f}%")
        if s.loc[hw, "paper_best_pct_peak"] is not None and not pd.isna(s.loc[hw, "paper_best_pct_peak"]):
            ax.axhline(s.loc[hw, "paper_best_pct_peak"], color="#dd8452", ls=":", lw=1.2,
                       label=f"paper headline: {s.loc[hw, 'paper_baseline_pct_peak']:.0f}% -> "
                             f"{s.loc[hw, 'paper_best_pct_peak']:.0f}%")
        ax.set_xticks(x)
        ax.set_xticklabels(g["problem"], rotation=40, ha="right", fontsize=8)
        ax.set_ylabel(f"% of peak ({hw})")
        ax.set_ylim(0, 119)
        ax.legend(fontsize=7, ncol=3, loc="upper left", frameon=False)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_title(sink.title(f"NKIBench % of peak, {preset} shapes (simulator + performance model) "
                                 "vs the paper's trn1 measurements"), fontsize=9)
    fig.tight_layout()
    return fig


def _stacked(n: int, table: pd.DataFrame):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(max(9.0, 0.75 * table["problem"].nunique() + 3), 3.6 * n))
    return fig, fig.subplots(n, 1)
