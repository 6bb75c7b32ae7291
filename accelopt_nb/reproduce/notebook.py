"""The few steps every reproduction notebook shares, so the notebooks stay thin (papermill-style)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

from accelopt_nb.errors import ConfigError
from accelopt_nb.reproduce.figures import FigureSink, Provenance

# The title label of a figure drawn from baselines only (no run store had agent kernels for it).
NO_AGENT = "no agent kernels in the run store (no model involved)"


def figure_sink(out_dir: str | Path, notebook: str, *, model_label: str | None = None,
                model: str | None = None, provenance: Provenance | None = None, incomplete: str = "") -> FigureSink:
    """Where a notebook's figures go; titles name the model (``model_label`` wins, e.g. the fake model's)
    and say which runs are incomplete (:func:`incomplete_note`); ``provenance`` (model, endpoint, shapes,
    fidelity) stands above every title."""
    return FigureSink(Path(out_dir), notebook, model_label or (f"model: {model}" if model else None), provenance,
                      incomplete)


def _who(found: Mapping[str, list[str]], model_label: str | None) -> tuple[str, str]:
    from accelopt_nb.fake_model import FAKE_MODEL_LABEL

    if not found["models"]:
        return "none", "none"
    models = ", ".join(found["models"])
    if model_label == FAKE_MODEL_LABEL:
        return f"{FAKE_MODEL_LABEL} ({models})", "a loopback fake server"
    return models, ", ".join(found["endpoints"]) or "none"


def search_provenance(root: str | Path, arms: Sequence[Mapping[str, Any]], problems: Sequence[str], *,
                      model_label: str | None = None) -> Provenance:
    """The provenance of a figure drawn from these arms' run stores, read from the runs' own records."""
    from accelopt_nb.reproduce.stores import runs_provenance

    found = runs_provenance(root, arms=[str(a["name"]) for a in arms], problems=problems)
    model, endpoint = _who(found, model_label)
    return Provenance(model=model, endpoint=endpoint, shapes=", ".join(found["shapes"]) or "none",
                      fidelity="; ".join(f"{e} (performance model)" for e in found["evaluation"]) or "none")


def kernels_provenance(root: str | Path, best: pd.DataFrame, *, shapes: str, fidelity: str,
                       model_label: str | None = None) -> Provenance:
    """The provenance of a figure of baselines and ``best`` kernels (``stores.best_kernels`` rows)
    re-profiled at ``shapes``: the model and endpoint of the runs those kernels came from (none: no
    agent kernel, no model)."""
    from accelopt_nb.reproduce.stores import runs_provenance

    found = runs_provenance(root, run_ids=list(best["run_id"])) if len(best) else \
        {"models": [], "endpoints": [], "shapes": [], "evaluation": []}
    model, endpoint = _who(found, model_label)
    return Provenance(model=model, endpoint=endpoint, shapes=shapes, fidelity=fidelity)


NO_RUN = "no run in the store"
RUNS_MANIFEST = "runs.jsonl"     # one line per (arm, problem) run a notebook's figures rest on, read by the index


def run_or_load_arms(arms: Sequence[Mapping[str, Any]], problems: Sequence[str], root: str | Path, *,
                     iterations: int, shape_preset: str, base_url: str | None = None, model: str | None = None,
                     price: str | None = None, model_preset: str | None = None,
                     unpriced_ok: bool = True, out_dir: str | Path | None = None,
                     allow_model_change: bool = False, seeds: Sequence[int] | None = None) -> pd.DataFrame:
    """Run (or resume) ``arms`` when an endpoint is given, then read their curves from the run stores.

    With no endpoint (``base_url`` and ``model_preset`` both unset) nothing runs: the analysis reads the
    stores already under ``root``. Only this notebook's arms are returned (``root`` may hold others').
    ``unpriced_ok=False`` (cost experiments) refuses an arm whose model has no price before anything runs.
    ``seeds``: every arm once per seed (replicates; the figures draw their mean and spread).

    How every (arm, problem) run stands -- complete, or which LLM calls it lost and why -- is in
    ``curves.attrs["outcomes"]`` and, with ``out_dir``, in ``out_dir/runs.jsonl`` for the index.
    """
    from accelopt_nb.experiments import Arm, ArmOutcome, collect_curves, run_arms

    names = [str(a["name"]) for a in arms]
    ran: dict[tuple[str, str, int | None], ArmOutcome] = {}
    replicas: list[int | None] = [int(x) for x in seeds] if seeds is not None else [None]
    if base_url or model_preset or any("model_preset" in (a.get("model") or {}) for a in arms):
        objs = []
        for a in arms:
            arm = Arm.from_dict(a)
            arm.overrides = {"iterations": iterations, "evaluation.shape_preset": shape_preset, **arm.overrides}
            objs.append(arm)
        # A preset names its model and price: the notebooks' default model/price parameters must not override
        # them (only base_url may, to reach the same model on another host).
        given = {"base_url": base_url, "model_preset": model_preset} if model_preset else \
            {"base_url": base_url, "model": model, "price": price}
        default = {k: v for k, v in given.items() if v}
        for o in run_arms(objs, problems, root, default_model=default, progress=True, unpriced_ok=unpriced_ok,
                          allow_model_change=allow_model_change, seeds=seeds):
            ran[(o.arm, o.problem, o.seed)] = o
    outcomes = [ran.get((a, p, x)) or stored_outcome(root, a, p, iterations, seed=x)
                for a in names for x in replicas for p in problems]
    if out_dir is not None:
        record_runs(out_dir, outcomes)
    curves = collect_curves(root)
    curves = curves[curves["arm"].isin(names) & curves["problem"].isin(list(problems))]
    # only this notebook's replicates: the root may hold runs of the same arms with other (or no) seeds
    wanted = [x for x in replicas if x is not None]
    curves = curves[curves["seed"].isin(wanted)] if wanted else curves[curves["seed"].isna()]
    if curves.empty:
        tried = "; ".join(f"{o.where()}: {o.reason()}" for o in outcomes
                          if o.reason() and o.error != NO_RUN)
        raise ConfigError(f"no finished iteration of arms {names} on {list(problems)} under {root}"
                          + (f": {tried}" if tried else
                             ", and no endpoint to run them: set base_url (or model_preset), or point root at an "
                             "existing run store"))
    curves = curves.reset_index(drop=True)
    curves.attrs["outcomes"] = [o.to_dict() for o in outcomes]
    return curves


def stored_outcome(root: str | Path, arm: str, problem: str, iterations: int, seed: int | None = None) -> Any:
    """How the latest stored run of ``arm`` (its replicate with ``seed``) on ``problem`` stands, from its
    store alone."""
    from accelopt_nb.experiments import ArmOutcome, run_folder
    from accelopt_nb.notebook.causes import run_failures
    from accelopt_nb.store import DEFAULT_FILENAME, RunStore

    folder = Path(root) / run_folder(arm, seed) / problem
    if not (folder / DEFAULT_FILENAME).is_file():
        return ArmOutcome(arm, problem, False, error=NO_RUN, seed=seed)
    store = RunStore.open(folder)
    try:
        run_id = store.latest_run_id()
        if run_id is None:
            return ArmOutcome(arm, problem, False, error=NO_RUN, seed=seed)
        done = {(s["iteration"], s["step"]) for s in store.rows("steps", run_id) if s["status"] == "done"}
        finished = sum(1 for it in range(iterations) if (it, "select") in done)
        failures = run_failures(store, run_id)
        model = ((store.get_run(run_id)["config"].get("llm") or {}).get("model") or {}).get("model")
    finally:
        store.close()
    return ArmOutcome(arm, problem, finished >= iterations and not failures.incomplete, finished, model=model,
                      run_id=run_id, failures=failures.to_dict(), seed=seed)


def record_runs(out_dir: str | Path, outcomes: Sequence[Any]) -> Path:
    """Write ``out_dir/runs.jsonl``: one line per run, for :func:`read_runs` (the index, the exit status)."""
    import json

    path = Path(out_dir) / RUNS_MANIFEST
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(o.to_dict(), default=str) + "\n" for o in outcomes))
    return path


def read_runs(out_dir: str | Path) -> list[dict[str, Any]]:
    """Every run recorded under ``out_dir`` (recursively)."""
    import json

    out = []
    for path in sorted(Path(out_dir).rglob(RUNS_MANIFEST)):
        out += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return out


def incomplete_note(curves: pd.DataFrame) -> str:
    """'' when every run behind ``curves`` is complete, else one line naming the runs that are not."""
    from accelopt_nb.experiments import ArmOutcome

    bad = [ArmOutcome(**o) for o in curves.attrs.get("outcomes", []) if not o["complete"]]
    if not bad:
        return ""
    return "INCOMPLETE: " + "; ".join(f"{o.arm}{'' if o.seed is None else f' (seed {o.seed})'}/{o.problem} "
                                      f"({o.reason()})" for o in bad)
