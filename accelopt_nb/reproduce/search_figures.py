"""Figures of the search ablations, drawn from experiment run stores (``root/<arm>/<problem>``):

* beam search vs repeated sampling at the same budget: best speedup vs iteration and vs cost;
* optimization memory: with and without, and ExpN/TopK sweeps: iterations and cost to reach a speedup;
* cost: open vs proprietary models from the cost ledger, with the dated price table on the figure.

The curves are :func:`accelopt_nb.experiments.collect_curves` rows; everything here is a pure
function of them (and of the price snapshots the runs recorded), so figures redraw from a store alone.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from accelopt_nb.experiments import geomean_by_iteration
from accelopt_nb.reproduce.figures import FigureSink, new_figure, plot_arm_lines, seeds_note
from accelopt_nb.reproduce.published import paper_facts

REACH_COLUMNS = ["arm", "final_speedup", "target_speedup", "iterations_to_target", "cost_to_target_usd",
                 "total_cost_usd"]
PRICE_COLUMNS = ["arm", "model", "price_key", "usd_per_m_input", "usd_per_m_output", "price_rule", "prices_as_of"]


def _curve_axes(ax_it: Any, ax_cost: Any, g: pd.DataFrame, arms: Sequence[str] | None = None) -> None:
    plot_arm_lines(ax_it, g, "iteration", arms=arms)
    plot_arm_lines(ax_cost, g, "cum_cost_usd", arms=arms)
    ax_it.set_xlabel("iteration")
    ax_it.set_ylabel("best speedup so far (geomean over problems)")
    ax_cost.set_xlabel("cumulative LLM cost, USD (all problems)")
    ax_it.set_title(seeds_note(g), fontsize=8)
    for ax in (ax_it, ax_cost):
        ax.axhline(1.0, color="grey", lw=0.7)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    from matplotlib.ticker import MaxNLocator
    ax_it.xaxis.set_major_locator(MaxNLocator(integer=True))


def plot_beam_vs_sampling(curves: pd.DataFrame, sink: FigureSink) -> tuple[Any, pd.DataFrame]:
    """Best speedup vs iteration and vs cost, one line per arm; returns the figure and its data."""
    g = geomean_by_iteration(curves)
    fig, (a1, a2) = new_figure(11, 4.2, ncols=2)
    _curve_axes(a1, a2, g)
    fig.suptitle(sink.title("Beam search vs repeated sampling at the same budget"), fontsize=10)
    fig.tight_layout()
    return fig, g


def reach_table(curves: pd.DataFrame, target: float | None = None) -> pd.DataFrame:
    """Per arm: iterations and cost until the geomean best speedup first reaches ``target``.

    Default target: the smallest final speedup over the arms, the improvement every arm reached
    (the paper's "matched improvement"). Iterations count from 1 (iteration 0 is one iteration).
    """
    g = geomean_by_iteration(curves)
    if g.empty:
        return pd.DataFrame(columns=REACH_COLUMNS)
    finals = g.sort_values("iteration").groupby("arm").tail(1).set_index("arm")
    target = float(target if target is not None else finals["geomean_speedup"].min())
    rows = []
    for arm, a in g.sort_values("iteration").groupby("arm"):
        hit = a[a["geomean_speedup"] >= target - 1e-9]
        rows.append({"arm": arm, "final_speedup": float(finals.loc[arm, "geomean_speedup"]), "target_speedup": target,
                     "iterations_to_target": int(hit["iteration"].iloc[0]) + 1 if len(hit) else math.nan,
                     "cost_to_target_usd": float(hit["cum_cost_usd"].iloc[0]) if len(hit) else math.nan,
                     "total_cost_usd": float(finals.loc[arm, "cum_cost_usd"])})
    return pd.DataFrame(rows, columns=REACH_COLUMNS)


def plot_memory(curves: pd.DataFrame, sink: FigureSink, target: float | None = None) -> tuple[Any, pd.DataFrame]:
    """Curves per arm (memory on/off, ExpN/TopK sweep) and bars of iterations and cost to the target."""
    g = geomean_by_iteration(curves)
    reach = reach_table(curves, target)
    fig, (a1, a2, a3) = new_figure(15, 4.4, ncols=3)
    _curve_axes(a1, a2, g)
    y = np.arange(len(reach))
    a3.barh(y - 0.2, reach["iterations_to_target"], 0.4, color="#4c72b0", label="iterations to target")
    twin = a3.twiny()
    twin.barh(y + 0.2, reach["cost_to_target_usd"], 0.4, color="#dd8452", label="USD to target")
    a3.set_yticks(y)
    a3.set_yticklabels(reach["arm"], fontsize=8)
    a3.set_xlabel("iterations to reach the target (blue)")
    twin.set_xlabel("USD to reach the target (orange)")
    facts = paper_facts()["memory_ablation"]
    lo, hi = facts["cost_saving_percent"]
    tgt = reach["target_speedup"].iloc[0] if len(reach) else float("nan")
    a3.set_title(f"target {tgt:.3f}x; paper: {facts['iterations_with_memory']} vs "
                 f"{facts['iterations_without_memory']} iterations, {lo}-{hi}% cheaper with memory", fontsize=8)
    fig.suptitle(sink.title("Optimization memory: with/without, ExpN and TopK sweep"), fontsize=10)
    fig.tight_layout()
    return fig, reach


def price_rows(root: str | Path) -> pd.DataFrame:
    """Per arm, the model and the dated price (USD / 1M tokens) its runs recorded."""
    from accelopt_nb.experiments import arm_name
    from accelopt_nb.llm import PriceTable
    from accelopt_nb.store import DEFAULT_FILENAME, RunStore

    rows: dict[str, dict[str, Any]] = {}
    for db in sorted(Path(root).glob(f"*/*/{DEFAULT_FILENAME}")):
        arm = arm_name(db.parent.parent)
        store = RunStore.open(db.parent)
        try:
            for run_id in store.run_ids():
                run = store.get_run(run_id)
                model = (run["config"].get("llm") or {}).get("model") or {}
                key = model.get("price")
                if not key or not run.get("prices") or arm in rows:
                    continue
                price = PriceTable.from_snapshot(run["prices"]).get(key)
                rows[arm] = {"arm": arm, "model": model.get("model"), "price_key": key,
                             "usd_per_m_input": price.input, "usd_per_m_output": price.output,
                             "price_rule": price.rule, "prices_as_of": run["prices"].get("as_of")}
        finally:
            store.close()
    return pd.DataFrame(list(rows.values()), columns=PRICE_COLUMNS)   # the columns also when no arm is priced


def cost_table(curves: pd.DataFrame, prices: pd.DataFrame) -> pd.DataFrame:
    """Per arm: prices, final speedup, total cost, cost to the matched improvement, and x cheaper
    than the most expensive arm at that improvement."""
    reach = reach_table(curves)
    out = reach.merge(prices, on="arm", how="left") if len(prices) else reach
    worst = out["cost_to_target_usd"].max() if len(out) else math.nan
    out["times_cheaper_than_costliest"] = worst / out["cost_to_target_usd"]
    out["priced"] = out["total_cost_usd"].notna()   # False: some call had no price (cost unknown, never $0)
    return out


def plot_cost(curves: pd.DataFrame, table: pd.DataFrame, sink: FigureSink) -> Any:
    """Speedup vs cost per arm, bars of cost to the matched improvement, and the price table as text."""
    g = geomean_by_iteration(curves)
    fig, (a1, a2) = new_figure(12, 4.6, ncols=2)
    plot_arm_lines(a1, g[g["cum_cost_usd"].notna()], "cum_cost_usd", arms=sorted(g["arm"].unique()))
    if (g["cum_cost_usd"] > 0).all() and len(g):
        a1.set_xscale("log")
    unpriced = [str(r.arm) for r in table.itertuples() if not r.priced]
    if unpriced:  # no cost to place them at: named, never drawn at $0
        a1.text(0.02, 0.02, "unpriced (not drawn): " + ", ".join(unpriced), transform=a1.transAxes, fontsize=7)
    a1.set_xlabel("cumulative LLM cost, USD (log)")
    a1.set_ylabel("best speedup so far (geomean)")
    a1.set_title(seeds_note(g), fontsize=8)
    a1.grid(alpha=0.3)
    a1.legend(fontsize=7)
    y = np.arange(len(table))
    a2.barh(y, table["cost_to_target_usd"], color="#4c72b0")
    for i, r in enumerate(table.itertuples()):
        label = (" unpriced" if not r.priced else " not reached" if not np.isfinite(r.cost_to_target_usd)
                 else f" ${r.cost_to_target_usd:.4g} ({r.times_cheaper_than_costliest:.1f}x cheaper)")
        a2.text(0.0 if not np.isfinite(r.cost_to_target_usd) else r.cost_to_target_usd, i, label, va="center",
                fontsize=7)
    finite = table["cost_to_target_usd"][np.isfinite(table["cost_to_target_usd"])]
    if len(finite):
        a2.set_xlim(0, float(finite.max()) * 1.9)   # room for the labels right of the bars
    a2.set_yticks(y)
    a2.set_yticklabels(table["arm"], fontsize=8)
    a2.set_xlabel(f"USD to reach the matched improvement ({table['target_speedup'].iloc[0]:.3f}x)" if len(table) else "")
    lines = []
    if "price_key" in table:
        as_of = table["prices_as_of"].dropna().iloc[0] if table["prices_as_of"].notna().any() else "?"
        lines.append(f"prices as of {as_of}, USD per 1M tokens (input / output):")
        lines += [f"  {r.price_key}: {r.usd_per_m_input:g} / {r.usd_per_m_output:g}" for r in table.itertuples()
                  if isinstance(r.price_key, str)]
    lines += [f"  {r.arm}: unpriced (no price; cost unknown)" for r in table.itertuples() if not r.priced]
    facts = paper_facts()["cost"]
    lines.append(f"paper: {facts['open_model']} {facts['times_cheaper']}x cheaper than {facts['proprietary_model']}")
    fig.suptitle(sink.title("LLM cost: open vs proprietary models at matched improvement (cost ledger)"), fontsize=10)
    fig.tight_layout()
    # the price table under the panels (saved with bbox_inches="tight", so it is never cut off)
    fig.text(0.5, 0.0, "\n".join(lines), ha="center", va="top", fontsize=7, family="monospace",
             bbox={"facecolor": "white", "edgecolor": "#bbb"})
    return fig
