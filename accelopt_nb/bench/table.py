"""The benchmark's outputs: a text table, the % of peak chart, and CSV/JSON/PNG files."""
from __future__ import annotations

import json
import math
import platform
import time
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd

from accelopt_nb.bench.suite import summarize

__all__ = ["format_table", "plot_pct_peak", "write_outputs"]


def format_table(df: pd.DataFrame) -> str:
    """A compact text table for terminals and notebooks."""
    def num(v, fmt):
        width = int(fmt.split(".")[0])
        return f"{'-':>{width}s}" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)

    def mb(v):
        return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v / 1e6:.1f}"

    header = (f"{'problem':24s} {'status':10s} {'max err':>9s} {'lat ms':>9s} {'peak ms':>9s} {'bound':>6s} "
              f"{'%peak':>6s} {'PE':>5s} {'DVE':>5s} {'ACT':>5s} {'DMA':>5s} {'HBM MB':>8s} {'spill MB':>8s}")
    lines = [header, "-" * len(header)]
    for r in df.to_dict("records"):
        spill = None if r["spill_reload_bytes"] is None else (r["spill_save_bytes"] or 0) + r["spill_reload_bytes"]
        lines.append(
            f"{r['problem'][:24]:24s} {str(r['status'])[:10]:10s} {num(r['max_rel_error'], '9.2e')} "
            f"{num(r['latency_ms'], '9.4f')} {num(r['peak_ms'], '9.4f')} {str(r['bound'] or '-'):>6s} "
            f"{num(r['pct_peak'], '6.1f')} {num(r['tensor_active'], '5.2f')} {num(r['vector_active'], '5.2f')} "
            f"{num(r['scalar_active'], '5.2f')} {num(r['dma_active'], '5.2f')} {mb(r['hbm_bytes']):>8s} "
            f"{mb(spill):>8s}")
    s = df.attrs.get("summary") or summarize(df)
    if s.get("geomean_pct_peak") is not None:
        checked = int(df["correct"].notna().sum())
        verdict = (f"{s['correct']}/{checked} correct" if checked else "trace-only: correctness not checked")
        lines.append(f"geometric mean % of peak over {s['profiled']} problem(s): {s['geomean_pct_peak']:.1f}"
                     f"   ({verdict})")
    notes = sorted({n for n in df.get("estimate_note", pd.Series(dtype=object)).dropna()})
    if notes:   # latencies from the performance model, not a Trainium
        lines.append(f"latency and %peak are {' / '.join(notes)}")
    return "\n".join(lines)


def plot_pct_peak(df: pd.DataFrame, ax=None, title: str | None = None):
    """Bar chart of % of peak per problem, coloured by the roofline bound (like the paper's figure)."""
    if ax is None:
        import matplotlib.pyplot as plt   # notebooks get their inline backend
        _, ax = plt.subplots(figsize=_figsize(df))
    colors = {"mm": "#4C72B0", "vec": "#DD8452", "memory": "#55A868"}
    d = df.reset_index(drop=True)
    vals = d["pct_peak"].astype(float).fillna(0.0)
    bars = ax.bar(range(len(d)), vals, color=[colors.get(b, "#999999") for b in d["bound"]])
    for i, r in d.iterrows():
        if r["correct"] is False:
            bars[i].set_hatch("//")
            bars[i].set_edgecolor("red")
    ax.set_xticks(range(len(d)))
    ax.set_xticklabels(d["problem"], rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("% of peak throughput")
    # room above 100% for the legend, which sits in one row at the top
    ax.set_ylim(0, max(100.0, float(vals.max()) if len(vals) else 100.0) * 1.18)
    ax.axhline(100.0, color="grey", linewidth=0.6)
    s = df.attrs.get("summary") or summarize(df)
    if s.get("geomean_pct_peak"):
        ax.axhline(s["geomean_pct_peak"], color="black", linestyle="--", linewidth=1,
                   label=f"geomean {s['geomean_pct_peak']:.1f}%")
    from matplotlib.patches import Patch
    handles = [Patch(color=c, label=f"{b}-bound") for b, c in colors.items() if b in set(d["bound"])]
    handles += ax.get_legend_handles_labels()[0]
    ax.legend(handles=handles, fontsize=8, loc="upper left", ncol=len(handles), frameon=False)
    if title is None and len(d):
        title = f"NKIBench baselines: {d['hw'].iloc[0]}, {d['preset'].iloc[0]} preset, {d['backend'].iloc[0]}"
    ax.set_title(title or "", fontsize=10)
    ax.figure.tight_layout()
    return ax


def write_outputs(df: pd.DataFrame, out_dir: str | Path, *, stem: str | None = None,
                  meta: Mapping[str, Any] | None = None) -> dict[str, Path]:
    """Write ``<stem>.csv``, ``<stem>.json`` and ``<stem>.png`` (the % of peak chart) into ``out_dir``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if stem is None:
        first = df.iloc[0] if len(df) else None
        stem = "nkibench" if first is None else f"nkibench_{first['preset']}_{first['hw']}_{first['backend']}"
    paths = {"csv": out_dir / f"{stem}.csv", "json": out_dir / f"{stem}.json", "png": out_dir / f"{stem}.png"}
    flat = df.copy()
    flat["checks"] = flat["checks"].map(lambda c: json.dumps(c, default=_json_default))
    flat.to_csv(paths["csv"], index=False)
    doc = {"summary": df.attrs.get("summary") or summarize(df), "meta": {**_meta(), **dict(meta or {})},
           "rows": json.loads(df.to_json(orient="records", default_handler=str))}
    paths["json"].write_text(json.dumps(doc, indent=2, default=_json_default))
    from matplotlib.figure import Figure   # no pyplot: works headless and leaves notebook state alone
    fig = Figure(figsize=_figsize(df))
    plot_pct_peak(df, ax=fig.add_subplot())
    fig.savefig(paths["png"], dpi=130)
    return paths


def _figsize(df: pd.DataFrame) -> tuple[float, float]:
    return (max(6.0, 0.55 * len(df) + 2), 4.0)


def _meta() -> dict[str, Any]:
    return {"python": platform.python_version(), "machine": platform.machine(),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S")}


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, float) and not math.isfinite(o):
        return str(o)
    return str(o)
