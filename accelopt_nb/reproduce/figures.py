"""Saving a reproduction figure: PNG + SVG + the CSV behind it, and a manifest line for the index.

Every figure goes through :class:`FigureSink`, so each one is written the same way and each one
carries, in its title, which model made the data (``model_label``): a figure made from the offline
fake model says so (:data:`accelopt_nb.fake_model.FAKE_MODEL_LABEL`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

MANIFEST = "figures.jsonl"   # one JSON object per saved figure, read by the index


@dataclass
class FigureSink:
    """Writes figures of one notebook into ``out_dir``; ``model_label`` goes into every title."""

    out_dir: Path
    notebook: str
    model_label: str | None = None

    def __post_init__(self) -> None:
        self.out_dir = Path(self.out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)

    def title(self, text: str) -> str:
        """``text`` plus the model that made the data, on a second line."""
        return f"{text}\n[{self.model_label}]" if self.model_label else text

    def save(self, fig: Any, name: str, data: pd.DataFrame, *, caption: str = "",
             settings: Mapping[str, Any] | None = None) -> dict[str, str]:
        """Write ``name``.png, ``name``.svg and ``name``.csv; returns their paths."""
        paths = {ext: str(self.out_dir / f"{name}.{ext}") for ext in ("png", "svg", "csv")}
        fig.savefig(paths["png"], dpi=120, bbox_inches="tight")
        fig.savefig(paths["svg"], bbox_inches="tight")
        data.to_csv(paths["csv"], index=False)
        entry = {"notebook": self.notebook, "name": name, "caption": caption, "model": self.model_label,
                 "settings": dict(settings or {}), **{k: Path(v).name for k, v in paths.items()}}
        # a figure saved again (the notebook re-run into the same folder) replaces its old entry
        manifest = self.out_dir / MANIFEST
        kept = [line for line in (manifest.read_text().splitlines() if manifest.is_file() else [])
                if line.strip() and (json.loads(line).get("notebook"), json.loads(line).get("name")) != (self.notebook, name)]
        manifest.write_text("".join(line + "\n" for line in kept + [json.dumps(entry, default=str)]))
        return paths


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
