"""Batch experiments behind the paper's figures: run search *arms* over problems, collect curves, plot.

An arm is one search configuration (beam search with memory, without memory, repeated sampling,
another model...). Every run lives in its own run store under ``root/<arm folder>/<problem>``, so a
killed batch resumes where it stopped, and the figures are drawn from the stores alone. The folder is
the arm's name with anything but letters, digits, ``.``, ``-`` and ``_`` made ``_`` (``beam + memory``
lives in ``beam_memory/``, easy to type in a shell); ``arm.json`` in it keeps the name.

An LLM search is a random process: one run per arm says little about which arm is better. Given
``seeds``, every arm runs once per seed (the search's seed and, through it, every LLM call's), each
replicate in ``root/<arm folder>--seed<N>/<problem>``; the curves carry the seed, and the figures draw
the mean over seeds with the spread between the best and the worst replicate.

* :func:`collect_curves`: per arm, problem and iteration, the best speedup so far, its % of peak,
  and the cumulative LLM tokens and USD (from the ledger);
* :func:`plot_speedup_curves`: geometric-mean best speedup over the problems vs iteration
  (the ablation figure: beam vs repeated sampling, with and without memory);
* :func:`plot_cost`: final geometric-mean speedup vs total cost per arm (the cost comparison).
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from accelopt_nb.errors import AccelOptError, ConfigError
from accelopt_nb.notebook.causes import run_failures
from accelopt_nb.search.launch import LaunchSpec, model_config, open_session, preflight, require_price

ARM_FILE = "arm.json"   # in each arm's folder: the arm as written (its name may hold spaces and '+')
SEED_SUFFIX = "--seed"  # a replicate's folder: <arm folder>--seed<N>
CURVE_COLUMNS = ["arm", "seed", "problem", "run_id", "iteration", "best_speedup", "best_pct_peak", "cum_tokens",
                 "cum_cost_usd"]


@dataclass
class Arm:
    """One configuration of the search: a preset plus dotted overrides, and the model to call."""

    name: str
    preset: str = "smoke"
    overrides: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)   # base_url/model/model_preset/price/...

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Arm":
        unknown = set(d) - {"name", "preset", "overrides", "model"}
        if unknown or "name" not in d:
            raise ConfigError(f"an arm needs 'name' and may have preset/overrides/model; got {sorted(d)}")
        return cls(name=str(d["name"]), preset=str(d.get("preset", "smoke")), overrides=dict(d.get("overrides") or {}),
                   model=dict(d.get("model") or {}))


def arm_folder(name: str) -> str:
    """The folder of an arm's run stores: its name with runs of other characters than letters, digits,
    ``.``, ``-`` and ``_`` replaced by one ``_`` (no spaces, ``+`` or ``,`` in paths)."""
    folder = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_.")
    if not folder:
        raise ConfigError(f"arm name {name!r} has no letter or digit to name its folder after")
    return folder


def run_folder(name: str, seed: int | None = None) -> str:
    """The folder of an arm's run stores, or of one seed's replicate of it."""
    return arm_folder(name) + (f"{SEED_SUFFIX}{int(seed)}" if seed is not None else "")


def _arm_record(folder: str | Path) -> dict[str, Any]:
    path = Path(folder) / ARM_FILE
    if path.is_file():
        try:
            record = json.loads(path.read_text())
            if isinstance(record, dict) and "name" in record:
                return record
        except ValueError:
            pass
    return {}


def arm_name(folder: str | Path) -> str:
    """The name of the arm whose run stores are in ``folder`` (from its ``arm.json``; else the folder's name)."""
    return str(_arm_record(folder).get("name", Path(folder).name))


def arm_seed(folder: str | Path) -> int | None:
    """The seed of the replicate whose run stores are in ``folder`` (None: an arm run without ``seeds``)."""
    seed = _arm_record(folder).get("seed")
    return int(seed) if seed is not None else None


def _write_arm_file(root: Path, arm: "Arm", seed: int | None = None) -> Path:
    folder = root / run_folder(arm.name, seed)
    folder.mkdir(parents=True, exist_ok=True)
    record = {"name": arm.name, "preset": arm.preset, "overrides": arm.overrides, "model": arm.model}
    if seed is not None:
        record["seed"] = int(seed)
    (folder / ARM_FILE).write_text(json.dumps(record, indent=2, default=str))
    return folder


@dataclass
class ArmOutcome:
    """How one (arm, problem) run ended: ``complete`` (T iterations done, no LLM call lost) or not, and why.

    ``failures``: the run's failed LLM calls by cause (transport, model error, unusable answer),
    the calls its open steps never made, and its kernels by failure (:mod:`accelopt_nb.notebook.causes`).
    A run with lost calls (transport, model error, cap, not made) is not complete; unusable answers
    are the model's result and do not keep it from completing.
    """

    arm: str
    problem: str
    complete: bool
    iterations_done: int = 0
    seed: int | None = None           # the replicate's seed (None: the arm ran without ``seeds``)
    error: str | None = None
    model: str | None = None
    run_id: str | None = None
    warning: str | None = None        # what the endpoint check said (e.g. the model is not listed)
    failures: dict[str, Any] = field(default_factory=dict)   # causes.Failures.to_dict()

    def where(self) -> str:
        """The run, as people name it: ``arm / problem``, with the replicate's seed when it has one."""
        return f"{self.arm}{'' if self.seed is None else f' (seed {self.seed})'} / {self.problem}"

    def reason(self) -> str:
        """One line: why the run is not complete (or what went wrong on the way), '' when nothing did."""
        from accelopt_nb.notebook.causes import Failures

        f = Failures.from_dict(self.failures) if self.failures else Failures()
        parts = [self.error] if self.error else []
        if f.llm or f.missing:
            first = next((f.first[c] for c in f.first if c in f.llm), None)
            parts.append(f"LLM calls: {f.llm_text()}" + (f" (first: {first})" if first else ""))
        if not self.complete and not parts:
            parts.append(f"{self.iterations_done} iteration(s) done")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return dict(vars(self))


def run_arms(arms: Iterable[Arm | Mapping[str, Any]], problems: Iterable[str], root: str | Path, *,
             default_model: Mapping[str, Any] | None = None, progress: bool = True, parallel: int = 1,
             eval_workers: int | None = None, scheduler: str | None = None, llm_concurrency: int | None = None,
             unpriced_ok: bool = True, check_endpoint: bool = True,
             allow_model_change: bool = False, seeds: Iterable[int] | None = None) -> list[ArmOutcome]:
    """Run (or resume) every arm on every problem to its configured number of iterations.

    ``parallel`` runs that many (arm, problem) searches at once; their evaluations share one
    pool (``eval_workers``, default one per core) or a Dask cluster (``scheduler``). A run whose
    step failed outright (every LLM call of a step failed) or hit the spending cap is reported
    as not complete, and the batch goes on; re-running the batch resumes it. ``unpriced_ok=False``
    refuses a model without a price (a cost experiment must not count it as free). Every arm's
    endpoint is checked before any run starts (``check_endpoint``); what the check warns about (a
    model the server does not list) is printed and kept in the outcome. A run made with another model
    is not resumed with this one unless ``allow_model_change`` (recorded in the run). ``seeds``: run
    every arm once per seed (replicates, see the module's doc); None: once, with its preset's seed.

    A run is complete when its T iterations are done and it lost no LLM call (transport, a model
    error, the cap, or calls never made): a rerun resumes an incomplete one.
    """
    from concurrent.futures import ThreadPoolExecutor

    if parallel < 1:
        raise ConfigError(f"parallel must be >= 1, got {parallel}")
    root = Path(root)
    arms = [a if isinstance(a, Arm) else Arm.from_dict(a) for a in arms]
    replicas = _seed_list(seeds)
    folders: dict[str, str] = {}
    for arm in arms:
        for seed in replicas:
            other = folders.setdefault(run_folder(arm.name, seed), arm.name)
            if other != arm.name:
                raise ConfigError(f"arms {other!r} and {arm.name!r} would share the folder "
                                  f"{run_folder(arm.name, seed)!r}; rename one")
    problems = list(problems)
    jobs = [(a, p, seed) for a in arms for seed in replicas for p in problems]
    # Fail in seconds, before any run starts, if an arm has no price (a cost experiment) or its
    # endpoint is down.
    checked: dict[tuple[str | None, str], str] = {}     # endpoint -> the check's warning ("" if none)
    warnings: dict[str, str] = {}
    for arm in arms:
        model = model_config(**arm_model(arm, default_model))
        try:
            require_price(model, unpriced_ok)
        except ConfigError as exc:
            raise ConfigError(f"arm {arm.name!r}: {exc}") from None
        key = (model.base_url, model.model)
        if check_endpoint and key not in checked:
            try:
                checked[key] = preflight(model)
            except AccelOptError as exc:
                raise type(exc)(f"arm {arm.name!r}: {exc}") from None
            if checked[key]:
                print(f"arm {arm.name!r}: {checked[key]}", flush=True)   # e.g. a model the server does not list
        warnings[arm.name] = checked.get(key, "")
    for arm in arms:
        for seed in replicas:
            _write_arm_file(root, arm, seed)
    evaluator = _shared_evaluator(eval_workers, scheduler)
    bar = _RunLines(len(jobs)) if progress else None

    def one(job: tuple[Arm, str, int | None]) -> ArmOutcome:
        arm, problem, seed = job
        outcome = ArmOutcome(arm.name, problem, False, warning=warnings.get(arm.name) or None, seed=seed)
        try:
            session = open_session(_arm_spec(arm, problem, root, default_model, evaluator, llm_concurrency,
                                             unpriced_ok, allow_model_change, seed))
        except AccelOptError as exc:     # e.g. resuming with another model than the run's
            outcome.error = f"{type(exc).__name__}: {exc}"
            return _finish(outcome, bar)
        with session:
            outcome.run_id = session.run_id
            planner = session.clients.get("planner")
            outcome.model = planner.config.model if planner is not None else None
            try:
                session.run()
            except AccelOptError as exc:  # a failed step, a refused model, the cap: the run stays resumable
                outcome.error = f"{type(exc).__name__}: {exc}"
            outcome.iterations_done = session.iteration
            failures = run_failures(session.store, session.run_id)
            outcome.failures = failures.to_dict()
            outcome.complete = (outcome.error is None and session.iteration >= session.config.iterations
                                and not failures.incomplete)
        return _finish(outcome, bar)

    try:
        if parallel == 1:
            outcomes = [one(j) for j in jobs]
        else:
            with ThreadPoolExecutor(parallel, thread_name_prefix="accelopt-arm") as pool:
                outcomes = list(pool.map(one, jobs))
    finally:
        if evaluator is not None:
            evaluator.shutdown()
    return outcomes


class _RunLines:
    """One printed line per finished run: readable live, in a terminal, and in a saved notebook."""

    def __init__(self, total: int) -> None:
        import threading
        self.total, self.done = total, 0
        self._lock = threading.Lock()

    def __call__(self, o: ArmOutcome) -> None:
        with self._lock:
            self.done += 1
            state = "complete" if o.complete else "NOT COMPLETE"
            why = o.reason()
            print(f"[{self.done}/{self.total}] {o.where()}: {state}, {o.iterations_done} iteration(s)"
                  + (f" -- {why}" if why else ""), flush=True)


def _finish(outcome: ArmOutcome, lines: "_RunLines | None") -> ArmOutcome:
    if lines is not None:
        lines(outcome)
    return outcome


def arm_model(arm: Arm, default_model: Mapping[str, Any] | None) -> dict[str, Any]:
    """The model settings an arm runs with."""
    # an arm naming its own model preset owns its endpoint; otherwise it refines the default model
    return dict(arm.model) if "model_preset" in arm.model else {**dict(default_model or {}), **arm.model}


def _seed_list(seeds: Iterable[int] | None) -> list[int | None]:
    if seeds is None:
        return [None]
    try:
        out = [int(s) for s in seeds]
    except (TypeError, ValueError):
        raise ConfigError(f"seeds takes a list of integers, e.g. [0, 1, 2]; got {seeds!r}") from None
    if not out or len(set(out)) != len(out):
        raise ConfigError(f"seeds takes distinct integers (one replicate per seed); got {out}")
    return list(out)


def _arm_spec(arm: Arm, problem: str, root: Path, default_model: Mapping[str, Any] | None, evaluator: Any,
              llm_concurrency: int | None, unpriced_ok: bool, allow_model_change: bool = False,
              seed: int | None = None) -> LaunchSpec:
    # endpoints were checked once for the whole batch; a replicate's seed is the search's (and its calls')
    overrides = {**arm.overrides, "seed": seed} if seed is not None else dict(arm.overrides)
    return LaunchSpec(problem, run_dir=root / run_folder(arm.name, seed) / problem,
                      model=arm_model(arm, default_model),
                      preset=arm.preset, overrides=overrides, resume="auto", eval_executor=evaluator,
                      llm_concurrency=llm_concurrency, unpriced_ok=unpriced_ok, check_endpoint=False,
                      allow_model_change=allow_model_change)


def _shared_evaluator(workers: int | None, scheduler: str | None) -> Any:
    if scheduler:
        from accelopt_nb.evaluation import DaskEvaluator
        return DaskEvaluator(scheduler)
    from accelopt_nb.evaluation import LocalPoolEvaluator
    return LocalPoolEvaluator(workers or None)


def collect_curves(root: str | Path) -> pd.DataFrame:
    """Read every run store under ``root/<arm folder>/<problem>`` into one tidy DataFrame (CURVE_COLUMNS)."""
    from accelopt_nb.store import DEFAULT_FILENAME, RunStore

    rows: list[dict[str, Any]] = []
    for db in sorted(Path(root).glob(f"*/*/{DEFAULT_FILENAME}")):
        arm, seed, problem = arm_name(db.parent.parent), arm_seed(db.parent.parent), db.parent.name
        store = RunStore.open(db.parent)
        try:
            for run_id in store.run_ids():
                rows.extend(_run_curve(store, run_id, arm, seed, problem))
        finally:
            store.close()
    return pd.DataFrame(rows, columns=CURVE_COLUMNS)


def _run_curve(store: Any, run_id: str, arm: str, seed: int | None, problem: str) -> list[dict[str, Any]]:
    selects = {}
    for step in store.rows("steps", run_id):
        if step["step"] == "select" and step["status"] == "done":
            selects[int(step["iteration"])] = step.get("info") or {}
    calls = store.rows("llm_calls", run_id)
    out = []
    tokens = cost = 0.0
    for it in sorted(selects):
        info = selects[it]
        for c in calls:
            if c["iteration"] == it:
                tokens += (c["prompt_tokens"] or 0) + (c["completion_tokens"] or 0)
                # an unpriced call makes the cost unknown (NaN, shown as "unpriced"), never $0
                cost += math.nan if c["cost_usd"] is None else c["cost_usd"]
        out.append({"arm": arm, "seed": seed, "problem": problem, "run_id": run_id, "iteration": it,
                    "best_speedup": info.get("best_speedup"), "best_pct_peak": info.get("best_pct_peak"),
                    "cum_tokens": tokens, "cum_cost_usd": cost})
    return out


GEOMEAN_COLUMNS = ["arm", "iteration", "geomean_speedup", "cum_cost_usd", "low", "high", "seeds"]


def _by_replicate(curves: pd.DataFrame) -> Iterable[tuple[str, Any, pd.DataFrame]]:
    """(arm, seed, rows) per replicate; an arm run without seeds is one replicate (seed None)."""
    seeds = curves["seed"] if "seed" in curves else pd.Series([None] * len(curves), index=curves.index)
    keyed = curves.assign(_replicate=seeds.astype(object).where(seeds.notna(), "none"))
    for (arm, replicate), g in keyed.groupby(["arm", "_replicate"], sort=True):
        yield str(arm), (None if replicate == "none" else replicate), g


def geomean_by_iteration(curves: pd.DataFrame) -> pd.DataFrame:
    """Per arm and iteration: geometric mean over problems of the best speedup so far (GEOMEAN_COLUMNS).

    A problem whose run stopped earlier keeps its last value, so every arm averages the same set.
    With replicates (``seed``), ``geomean_speedup`` is the geometric mean over them, ``low``/``high``
    the worst and best replicate, ``cum_cost_usd`` the mean cost of one replicate, ``seeds`` how many
    replicates reached the iteration; without, ``low`` = ``high`` = the value and ``seeds`` = 1.
    """
    if curves.empty:
        return pd.DataFrame(columns=GEOMEAN_COLUMNS)
    last_it = int(curves["iteration"].max())
    per: list[dict[str, Any]] = []
    for arm, _seed, g in _by_replicate(curves):
        per_problem = {p: gg.set_index("iteration").sort_index() for p, gg in g.groupby("problem")}
        for it in range(last_it + 1):
            vals, cost = [], 0.0
            for frame in per_problem.values():
                upto = frame[frame.index <= it]
                if upto.empty:
                    continue
                vals.append(float(upto["best_speedup"].iloc[-1]))
                cost += float(upto["cum_cost_usd"].iloc[-1])
            if vals:
                per.append({"arm": arm, "iteration": it, "speedup": float(np.exp(np.mean(np.log(vals)))),
                            "cost": cost})
    out = []
    for (arm, it), g in pd.DataFrame(per).groupby(["arm", "iteration"], sort=True):
        out.append({"arm": arm, "iteration": int(it), "geomean_speedup": float(np.exp(np.mean(np.log(g["speedup"])))),
                    "cum_cost_usd": float(g["cost"].mean(skipna=False)), "low": float(g["speedup"].min()),
                    "high": float(g["speedup"].max()), "seeds": len(g)})
    return pd.DataFrame(out, columns=GEOMEAN_COLUMNS)


def plot_speedup_curves(curves: pd.DataFrame, ax=None, title: str = "Best speedup so far (geometric mean)"):
    from accelopt_nb.reproduce.figures import new_figure, plot_arm_lines, seeds_note

    g = geomean_by_iteration(curves)
    fig = None
    if ax is None:   # without pyplot: an inline backend would show the figure a second time
        fig, ax = new_figure(6.5, 4)
    plot_arm_lines(ax, g, "iteration")
    ax.axhline(1.0, color="grey", lw=0.8)
    from matplotlib.ticker import MaxNLocator
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("iteration")
    ax.set_ylabel("speedup over the baseline")
    note = seeds_note(g)
    ax.set_title(title + (f"\n{note}" if note else ""), fontsize=9)
    ax.legend()
    ax.grid(alpha=0.3)
    return fig or ax.figure


def plot_cost(curves: pd.DataFrame, ax=None, title: str = "Speedup vs LLM cost"):
    from accelopt_nb.reproduce.figures import new_figure, plot_arm_lines

    g = geomean_by_iteration(curves)
    fig = None
    if ax is None:
        fig, ax = new_figure(6.5, 4)
    # an arm with an unpriced call has no cost to place it at: named, not drawn at $0
    unpriced = sorted(str(arm) for arm, a in g.groupby("arm") if a["cum_cost_usd"].isna().any())
    plot_arm_lines(ax, g[~g["arm"].isin(unpriced)], "cum_cost_usd")
    if unpriced:
        ax.text(0.02, 0.02, "unpriced: " + ", ".join(unpriced), transform=ax.transAxes, fontsize=8)
    ax.set_xlabel("cumulative LLM cost (USD, all problems)")
    ax.set_ylabel("geometric-mean speedup")
    priced = g["cum_cost_usd"].dropna()
    if len(priced) and (priced > 0).all():
        ax.set_xscale("log")
    ax.set_title(title)
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    ax.grid(alpha=0.3)
    return fig or ax.figure


def summary_table(curves: pd.DataFrame) -> pd.DataFrame:
    """Final numbers per arm: geometric-mean speedup, total cost, tokens, and cost per 1% speedup.

    With replicates (``seed``): the speedup is the geometric mean over them, ``low``/``high`` the worst
    and best replicate's, and cost and tokens are those of one replicate (the mean over seeds)."""
    per: dict[str, list[dict[str, float]]] = {}
    for arm, _seed, g in _by_replicate(curves):
        last = g.sort_values("iteration").groupby("problem").tail(1)
        per.setdefault(arm, []).append({
            "gm": float(np.exp(np.mean(np.log(last["best_speedup"].astype(float))))),
            "cost": float(last["cum_cost_usd"].sum(skipna=False)),   # NaN: some call unpriced
            "tokens": float(last["cum_tokens"].sum()), "problems": len(last),
            "iterations": int(g["iteration"].max()) + 1})
    rows = []
    for arm, reps in per.items():
        gms = [r["gm"] for r in reps]
        gm = float(np.exp(np.mean(np.log(gms))))
        cost = float(np.mean([r["cost"] for r in reps]))
        rows.append({"arm": arm, "seeds": len(reps), "problems": max(r["problems"] for r in reps),
                     "iterations": max(r["iterations"] for r in reps), "geomean_speedup": gm,
                     "low": min(gms), "high": max(gms), "total_cost_usd": cost,
                     "total_tokens": int(round(np.mean([r["tokens"] for r in reps]))),
                     "usd_per_speedup_point": cost / ((gm - 1) * 100) if gm > 1 else math.inf,
                     "priced": not math.isnan(cost)})
    return pd.DataFrame(rows)
