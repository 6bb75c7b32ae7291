"""The NKIBench table: % of peak per problem, like with like.

* This toolkit's baseline kernels and the best kernels a run store found, both through the same
  performance model at the same shapes, each with the model's error bar (the interval that held
  80% of held-out measured kernels of its class). A problem the run store never searched has no
  "best" bar: its best would only repeat its baseline.
* The paper's measured trn1 numbers (its own kernels) are drawn only beside numbers at the same
  shapes (the ``paper`` preset, trn1): at other shapes they are left out and the figure says so.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from accelopt_nb.perf.hardware import presets as hardware_names
from accelopt_nb.reproduce.figures import pct_interval
from accelopt_nb.reproduce.published import geomean, nkibench_trn1, paper_facts

TABLE_COLUMNS = ["problem", "hw", "shape_preset", "bound", "kernel_class", "model_error", "searched", "baseline_pct_peak",
                 "baseline_pct_low", "baseline_pct_high", "best_pct_peak", "best_pct_low", "best_pct_high",
                 "best_speedup", "paper_comparable", "paper_baseline_pct_peak", "paper_best_pct_peak"]
BASE_COLOR, BEST_COLOR, PAPER_COLOR = "#8c8c8c", "#0173b2", "#de8f05"


def bench_baseline_and_best(preset: str, hw: str, best: pd.DataFrame | None = None,
                            problems: Sequence[str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`accelopt_nb.bench.run_bench` rows of the baselines and of ``best``'s kernels (trace-only:
    the search already checked them), both indexed by problem. ``best``: :func:`~accelopt_nb.reproduce.
    stores.best_kernels` rows; ``tuned`` holds only the problems ``best`` has a kernel for."""
    from accelopt_nb.bench import run_bench

    base = run_bench(problems, preset=preset, hw=hw, trace_only=True, progress=False, on_error="raise") \
        .set_index("problem", drop=False)
    tuned = base.iloc[0:0]
    if best is not None and len(best):
        with tempfile.TemporaryDirectory() as tmp:
            kernels = {}
            for r in best.itertuples():
                if r.problem in base.index:
                    kernels[r.problem] = Path(tmp) / f"{r.problem}.py"
                    kernels[r.problem].write_text(r.source)
            if kernels:
                tuned = run_bench(list(kernels), preset=preset, hw=hw, trace_only=True, progress=False,
                                  kernels=kernels, on_error="raise").set_index("problem", drop=False)
    return base, tuned


def _interval(row: Any) -> tuple[float, float]:
    pct, lat = float(row["pct_peak"]), float(row["latency_ms"])
    low, high = row.get("latency_low_ms"), row.get("latency_high_ms")
    if low is None or high is None or pd.isna(low) or pd.isna(high):
        return pct, pct
    return pct_interval(pct, float(low) / lat, float(high) / lat)


def paper_shapes_match(problem: str, preset: str) -> bool:
    """True when ``preset`` gives ``problem`` the shapes the paper measured it at."""
    import nkibench

    paper = nkibench_trn1().set_index("problem")
    if problem not in paper.index:
        return False
    return dict(nkibench.get_problem(problem).shapes(preset)) == json.loads(paper.loc[problem, "shape_json"])


def nkibench_table(preset: str = "small", hws: Sequence[str] | None = None,
                   best: pd.DataFrame | None = None, problems: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per (problem, hw): baseline and (searched problems only) best % of peak with the model's
    interval, and the paper's trn1 measurements where the shapes are the paper's; ``hws``: the hardware
    generations (default: every one the hardware registry ships)."""
    paper = nkibench_trn1().set_index("problem")
    hws = hardware_names() if hws is None else hws
    rows: list[dict[str, Any]] = []
    for hw in hws:
        base, tuned = bench_baseline_and_best(preset, hw, best, problems)
        for _, b in base.iterrows():
            p = b["problem"]
            searched = p in tuned.index
            lo, hi = _interval(b)
            row = {"problem": p, "hw": hw, "shape_preset": preset, "bound": b["bound"], "kernel_class": b["kernel_class"],
                   "model_error": b["estimate_note"],
                   "searched": searched, "baseline_pct_peak": float(b["pct_peak"]), "baseline_pct_low": lo,
                   "baseline_pct_high": hi, "best_pct_peak": np.nan, "best_pct_low": np.nan, "best_pct_high": np.nan,
                   "best_speedup": np.nan,
                   "paper_comparable": hw == "trn1" and paper_shapes_match(p, preset)}
            if searched:
                t = tuned.loc[p]
                row["best_pct_peak"] = float(t["pct_peak"])
                row["best_pct_low"], row["best_pct_high"] = _interval(t)
                row["best_speedup"] = float(b["latency_ms"]) / float(t["latency_ms"])
            on_paper = row["paper_comparable"] and p in paper.index
            row["paper_baseline_pct_peak"] = float(paper.loc[p, "baseline_pct_peak"]) if on_paper else np.nan
            row["paper_best_pct_peak"] = float(paper.loc[p, "achieved_pct_peak"]) if on_paper else np.nan
            rows.append(row)
    return pd.DataFrame(rows, columns=TABLE_COLUMNS)


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Geometric means per hw over like sets: every baseline; the searched problems before and after;
    the paper's measured numbers over the problems drawn beside them, and its headline numbers."""
    facts = paper_facts()["nkibench_pct_peak"]
    rows = []
    for hw, g in table.groupby("hw", sort=False):
        s = g[g["searched"]]
        comparable = g[g["paper_comparable"]]
        rows.append({"hw": hw, "problems": len(g), "baseline_pct_peak": geomean(g["baseline_pct_peak"]),
                     "searched": len(s), "searched_baseline_pct_peak": geomean(s["baseline_pct_peak"]),
                     "searched_best_pct_peak": geomean(s["best_pct_peak"]),
                     "paper_comparable": len(comparable),
                     "paper_measured_baseline_pct_peak": geomean(comparable["paper_baseline_pct_peak"]),
                     "paper_measured_best_pct_peak": geomean(comparable["paper_best_pct_peak"]),
                     "paper_headline_baseline": facts.get(hw, {}).get("baseline"),
                     "paper_headline_accelopt": facts.get(hw, {}).get("accelopt")})
    return pd.DataFrame(rows)


def plot_table(table: pd.DataFrame, sink: Any, *, preset: str) -> Any:
    """One panel per hw: per problem the baseline and (searched problems, marked ★) the best, with the
    model's error bars; the paper's measured trn1 numbers as markers where the shapes are the paper's."""
    from matplotlib.figure import Figure

    hws = list(dict.fromkeys(table["hw"]))
    n = table["problem"].nunique()
    fig = Figure(figsize=(max(9.0, 0.75 * n + 3), 3.9 * len(hws)))
    axes = np.atleast_1d(fig.subplots(len(hws), 1))
    s = summary(table).set_index("hw")
    for ax, hw in zip(axes, hws):
        g = table[table["hw"] == hw].reset_index(drop=True)
        x = np.arange(len(g))
        w = 0.38
        searched = g["searched"].to_numpy()
        xb = np.where(searched, x - w / 2, x)
        ax.bar(xb, g["baseline_pct_peak"], w, color=BASE_COLOR, label="baseline (this toolkit's kernel)",
               yerr=[g["baseline_pct_peak"] - g["baseline_pct_low"], g["baseline_pct_high"] - g["baseline_pct_peak"]],
               capsize=2, ecolor="#444", error_kw={"lw": 0.8})
        if searched.any():
            gs = g[searched]
            ax.bar(x[searched] + w / 2, gs["best_pct_peak"], w, color=BEST_COLOR, hatch="..", edgecolor="white",
                   label="best of the run store (searched ★)", capsize=2, ecolor="#444", error_kw={"lw": 0.8},
                   yerr=[gs["best_pct_peak"] - gs["best_pct_low"], gs["best_pct_high"] - gs["best_pct_peak"]])
        comp = g["paper_comparable"].to_numpy() & g["paper_baseline_pct_peak"].notna().to_numpy()
        if comp.any():
            gc = g[comp]
            ax.scatter(x[comp], gc["paper_baseline_pct_peak"], marker="_", s=260, lw=2.5, color=PAPER_COLOR, zorder=4,
                       label="paper baseline, measured trn1 (its kernels, same shapes)")
            ax.scatter(x[comp], gc["paper_best_pct_peak"], marker="^", s=36, color=PAPER_COLOR, zorder=4,
                       label="paper best, measured trn1")
        summ = s.loc[hw]
        text = f"geomean: all baselines {summ['baseline_pct_peak']:.1f}%"
        if summ["searched"]:
            text += (f"; searched ({int(summ['searched'])}): {summ['searched_baseline_pct_peak']:.1f}% -> "
                     f"{summ['searched_best_pct_peak']:.1f}%")
        if summ["paper_comparable"]:
            text += (f"; paper measured ({int(summ['paper_comparable'])}): "
                     f"{summ['paper_measured_baseline_pct_peak']:.1f}% -> {summ['paper_measured_best_pct_peak']:.1f}% "
                     f"(headline {summ['paper_headline_baseline']}% -> {summ['paper_headline_accelopt']}% at T=16)")
        elif hw == "trn1":
            text += f"; the paper's trn1 measurements are at the paper's shapes: not drawn beside {preset} shapes"
        if g["model_error"].fillna("").str.contains("(prior: ", regex=False).all():
            text += f"\nerror bars: priors (x0.5-x2 or wider), no {hw} kernel of these classes has been measured"
        ax.axhline(summ["baseline_pct_peak"], color="#555", ls="--", lw=0.8)
        ax.text(0.0, 1.01, text, transform=ax.transAxes, fontsize=7, va="bottom")
        ax.set_xticks(x)
        ax.set_xticklabels([f"{p} ★" if sr else p for p, sr in zip(g["problem"], searched)], rotation=40, ha="right",
                           fontsize=8)
        ax.set_ylabel(f"% of peak ({hw}, {preset} shapes)")
        ax.set_ylim(0, 119)
        ax.legend(fontsize=7, ncol=2, loc="upper left", frameon=False)
        ax.grid(axis="y", alpha=0.3)
    unsearched = int((~table.drop_duplicates("problem")["searched"]).sum())
    fig.suptitle(sink.title(f"NKIBench % of peak at {preset} shapes (simulator + performance model, error bars: "
                            f"80% of held-out kernels); {unsearched} of {n} problems not searched (baseline only)"),
                 fontsize=9)
    fig.tight_layout()
    return fig
