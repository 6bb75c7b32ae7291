"""Saving a reproduction figure: PNG + SVG + the CSV behind it, and a manifest line for the index.

Every figure goes through :class:`FigureSink`, so each one is written the same way and each one
carries, in its title, which model made the data (``model_label``): a figure made from the offline
fake model says so (:data:`accelopt_nb.fake_model.FAKE_MODEL_LABEL`). Above the title, every figure
states its :class:`Provenance` (model, endpoint or "none", shapes, fidelity), which the manifest and
``index.md`` repeat. :func:`arm_styles` gives each arm its own color, marker and line style, so arms
whose curves coincide stay visible.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd

MANIFEST = "figures.jsonl"   # one JSON object per saved figure, read by the index


@dataclass(frozen=True)
class Provenance:
    """Where a figure's numbers come from, stated on the figure and in the index."""

    model: str = "none"        # the model whose runs or kernels the figure shows; "none": no model involved
    endpoint: str = "none"     # where that model was served; "none": no endpoint (or the data came from stores)
    shapes: str = ""           # e.g. "small", "paper (M=7168, C=256, S=16)"
    fidelity: str = ""         # e.g. "trn1 performance model (trace-only); measured trn1 from the paper"

    def text(self) -> str:
        parts = [f"model: {self.model}", f"endpoint: {self.endpoint}"]
        parts += [f"shapes: {self.shapes}"] if self.shapes else []
        parts += [f"fidelity: {self.fidelity}"] if self.fidelity else []
        return " · ".join(parts)

    def to_dict(self) -> dict[str, str]:
        return asdict(self)

    def stamp(self, fig: Any) -> None:
        """Write the provenance above the figure's title (once per figure)."""
        if not getattr(fig, "_accelopt_provenance", False):
            fig.text(0.005, 1.0, self.text(), ha="left", va="bottom", fontsize=7, color="#555",
                     transform=fig.transFigure)
            fig._accelopt_provenance = True


@dataclass
class FigureSink:
    """Writes figures of one notebook into ``out_dir``; ``model_label`` goes into every title, the
    ``provenance`` (or the one given to :meth:`save`) above it."""

    out_dir: Path
    notebook: str
    model_label: str | None = None
    provenance: Provenance | None = None
    incomplete: str = ""      # non-empty: some run behind the data lost LLM calls (stated in every title)

    def __post_init__(self) -> None:
        self.out_dir = Path(self.out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)

    def title(self, text: str) -> str:
        """``text`` plus the model that made the data, on a second line, and what is incomplete."""
        out = f"{text}\n[{self.model_label}]" if self.model_label else text
        return f"{out}\n{_shorten(self.incomplete, 160)}" if self.incomplete else out

    def save(self, fig: Any, name: str, data: pd.DataFrame, *, caption: str = "",
             settings: Mapping[str, Any] | None = None, provenance: Provenance | None = None) -> dict[str, str]:
        """Write ``name``.png, ``name``.svg and ``name``.csv; returns their paths."""
        prov = provenance or self.provenance or Provenance()
        prov.stamp(fig)
        paths = {ext: str(self.out_dir / f"{name}.{ext}") for ext in ("png", "svg", "csv")}
        fig.savefig(paths["png"], dpi=120, bbox_inches="tight")
        fig.savefig(paths["svg"], bbox_inches="tight")
        data.to_csv(paths["csv"], index=False)
        entry = {"notebook": self.notebook, "name": name, "caption": caption, "model": self.model_label,
                 "provenance": prov.to_dict(), "incomplete": self.incomplete, "settings": dict(settings or {}),
                 **{k: Path(v).name for k, v in paths.items()}}
        # a figure saved again (the notebook re-run into the same folder) replaces its old entry
        manifest = self.out_dir / MANIFEST
        kept = [line for line in (manifest.read_text().splitlines() if manifest.is_file() else [])
                if line.strip() and (json.loads(line).get("notebook"), json.loads(line).get("name")) != (self.notebook, name)]
        manifest.write_text("".join(line + "\n" for line in kept + [json.dumps(entry, default=str)]))
        return paths


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def read_manifest(out_dir: str | Path) -> list[dict[str, Any]]:
    """Every figure saved under ``out_dir`` (recursively), in the order they were written."""
    entries = []
    for path in sorted(Path(out_dir).rglob(MANIFEST)):
        for line in path.read_text().splitlines():
            if line.strip():
                entries.append({**json.loads(line), "dir": str(path.parent)})
    return entries


def new_figure(width: float = 7.0, height: float = 4.2, ncols: int = 1):
    """A figure with ``ncols`` axes, without pyplot state (works headless and inline)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    axes = fig.subplots(1, ncols)
    return fig, axes


# ---- one look per arm -------------------------------------------------------------------------------
_COLORS = ("#0173b2", "#de8f05", "#029e73", "#d55e00", "#cc78bc", "#ca9161", "#56b4e9", "#949494")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
_LINES = ("-", "--", "-.", ":")


def arm_styles(arms: Iterable[str]) -> dict[str, dict[str, Any]]:
    """A color, marker and line style per arm (in the order given), all three distinct for up to 4 arms."""
    out = {}
    for i, arm in enumerate(dict.fromkeys(arms)):
        out[arm] = {"color": _COLORS[i % len(_COLORS)], "marker": _MARKERS[i % len(_MARKERS)],
                    "linestyle": _LINES[i % len(_LINES)]}
    return out


def same_as(curves: Mapping[str, Sequence[tuple[float, float]]]) -> dict[str, str]:
    """Arms whose curve equals an earlier arm's (point for point): ``{later: earlier}``, for the legend."""
    seen: dict[tuple, str] = {}
    out = {}
    for arm, points in curves.items():
        key = tuple((round(float(x), 9), round(float(y), 9)) for x, y in points)
        if key in seen:
            out[arm] = seen[key]
        else:
            seen[key] = arm
    return out


def plot_arm_lines(ax: Any, g: pd.DataFrame, x: str, y: str = "geomean_speedup",
                   arms: Sequence[str] | None = None) -> None:
    """One line per arm, each with its own color, marker and line style; an arm whose line is the
    same as an earlier arm's is drawn with larger hollow markers and says so in the legend. An arm
    run with several seeds gets a band from its worst to its best replicate (``low``/``high``)."""
    arms = list(arms or sorted(g["arm"].unique()))
    styles = arm_styles(arms)
    frames = {arm: g[g["arm"] == arm] for arm in arms}
    twins = same_as({arm: list(zip(f[x].fillna(-1), f[y])) for arm, f in frames.items()})
    for n, arm in enumerate(arms):
        a, st = frames[arm], styles[arm]
        seeds = int(a["seeds"].max()) if "seeds" in a and len(a) else 1
        label = arm + (f" (mean of {seeds} seeds, band: min-max)" if seeds > 1 else "") \
            + (f" (same as {twins[arm]})" if arm in twins else "")
        hollow = {"markerfacecolor": "none", "markersize": 9 + 2 * n, "markeredgewidth": 1.5} if arm in twins else {}
        ax.plot(a[x], a[y], color=st["color"], marker=st["marker"], linestyle=st["linestyle"], label=label, **hollow)
        if seeds > 1 and y == "geomean_speedup":
            ax.fill_between(a[x], a["low"], a["high"], color=st["color"], alpha=0.15, linewidth=0)


def seeds_note(g: pd.DataFrame) -> str:
    """What a reader must know before comparing the arms: how many replicates each line rests on."""
    if g.empty or "seeds" not in g:
        return ""
    per_arm = g.groupby("arm")["seeds"].max()
    if (per_arm <= 1).all():
        return "one run per arm (one seed): differences between arms may be chance"
    return "replicates per arm: " + ", ".join(f"{arm} {int(n)}" for arm, n in per_arm.items())


def pct_interval(pct: float, low: float | None, high: float | None) -> tuple[float, float]:
    """The % of peak interval of a model estimate whose latency lies in [latency*low, latency*high]."""
    if low is None or high is None or not (low > 0 and high > 0):
        return pct, pct
    return pct / high, pct / low
