"""Reading results out of experiment run stores (``root/<arm>/<problem>``, as written by
:func:`accelopt_nb.experiments.run_arms`) without opening a search session."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

import pandas as pd

BEST_COLUMNS = ["arm", "problem", "run_id", "kernel_id", "iteration", "latency_us", "baseline_latency_us",
                "speedup", "source"]


def best_kernels(root: str | Path, arm: str | None = None) -> pd.DataFrame:
    """Per problem, the fastest correct kernel found in any run under ``root`` (or under ``root/arm``)."""
    from accelopt_nb.experiments import arm_name
    from accelopt_nb.store import DEFAULT_FILENAME, RunStore

    rows: list[dict[str, Any]] = []
    for db in sorted(Path(root).glob(f"*/*/{DEFAULT_FILENAME}")):
        if arm is not None and arm_name(db.parent.parent) != arm:   # the arm's folder and its replicates'
            continue
        store = RunStore.open(db.parent)
        try:
            for run_id in store.run_ids():
                rows.extend(_run_best(store, run_id, arm_name(db.parent.parent)))
        finally:
            store.close()
    df = pd.DataFrame(rows, columns=BEST_COLUMNS)
    if df.empty:
        return df
    return df.sort_values("latency_us").groupby("problem", as_index=False).head(1).sort_values("problem") \
        .reset_index(drop=True)


def _run_best(store: Any, run_id: str, arm: str) -> list[dict[str, Any]]:
    kernels = store.kernels_df(run_id)
    evals = store.evaluations_df(run_id)
    if kernels.empty or evals.empty:
        return []
    ok = evals[(evals["correct"] == 1) & evals["latency_us"].notna()]
    merged = ok.merge(kernels[["kernel_id", "problem_id", "iteration", "source", "origin"]], on="kernel_id")
    out = []
    for problem, g in merged.groupby("problem_id"):
        base = g[g["origin"] == "baseline"]
        best = g.sort_values("latency_us").iloc[0]
        base_us = float(base["latency_us"].min()) if len(base) else float("nan")
        out.append({"arm": arm, "problem": problem, "run_id": run_id, "kernel_id": best["kernel_id"],
                    "iteration": int(best["iteration"]), "latency_us": float(best["latency_us"]),
                    "baseline_latency_us": base_us, "speedup": base_us / float(best["latency_us"]),
                    "source": best["source"]})
    return out


def runs_provenance(root: str | Path, *, arms: Iterable[str] | None = None, problems: Iterable[str] | None = None,
                    run_ids: Iterable[str] | None = None) -> dict[str, list[str]]:
    """What the runs under ``root`` were made with, from their own records: models, endpoints, shape
    presets and evaluation (backend, hardware, fidelity). ``arms``/``problems``/``run_ids`` narrow it
    down to the runs a figure shows."""
    from accelopt_nb.experiments import arm_name
    from accelopt_nb.store import DEFAULT_FILENAME, RunStore

    arms = set(arms) if arms is not None else None
    problems = set(problems) if problems is not None else None
    run_ids = set(run_ids) if run_ids is not None else None
    found: dict[str, set[str]] = {"models": set(), "endpoints": set(), "shapes": set(), "evaluation": set()}
    for db in sorted(Path(root).glob(f"*/*/{DEFAULT_FILENAME}")):
        if (arms is not None and arm_name(db.parent.parent) not in arms) or \
                (problems is not None and db.parent.name not in problems):
            continue
        store = RunStore.open(db.parent)
        try:
            for run_id in store.run_ids():
                if run_ids is not None and run_id not in run_ids:
                    continue
                config = store.get_run(run_id)["config"]
                model = (config.get("llm") or {}).get("model") or {}
                ev = (config.get("search") or {}).get("evaluation") or {}
                if model.get("model"):
                    found["models"].add(str(model["model"]))
                if model.get("base_url"):
                    found["endpoints"].add(str(model["base_url"]))
                found["shapes"].add(str(config.get("shape_preset") or ev.get("shape_preset")))
                found["evaluation"].add(f"{ev.get('backend', 'simulator')} {ev.get('hw', 'trn1')}, "
                                        f"{ev.get('fidelity', 'full')} fidelity")
        finally:
            store.close()
    return {k: sorted(v) for k, v in found.items()}
