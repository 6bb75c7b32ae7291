"""The few steps every reproduction notebook shares, so the notebooks stay thin (papermill-style)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

from accelopt_nb.errors import ConfigError
from accelopt_nb.reproduce.figures import FigureSink

# The title label of a figure drawn from baselines only (no run store had agent kernels for it).
NO_AGENT = "no agent kernels in the run store (no model involved)"


def figure_sink(out_dir: str | Path, notebook: str, *, model_label: str | None = None,
                model: str | None = None) -> FigureSink:
    """Where a notebook's figures go; titles name the model (``model_label`` wins, e.g. the fake model's)."""
    return FigureSink(Path(out_dir), notebook, model_label or (f"model: {model}" if model else None))


def run_or_load_arms(arms: Sequence[Mapping[str, Any]], problems: Sequence[str], root: str | Path, *,
                     iterations: int, shape_preset: str, base_url: str | None = None, model: str | None = None,
                     price: str | None = None, model_preset: str | None = None,
                     unpriced_ok: bool = True) -> pd.DataFrame:
    """Run (or resume) ``arms`` when an endpoint is given, then read their curves from the run stores.

    With no endpoint (``base_url`` and ``model_preset`` both unset) nothing runs: the analysis reads the
    stores already under ``root``. Only this notebook's arms are returned (``root`` may hold others').
    ``unpriced_ok=False`` (cost experiments) refuses an arm whose model has no price before anything runs.
    """
    from accelopt_nb.experiments import Arm, collect_curves, run_arms

    names = [str(a["name"]) for a in arms]
    if base_url or model_preset or any("model_preset" in (a.get("model") or {}) for a in arms):
        objs = []
        for a in arms:
            arm = Arm.from_dict(a)
            arm.overrides = {"iterations": iterations, "evaluation.shape_preset": shape_preset, **arm.overrides}
            objs.append(arm)
        default = {k: v for k, v in {"base_url": base_url, "model": model, "price": price,
                                     "model_preset": model_preset}.items() if v}
        run_arms(objs, problems, root, default_model=default, progress=False, unpriced_ok=unpriced_ok)
    curves = collect_curves(root)
    curves = curves[curves["arm"].isin(names) & curves["problem"].isin(list(problems))]
    if curves.empty:
        raise ConfigError(f"no runs of arms {names} on {list(problems)} under {root}, and no endpoint to run them: "
                          "set base_url (or model_preset), or point root at an existing run store")
    return curves.reset_index(drop=True)
