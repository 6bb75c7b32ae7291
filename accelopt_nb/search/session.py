"""The AccelOpt search as a sequence of persisted, resumable steps.

One iteration is five steps, each a method of :class:`Session`:

1. :meth:`Session.plan` — N plans for every beam kernel (planner agent, memory in its prompt);
2. :meth:`Session.execute` — K kernels for every plan (executor agent);
3. :meth:`Session.evaluate` — correctness and latency of the new kernels (evaluation service);
4. :meth:`Session.select` — the next beam: the B fastest correct kernels among the beam and
   the new ones (:func:`accelopt_nb.search.beam.select_beam`);
5. :meth:`Session.summarize` — at most TopK new memory items from this iteration's measured
   parent→child pairs (summarizer agent), pushed into the FIFO memory.

:meth:`Session.step` runs whatever remains of the current iteration, :meth:`Session.run` runs
iterations until T are complete. Every plan, kernel, evaluation and memory item is written to
the run store as soon as it exists, and every step is marked done when it completes, so a
killed process loses only the LLM calls and evaluations in flight: :meth:`Session.resume`
continues from the last completed step, and re-running a half-done step only does the
missing work.

Any role can be played by a person: ``plan(manual=[...])``, ``execute(manual={plan_id: src})``
and ``summarize(manual=[...])`` record human-written plans, kernels and memory items instead of
calling the LLM. A failed LLM call never aborts a step: it is recorded in the step's info and
in the ledger, and the step goes on with the calls that worked.

Repeated sampling (``strategy: repeated``) is the paper's ablation baseline: the same number
of plans and kernels per iteration, always drawn from the baseline kernel, with no memory.
"""
from __future__ import annotations

import asyncio
import math
import random
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from accelopt_nb.agents.executor import Executor
from accelopt_nb.agents.planner import ParsedPlan, Planner, parse_plan
from accelopt_nb.agents.prompts import PeakInfo, PromptSet, format_profile
from accelopt_nb.agents.summarizer import ParsedSummary, Summarizer
from accelopt_nb.errors import (BudgetExceededError, ConfigError, EvaluationError, LLMError,
                                StoreError)
from accelopt_nb.search.beam import Candidate, select_beam, source_hash
from accelopt_nb.search.config import SearchConfig
from accelopt_nb.search.memory import (MemoryItem, OptimizationMemory, RewriteRecord, memory_item_from_pair,
                                        select_rewrites)
from accelopt_nb.search.problem import SearchProblem

PHASES = ("plan", "execute", "evaluate", "select", "summarize")
BASELINE_ID = "baseline"
BASELINE_ITERATION = -1
ROLES = ("planner", "executor", "summarizer")
_SLOTS = 10_000  # generation-order stride per plan (more samples than this per plan is absurd)

ProgressFn = Callable[[dict[str, Any]], None]


@dataclass
class KernelView:
    """A kernel of the run with its evaluation (once evaluated)."""

    kernel_id: str
    iteration: int
    source: str
    parent_id: str | None
    plan_id: str | None
    origin: str
    order: int
    data: dict[str, Any] = field(default_factory=dict)
    status: str | None = None
    latency_ms: float | None = None
    pct_peak: float | None = None
    profile: dict[str, Any] | None = None
    message: str | None = None

    @property
    def evaluated(self) -> bool:
        return self.status is not None

    @property
    def correct(self) -> bool:
        return self.status == "correct" and self.latency_ms is not None and math.isfinite(self.latency_ms)

    @property
    def hash(self) -> str:
        return source_hash(self.source)

    def candidate(self) -> Candidate:
        return Candidate(self.kernel_id, self.hash, self.latency_ms, self.correct, self.order)


@dataclass
class PlanView:
    plan_id: str
    iteration: int
    parent_id: str
    text: str
    step: str
    origin: str
    slot: tuple[int, int]  # (beam index, sample index)
    data: dict[str, Any] = field(default_factory=dict)


def _new_run_id(problem: str) -> str:
    return f"{problem}-{datetime.now(timezone.utc).strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"


class Session:
    """One search on one problem, backed by a run store. Build with :meth:`create` or :meth:`resume`."""

    def __init__(self, *, problem: SearchProblem, config: SearchConfig, store: Any, run_id: str,
                 llm: Any = None, memory: OptimizationMemory | None = None, prompts: PromptSet | None = None,
                 eval_executor: Any = None, eval_cache: Any = True, eval_options: Any = None,
                 progress: ProgressFn | None = None, memory_path: str | Path | None = None) -> None:
        self.problem = problem
        self.config = config
        self.store = store
        self.run_id = run_id
        self.prompts = prompts or PromptSet()
        self._clients = self._normalize_llm(llm)
        hw = config.evaluation.hw
        self.planner = Planner(self.prompts, hw=hw, dtypes=problem.dtypes, fields=config.planner.profile_fields)
        self.executor = Executor(self.prompts, hw=hw, dtypes=problem.dtypes, tolerance=problem.tolerance,
                                 adversarial=problem.adversarial)
        measured = (f"measured on {hw} hardware" if config.evaluation.backend == "neuron"
                    else f"estimated by the {hw} performance model")
        self.summarizer = Summarizer(self.prompts, hw=hw, measured_on=measured)
        self.memory = memory if memory is not None else OptimizationMemory(config.memory.capacity)
        self.memory_path = Path(memory_path) if memory_path is not None else None
        self.eval_executor = eval_executor
        self.eval_cache = eval_cache
        self.eval_options = eval_options
        self.progress = progress
        self.kernels: dict[str, KernelView] = {}
        self.plans: dict[str, PlanView] = {}
        self.beam: list[str] = []  # kernel ids, fastest first
        self.iteration = 0
        self.next_phase = PHASES[0]
        self._loop = None

    # ------------------------------------------------------------------ construction
    @classmethod
    def create(cls, problem: SearchProblem | str, *, run_dir: str | Path, config: SearchConfig | None = None,
               preset: str | Path = "smoke", llm: Any = None, run_id: str | None = None,
               memory: OptimizationMemory | None = None, llm_settings: Mapping[str, Any] | None = None,
               prices: Mapping[str, Any] | None = None, **kwargs: Any) -> "Session":
        """Start a new run: record it, evaluate the baseline, and get ready for iteration 0.

        ``prices``: the price table's snapshot (``PriceTable.snapshot()``), kept with the run.
        """
        from accelopt_nb.store import RunStore

        config = config or SearchConfig.from_preset(preset)
        if isinstance(problem, str):
            problem = SearchProblem.from_nkibench(problem, config.evaluation.shape_preset)
        store = RunStore.open(run_dir)
        run_id = run_id or _new_run_id(problem.name)
        record = {"problem": problem.name, "shape_preset": problem.preset, "search": config.to_dict(),
                  "llm": dict(llm_settings or {}), "accelopt_nb": _version()}
        store.create_run(run_id, record, prices=prices)
        store.add_problem(run_id, problem.name, problem.to_spec())
        memory_given = memory is not None
        if memory is None:
            memory = OptimizationMemory(config.memory.capacity)
        kwargs.setdefault("memory_path", Path(run_dir) / f"memory-{run_id}.json")
        session = cls(problem=problem, config=config, store=store, run_id=run_id, llm=llm, memory=memory, **kwargs)
        session._load(restore_memory=not memory_given)
        return session

    @classmethod
    def resume(cls, run_dir: str | Path, *, run_id: str | None = None, problem: SearchProblem | None = None,
               llm: Any = None, memory: OptimizationMemory | None = None, **kwargs: Any) -> "Session":
        """Reopen a run and continue from its last completed step (the latest run if no id is given)."""
        from accelopt_nb.store import DEFAULT_FILENAME, RunStore

        path = Path(run_dir)
        if not (path / DEFAULT_FILENAME).is_file():
            raise StoreError(f"no run store in {path} (expected {path / DEFAULT_FILENAME}); nothing to resume")
        store = RunStore.open(path)
        run_id = run_id or store.latest_run_id()
        if run_id is None:
            raise StoreError(f"the run store in {path} holds no runs")
        rec = store.get_run(run_id)["config"]
        config = SearchConfig.from_dict(rec["search"])
        if problem is None:
            specs = [r["spec"] for r in store.rows("problems", run_id) if r["problem_id"] == rec["problem"]]
            if not specs:
                raise StoreError(f"run {run_id} has no record of its problem {rec['problem']!r}")
            problem = SearchProblem.from_spec(specs[0])
        elif problem.name != rec["problem"]:
            raise ConfigError(f"run {run_id} optimizes {rec['problem']!r}, not {problem.name!r}")
        kwargs.setdefault("memory_path", path / f"memory-{run_id}.json")
        session = cls(problem=problem, config=config, store=store, run_id=run_id, llm=llm,
                      memory=memory if memory is not None else OptimizationMemory(config.memory.capacity), **kwargs)
        session._load(restore_memory=memory is None)
        return session

    @staticmethod
    def _normalize_llm(llm: Any) -> dict[str, Any]:
        if llm is None:
            return {}
        if isinstance(llm, Mapping):
            bad = set(llm) - set(ROLES)
            if bad:
                raise ConfigError(f"unknown agent role(s) {sorted(bad)} in llm=; roles: {ROLES}")
            return dict(llm)
        return {role: llm for role in ROLES}

    def _client(self, role: str) -> Any:
        client = self._clients.get(role)
        if client is None:
            raise ConfigError(f"no LLM client for the {role}: pass llm= to the session, or give the step "
                              f"human input with manual=")
        return client

    # ------------------------------------------------------------------ state from the store
    def _load(self, restore_memory: bool = False) -> None:
        """Rebuild the in-memory view from the store and find where to continue."""
        scope = self.problem.name
        evals = {}
        for row in self.store.rows("evaluations", self.run_id):
            evals[row["kernel_id"]] = row
        for row in self.store.rows("kernels", self.run_id):
            if row["problem_id"] != scope:
                continue
            data = row.get("data") or {}
            view = KernelView(kernel_id=row["kernel_id"], iteration=int(row["iteration"]), source=row["source"],
                              parent_id=row["parent_id"], plan_id=row["plan_id"], origin=row["origin"] or "",
                              order=int(data.get("order", 0)), data=data)
            ev = evals.get(view.kernel_id)
            if ev is not None:
                self._apply_eval(view, ev.get("result") or {}, ev["status"])
            self.kernels[view.kernel_id] = view
        for row in self.store.rows("plans", self.run_id):
            if row["problem_id"] != scope:
                continue
            data = row.get("data") or {}
            self.plans[row["plan_id"]] = PlanView(plan_id=row["plan_id"], iteration=int(row["iteration"]),
                                                  parent_id=row["parent_kernel_id"], text=row["text"],
                                                  step=data.get("step", row["text"]), origin=data.get("origin", "llm"),
                                                  slot=tuple(data.get("slot", (0, 0))), data=data)
        steps = self._done_steps()
        if (BASELINE_ITERATION, "baseline") not in steps:
            self._init_baseline()
        baseline = self.kernels[BASELINE_ID]
        if not baseline.correct:
            raise EvaluationError(f"the baseline kernel of {scope} is not correct ({baseline.status}: "
                                  f"{baseline.message}); the search needs a correct starting point")
        # The beam: from the last completed select, else the baseline alone.
        self.beam = [BASELINE_ID]
        last_select = max((it for it, s in steps if s == "select"), default=None)
        if last_select is not None:
            self.beam = list(steps[(last_select, "select")]["beam"])
        if restore_memory:
            snap = self._latest_memory_snapshot(steps)
            if snap is not None:
                self.memory = OptimizationMemory(self.config.memory.capacity,
                                                 [MemoryItem.from_dict(d) for d in snap])
        done = [(it, PHASES.index(s)) for it, s in steps if s in PHASES]
        if not done:
            self.iteration, self.next_phase = 0, PHASES[0]
        else:
            it, idx = max(done)
            self.iteration, self.next_phase = (it, PHASES[idx + 1]) if idx + 1 < len(PHASES) else (it + 1, PHASES[0])

    def _done_steps(self) -> dict[tuple[int, str], dict[str, Any]]:
        out: dict[tuple[int, str], dict[str, Any]] = {}
        for row in self.store.rows("steps", self.run_id):
            if row["scope"] == self.problem.name and row["status"] == "done":
                out[(int(row["iteration"]), row["step"])] = row.get("info") or {}
        return out

    def _latest_memory_snapshot(self, steps: Mapping[tuple[int, str], dict]) -> list[dict] | None:
        best: tuple[int, int] | None = None
        snap = None
        for (it, name), info in steps.items():
            if name in ("plan", "summarize") and "memory" in info:
                key = (it, PHASES.index(name))
                if best is None or key > best:
                    best, snap = key, info["memory"]
        return snap

    def _init_baseline(self) -> None:
        src = self.problem.baseline_source
        self._emit("phase", phase="baseline", iteration=BASELINE_ITERATION, total=1)
        view = KernelView(kernel_id=BASELINE_ID, iteration=BASELINE_ITERATION, source=src, parent_id=None,
                          plan_id=None, origin="baseline", order=0)
        result = self._evaluate_sources([(BASELINE_ID, src)])[BASELINE_ID]
        with self.store.step(self.run_id, BASELINE_ITERATION, "baseline", scope=self.problem.name) as st:
            st.add_kernel(kernel_id=BASELINE_ID, problem_id=self.problem.name, source=src,
                          iteration=BASELINE_ITERATION, origin="baseline", data={"order": 0})
            st.add_evaluation(**self._eval_fields(BASELINE_ID, result))
            st.info = {"status": result.status.value, "latency_ms": result.latency_ms}
        self._emit("item", phase="baseline", iteration=BASELINE_ITERATION, ok=result.correct)
        self._apply_eval(view, result.to_dict(), result.status.value)
        self.kernels[BASELINE_ID] = view
        self._emit("phase_done", phase="baseline", iteration=BASELINE_ITERATION,
                   message=f"baseline {result.status.value}, {_ms(result.latency_ms)}")

    # ------------------------------------------------------------------ helpers
    def _emit(self, kind: str, **info: Any) -> None:
        if self.progress is not None:
            self.progress({"kind": kind, "problem": self.problem.name, **info})

    def _require_phase(self, phase: str) -> None:
        if self.next_phase != phase:
            raise ConfigError(f"iteration {self.iteration}: the next step is {self.next_phase}(), not {phase}() "
                              f"(steps run in the order {', '.join(PHASES)})")

    def _start(self, phase: str) -> None:
        self.store.mark_step(self.run_id, self.iteration, phase, "started", scope=self.problem.name)

    def _finish(self, phase: str, info: Mapping[str, Any]) -> None:
        self.store.mark_step(self.run_id, self.iteration, phase, "done", scope=self.problem.name, info=info)
        i = PHASES.index(phase)
        if i + 1 < len(PHASES):
            self.next_phase = PHASES[i + 1]
        else:
            self.iteration, self.next_phase = self.iteration + 1, PHASES[0]

    def _loop_thread(self):
        if self._loop is None:
            from accelopt_nb.llm.loop_thread import LoopThread
            self._loop = LoopThread(name="accelopt-session")
        return self._loop

    def _call_many(self, role: str, specs: Sequence[tuple[Any, list, Callable, int]],
                   on_done: Callable[[Any, Any], None]) -> None:
        """Run LLM calls concurrently; ``on_done(key, completion)`` runs as each one finishes.

        Per-call failures arrive as failed Completions (the step goes on). Errors that make every
        call fail (spending cap, bad endpoint, replay miss) are raised after the calls in flight
        have finished and been recorded.
        """
        if not specs:
            return
        client = self._client(role)

        async def one(key: Any, messages: list, validate: Callable, sample: int):
            return key, await client.complete(messages, role=role, run_id=self.run_id, iteration=self.iteration,
                                              validate=validate, sample=sample)

        async def main() -> None:
            tasks = [asyncio.ensure_future(one(*spec)) for spec in specs]
            fatal: BaseException | None = None
            for fut in asyncio.as_completed(tasks):
                try:
                    key, completion = await fut
                except (BudgetExceededError, LLMError, ConfigError) as exc:
                    fatal = fatal or exc
                    continue
                on_done(key, completion)
            if fatal is not None:
                raise fatal

        self._loop_thread().run(main())

    def _plan_from(self) -> list[str]:
        """The kernels plans are drawn from this iteration."""
        return [BASELINE_ID] if self.config.strategy == "repeated" else list(self.beam)

    def _iteration_kernels(self, iteration: int | None = None) -> list[KernelView]:
        it = self.iteration if iteration is None else iteration
        return sorted((k for k in self.kernels.values() if k.iteration == it), key=lambda k: (k.order, k.kernel_id))

    def iteration_plans(self, iteration: int | None = None) -> list[PlanView]:
        """The plans of an iteration (the current one by default), in generation order."""
        return self._iteration_plans(iteration)

    def _iteration_plans(self, iteration: int | None = None) -> list[PlanView]:
        it = self.iteration if iteration is None else iteration
        return sorted((p for p in self.plans.values() if p.iteration == it), key=lambda p: (p.slot, p.plan_id))

    def _peak_info(self, kernel: KernelView) -> PeakInfo | None:
        if not self.config.planner.show_peak:
            return None
        p = self.problem.peak(self.config.evaluation.hw)
        if p is None or kernel.latency_ms is None:
            return None
        return PeakInfo(percent=100.0 * p[0] / kernel.latency_ms, peak_ms=p[0], bound=p[1])

    def _visible_memory(self) -> list[MemoryItem]:
        if not self.config.uses_memory:
            return []
        return self.memory.visible(self.problem.name, shared=self.config.memory.shared)

    # ------------------------------------------------------------------ step 1: plan
    def plan(self, manual: Sequence[str] | Mapping[str, Sequence[str] | str] | None = None) -> list[PlanView]:
        """N plans per beam kernel from the planner, or the given human-written plans instead.

        ``manual``: a list of plan texts (each given to every beam kernel) or a mapping from
        beam kernel id to its plan text(s). With ``manual`` no planner call is made.
        """
        self._require_phase("plan")
        self._start("plan")
        t = self.iteration
        sources = self._plan_from()
        failures: list[dict[str, Any]] = []
        if manual is not None:
            per_kernel = self._manual_plans(manual, sources)
            for b, kid in enumerate(sources):
                for j, text in enumerate(per_kernel.get(kid, [])):
                    pid = f"i{t}b{b}h{j}"
                    if pid not in self.plans:
                        self._store_plan(pid, kid, (b, j), parse_plan_lenient(text), origin="manual")
        else:
            n = self.config.plans_for(t, len(self.beam))
            memory = self._visible_memory()
            specs = []
            for b, kid in enumerate(sources):
                kernel = self.kernels[kid]
                rng = random.Random(f"{self.config.seed}:{t}:{kid}")  # seeded, resume-stable
                lines = format_profile(_profile_with_latency(kernel), self.config.planner.profile_order, rng,
                                       fields=self.config.planner.profile_fields)
                hints = _hints(kernel) if self.config.planner.show_hints else []
                messages = self.planner.messages(problem_name=self.problem.name,
                                                 reference_source=self.problem.reference_source,
                                                 kernel_source=kernel.source, profile_lines=lines,
                                                 memory_items=memory, peak=self._peak_info(kernel), hints=hints)
                for j in range(n):
                    pid = f"i{t}b{b}p{j}"
                    if pid not in self.plans:
                        specs.append(((pid, kid, b, j), messages, self.planner.validate, j))
            self._emit("phase", phase="plan", iteration=t, total=len(specs))

            def done(key: Any, c: Any) -> None:
                pid, kid, b, j = key
                if c.ok:
                    self._store_plan(pid, kid, (b, j), c.parsed, origin="llm", call_id=c.call_id)
                else:
                    failures.append({"plan_id": pid, "parent_id": kid, "call_id": c.call_id, "status": c.status,
                                     "error": c.error, "raw": _raw_of(c)})
                self._emit("item", phase="plan", iteration=t, ok=c.ok)

            self._call_many("planner", specs, done)
        plans = self._iteration_plans()
        self._finish("plan", {"plans": len(plans), "failed": failures, "from": sources,
                              "memory": [i.to_dict() for i in self.memory]})
        self._emit("phase_done", phase="plan", iteration=t, message=f"{len(plans)} plans, {len(failures)} failed")
        return plans

    @staticmethod
    def _manual_plans(manual: Any, sources: Sequence[str]) -> dict[str, list[str]]:
        if isinstance(manual, str):
            manual = [manual]
        if isinstance(manual, Mapping):
            unknown = set(manual) - set(sources)
            if unknown:
                raise ConfigError(f"manual plans name kernels that are not in the beam: {sorted(unknown)}; "
                                  f"beam: {list(sources)}")
            return {k: [v] if isinstance(v, str) else list(v) for k, v in manual.items()}
        texts = list(manual)
        if not texts:
            raise ConfigError("manual= holds no plans")
        return {kid: texts for kid in sources}

    def _store_plan(self, pid: str, parent: str, slot: tuple[int, int], parsed: ParsedPlan, *, origin: str,
                    call_id: str | None = None) -> None:
        data = {"step": parsed.step, "origin": origin, "slot": list(slot), "call_id": call_id,
                "reasoning": parsed.reasoning, "notes": list(parsed.notes)}
        self.store.add_plan(self.run_id, plan_id=pid, problem_id=self.problem.name, iteration=self.iteration,
                            text=parsed.text, parent_kernel_id=parent, data=data)
        self.plans[pid] = PlanView(pid, self.iteration, parent, parsed.text, parsed.step, origin, slot, data)

    # ------------------------------------------------------------------ step 2: execute
    def execute(self, manual: Mapping[str, str | Sequence[str]] | None = None, *, llm: bool = True) -> list[KernelView]:
        """K kernels per plan from the executor; ``manual`` maps plan ids to human-written kernels.

        Plans named in ``manual`` get those kernels and no executor call; the other plans go to the
        executor unless ``llm=False``.
        """
        self._require_phase("execute")
        self._start("execute")
        t = self.iteration
        plans = self._iteration_plans()
        manual = dict(manual or {})
        unknown = set(manual) - {p.plan_id for p in plans}
        if unknown:
            raise ConfigError(f"manual kernels name unknown plans {sorted(unknown)}; plans of iteration {t}: "
                              f"{[p.plan_id for p in plans]}")
        failures: list[dict[str, Any]] = []
        # A kernel's generation order depends only on its slot, so ties break the same way in
        # a resumed run as in an uninterrupted one.
        slot_order: dict[str, int] = {}
        for p_index, p in enumerate(plans):
            if p.plan_id in manual:
                srcs = [manual[p.plan_id]] if isinstance(manual[p.plan_id], str) else list(manual[p.plan_id])
                for s, src in enumerate(srcs):
                    kid = f"{p.plan_id}m{s}"
                    if kid not in self.kernels:
                        self._store_kernel(kid, src, p, origin="manual", order=p_index * _SLOTS + s, data={})
        specs = []
        if llm:
            k_samples = self.config.samples_per_plan
            for p_index, p in enumerate(plans):
                if p.plan_id in manual:
                    continue
                parent = self.kernels[p.parent_id]
                messages = self.executor.messages(problem_name=self.problem.name,
                                                  reference_source=self.problem.reference_source,
                                                  kernel_source=parent.source, plan=p.text)
                for s in range(k_samples):
                    kid = f"{p.plan_id}s{s}"
                    slot_order[kid] = p_index * _SLOTS + s
                    if kid not in self.kernels:
                        specs.append(((kid, p.plan_id, s), messages, self.executor.validate, s))
        self._emit("phase", phase="execute", iteration=t, total=len(specs))

        def done(key: Any, c: Any) -> None:
            kid, pid, s = key
            if c.ok:
                got = c.parsed
                data = {"call_id": c.call_id, "extraction": got.method, "notes": got.notes, "sample": s,
                        "raw_response": c.text, "reasoning": c.reasoning,
                        "rejected": [r.reason for r in c.rejections]}
                self._store_kernel(kid, got.code, self.plans[pid], origin="llm", order=slot_order[kid], data=data)
            else:
                failures.append({"kernel_id": kid, "plan_id": pid, "call_id": c.call_id, "status": c.status,
                                 "error": c.error, "raw": _raw_of(c)})
            self._emit("item", phase="execute", iteration=t, ok=c.ok)

        self._call_many("executor", specs, done)
        kernels = self._iteration_kernels()
        self._finish("execute", {"kernels": len(kernels), "failed": failures})
        self._emit("phase_done", phase="execute", iteration=t,
                   message=f"{len(kernels)} kernels, {len(failures)} calls without a kernel")
        return kernels

    def _store_kernel(self, kid: str, source: str, plan: PlanView, *, origin: str, order: int,
                      data: dict[str, Any]) -> None:
        data = {**data, "order": order}
        self.store.add_kernel(self.run_id, kernel_id=kid, problem_id=self.problem.name, source=source,
                              iteration=self.iteration, parent_id=plan.parent_id, plan_id=plan.plan_id,
                              origin=origin, data=data)
        self.kernels[kid] = KernelView(kid, self.iteration, source, plan.parent_id, plan.plan_id, origin, order, data)

    # ------------------------------------------------------------------ step 3: evaluate
    def evaluate(self) -> list[KernelView]:
        """Evaluate this iteration's kernels (in parallel; each result stored as it arrives)."""
        self._require_phase("evaluate")
        self._start("evaluate")
        t = self.iteration
        pending = [k for k in self._iteration_kernels() if not k.evaluated]
        self._emit("phase", phase="evaluate", iteration=t, total=len(pending))

        def done(label: str, result: Any) -> None:
            self.store.add_evaluation(self.run_id, **self._eval_fields(label, result))
            self._apply_eval(self.kernels[label], result.to_dict(), result.status.value)
            self._emit("item", phase="evaluate", iteration=t, ok=result.correct)

        self._evaluate_sources([(k.kernel_id, k.source) for k in pending], on_result=done)
        kernels = self._iteration_kernels()
        counts = Counter(k.status for k in kernels)
        self._finish("evaluate", {"statuses": dict(counts)})
        self._emit("phase_done", phase="evaluate", iteration=t,
                   message=", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "nothing to evaluate")
        return kernels

    def _evaluate_sources(self, items: Sequence[tuple[str, str]],
                          on_result: Callable[[str, Any], None] | None = None) -> dict[str, Any]:
        from accelopt_nb.evaluation import evaluate_many, make_job

        ev = self.config.evaluation
        jobs = [make_job(self.problem.eval_target, src, backend=ev.backend, hw=ev.hw, preset=self.problem.preset,
                         options=self.eval_options, label=label) for label, src in items]
        out: dict[str, Any] = {}
        if not jobs:
            return out
        for result in evaluate_many(jobs, self.eval_executor, progress=False, cache=self.eval_cache):
            out[result.label] = result
            if on_result is not None:
                on_result(result.label, result)
        return out

    def _eval_fields(self, kernel_id: str, result: Any) -> dict[str, Any]:
        lat = result.latency_ms
        return {"kernel_id": kernel_id, "backend": result.backend, "status": result.status.value,
                "sha256": result.kernel_sha256, "correct": result.correct,
                "latency_us": None if lat is None else lat * 1e3,
                "pct_peak": self.problem.percent_of_peak(lat, result.hw) if result.correct else None,
                "result": result.to_dict()}

    def _apply_eval(self, view: KernelView, result: Mapping[str, Any], status: str) -> None:
        view.status = status
        lat = result.get("latency_ms")
        view.latency_ms = float(lat) if isinstance(lat, (int, float)) else None
        view.profile = result.get("profile") or None
        view.message = result.get("message")
        view.pct_peak = (self.problem.percent_of_peak(view.latency_ms, self.config.evaluation.hw)
                         if status == "correct" else None)

    # ------------------------------------------------------------------ step 4: select
    def select(self) -> list[KernelView]:
        """The next beam: the B fastest correct kernels among the beam and this iteration's kernels."""
        self._require_phase("select")
        self._start("select")
        t = self.iteration
        new = self._iteration_kernels()
        current = [self.kernels[k] for k in self.beam]
        chosen = select_beam([k.candidate() for k in current], [k.candidate() for k in new], self.config.beam_width)
        if not chosen:  # cannot happen while the baseline is correct; guard anyway
            raise EvaluationError("no correct kernel left to form a beam")
        self.beam = [c.kernel_id for c in chosen]
        best = self.kernels[self.beam[0]]
        base = self.kernels[BASELINE_ID]
        info = {"beam": self.beam, "best": best.kernel_id, "best_latency_ms": best.latency_ms,
                "best_speedup": base.latency_ms / best.latency_ms, "best_pct_peak": best.pct_peak,
                "new_correct": sum(k.correct for k in new), "new": len(new)}
        self._finish("select", info)
        self._emit("phase_done", phase="select", iteration=t,
                   message=f"best {best.kernel_id} {_ms(best.latency_ms)} ({info['best_speedup']:.3f}x)")
        return [self.kernels[k] for k in self.beam]

    # ------------------------------------------------------------------ step 5: summarize
    def rewrite_pairs(self, iteration: int | None = None):
        """The slow→fast pairs an iteration contributes to memory (before summarization)."""
        records = []
        for k in self._iteration_kernels(iteration):
            parent = self.kernels.get(k.parent_id or "")
            if parent is None or parent.latency_ms is None:
                continue
            records.append(RewriteRecord(parent.kernel_id, parent.source, parent.latency_ms, k.kernel_id, k.source,
                                         k.latency_ms if k.correct else None, k.plan_id or "", k.order))
        m = self.config.memory
        return select_rewrites(records, m.top_k, m.positive_threshold, m.negative_threshold)

    def summarize(self, manual: Sequence[MemoryItem | Mapping[str, Any]] | None = None) -> list[MemoryItem]:
        """Summarize this iteration's best rewrites into memory items and push them into the FIFO.

        ``manual``: human-written items (MemoryItem or {"title", "summary"}) added instead of
        summarizer calls. With memory disabled (or repeated sampling) the step only closes the
        iteration.
        """
        self._require_phase("summarize")
        self._start("summarize")
        t = self.iteration
        failures: list[dict[str, Any]] = []
        not_found: list[str] = []
        new_items: list[MemoryItem] = []
        existing = self._stored_memory_items(t)
        if manual is not None:
            for n, entry in enumerate(manual):
                item = entry if isinstance(entry, MemoryItem) else MemoryItem(
                    title=str(entry.get("title", "")), summary=str(entry["summary"]), kind="manual", origin="manual")
                item.problem = item.problem or self.problem.name
                item.iteration, item.run_id = t, self.run_id
                item.item_id = f"{self.run_id}:i{t}:manual{n}"
                if item.item_id not in existing:
                    self._store_memory_item(item)
                new_items.append(existing.get(item.item_id, item))
        elif self.config.uses_memory:
            pairs = self.rewrite_pairs()
            results: dict[str, MemoryItem] = {}
            specs = []
            for pair in pairs:
                iid = f"{self.run_id}:i{t}:{pair.slow_id}>{pair.fast_id}"
                if iid in existing:
                    results[iid] = existing[iid]
                    continue
                slow, fast = self.kernels[pair.slow_id], self.kernels[pair.fast_id]
                messages = self.summarizer.messages(slow_source=pair.slow_source, fast_source=pair.fast_source,
                                                    speedup=pair.speedup, slow_ms=slow.latency_ms,
                                                    fast_ms=fast.latency_ms)
                specs.append(((iid, pair), messages, self.summarizer.validate, 0))
            self._emit("phase", phase="summarize", iteration=t, total=len(specs))

            def done(key: Any, c: Any) -> None:
                iid, pair = key
                if not c.ok:
                    failures.append({"item_id": iid, "call_id": c.call_id, "status": c.status, "error": c.error,
                                     "raw": _raw_of(c)})
                else:
                    parsed: ParsedSummary = c.parsed
                    if not parsed.found:
                        not_found.append(iid)  # identical kernels: no memory slot is spent on them
                    else:
                        item = memory_item_from_pair(pair, parsed.title, parsed.summary, problem=self.problem.name,
                                                     iteration=t, run_id=self.run_id)
                        item.item_id = iid
                        self._store_memory_item(item, call_id=c.call_id)
                        results[iid] = item
                self._emit("item", phase="summarize", iteration=t, ok=c.ok)

            self._call_many("summarizer", specs, done)
            # Enqueue in pair order (positives best-first, then negatives), not completion order.
            for pair in pairs:
                iid = f"{self.run_id}:i{t}:{pair.slow_id}>{pair.fast_id}"
                if iid in results:
                    new_items.append(results[iid])
        present = {i.item_id for i in self.memory}
        evicted = self.memory.add([i for i in new_items if i.item_id not in present])
        if self.memory_path is not None and self.config.uses_memory:
            self.memory.save(self.memory_path)
        info = {"new": [i.item_id for i in new_items], "evicted": [i.item_id for i in evicted],
                "failed": failures, "no_optimization": not_found, "memory": [i.to_dict() for i in self.memory]}
        self._finish("summarize", info)
        self._emit("phase_done", phase="summarize", iteration=t,
                   message=f"{len(new_items)} new memory items, {len(self.memory)}/{self.memory.capacity} in memory")
        return new_items

    def _stored_memory_items(self, iteration: int) -> dict[str, MemoryItem]:
        out = {}
        for row in self.store.rows("memory_items", self.run_id):
            if row["problem_id"] == self.problem.name and int(row["iteration"]) == iteration and row.get("data"):
                item = MemoryItem.from_dict({k: v for k, v in row["data"].items() if k != "call_id"})
                out[item.item_id] = item
        return out

    def _store_memory_item(self, item: MemoryItem, call_id: str | None = None) -> None:
        self.store.add_memory_item(self.run_id, item_id=item.item_id, problem_id=self.problem.name,
                                   iteration=self.iteration, summary=item.summary, slow_kernel_id=item.slow_kernel_id,
                                   fast_kernel_id=item.fast_kernel_id, speedup=item.speedup,
                                   data={**item.to_dict(), "call_id": call_id})

    # ------------------------------------------------------------------ driving
    def step(self) -> None:
        """Run the remaining steps of the current iteration (all five on a fresh iteration)."""
        t = self.iteration
        self._emit("iteration", iteration=t)
        while self.iteration == t:
            getattr(self, self.next_phase)()

    def run(self, iterations: int | None = None, *, until: float | None = None) -> "Any":
        """Run until ``iterations`` (default: the config's T) iterations are complete; returns the report.

        A resumed session continues where it stopped; ``until`` is an optional wall-clock deadline
        (``time.time()`` value) checked between steps.
        """
        from accelopt_nb.search.report import build_report

        total = self.config.iterations if iterations is None else iterations
        if total < 0:
            raise ConfigError(f"iterations must be >= 0, got {total}")
        while self.iteration < total:
            if until is not None and time.time() >= until:
                break
            self.step()
        self.store.set_run_status(self.run_id, "done" if self.iteration >= total else "stopped")
        return build_report(self)

    # ------------------------------------------------------------------ views
    @property
    def baseline(self) -> KernelView:
        return self.kernels[BASELINE_ID]

    @property
    def best(self) -> KernelView:
        """The fastest correct kernel found so far."""
        pool = [k for k in self.kernels.values() if k.correct]
        return min(pool, key=lambda k: (k.latency_ms, k.iteration, k.order, k.kernel_id))

    def beam_kernels(self) -> list[KernelView]:
        return [self.kernels[k] for k in self.beam]

    def kernels_df(self):
        """One row per kernel of this run: iteration, parent, plan, origin, status, latency, % of peak."""
        import pandas as pd

        cols = ["kernel_id", "iteration", "parent_id", "plan_id", "origin", "status", "latency_ms", "pct_peak",
                "in_beam"]
        beam = set(self.beam)
        rows = [{"kernel_id": k.kernel_id, "iteration": k.iteration, "parent_id": k.parent_id, "plan_id": k.plan_id,
                 "origin": k.origin, "status": k.status, "latency_ms": k.latency_ms, "pct_peak": k.pct_peak,
                 "in_beam": k.kernel_id in beam}
                for k in sorted(self.kernels.values(), key=lambda k: (k.iteration, k.order, k.kernel_id))]
        return pd.DataFrame(rows, columns=cols)

    def history(self) -> list[dict[str, Any]]:
        """Per completed iteration: the best kernel so far, its latency and speedup."""
        steps = self._done_steps()
        rows = []
        for (it, name), info in sorted(steps.items()):
            if name == "select":
                rows.append({"iteration": it, "best": info["best"], "best_latency_ms": info["best_latency_ms"],
                             "best_speedup": info["best_speedup"], "best_pct_peak": info.get("best_pct_peak"),
                             "new": info.get("new"), "new_correct": info.get("new_correct")})
        return rows

    def close(self) -> None:
        if self._loop is not None:
            self._loop.close()
            self._loop = None

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Session({self.problem.name!r}, run {self.run_id!r}, iteration {self.iteration}, "
                f"next {self.next_phase}(), beam {len(self.beam)}, memory {len(self.memory)})")


def parse_plan_lenient(text: str) -> ParsedPlan:
    """A human plan is taken as written (no minimum length)."""
    try:
        return parse_plan(text)
    except LLMError:
        return ParsedPlan(text=text, step=text, notes=("short plan",))


def _profile_with_latency(kernel: KernelView) -> dict[str, Any]:
    prof = dict(kernel.profile or {})
    if kernel.latency_ms is not None:
        prof["latency"] = kernel.latency_ms
    return prof


def _hints(kernel: KernelView) -> list[str]:
    notes = (kernel.profile or {}).get("bottleneck") or []
    return [str(n) for n in notes] if isinstance(notes, (list, tuple)) else [str(notes)]


def _raw_of(completion: Any) -> str | None:
    if completion.text:
        return completion.text[-4000:]
    if completion.rejections:
        return completion.rejections[-1].text[-4000:]
    return None


def _ms(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.4g} ms"


def _version() -> str:
    import accelopt_nb
    return accelopt_nb.__version__
