"""The state of one search run: what the run store holds, as views, with write-through recorders.

:class:`RunState` is rebuilt from the run store by :meth:`RunState.load` and kept in step with it
by its ``record_*`` methods, which write a row and update the in-memory view together. Where a
run continues is the store's own resume model (:meth:`RunStore.resume_point` over :data:`PHASES`),
so the session, the CLI and the notebooks agree on it.
"""
from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass, field
from functools import cached_property
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Mapping

from accelopt_nb.search.beam import Candidate, ast_hash
from accelopt_nb.search.config import SearchConfig
from accelopt_nb.search.memory import (MemoryItem, OptimizationMemory, RewritePair, RewriteRecord,
                                       select_rewrites)
from accelopt_nb.search.problem import SearchProblem

if TYPE_CHECKING:
    from accelopt_nb.evaluation import EvalResult
    from accelopt_nb.store import RunStore

__all__ = ["BASELINE_ID", "BASELINE_ITERATION", "PHASES", "KernelView", "PlanView", "RunState", "correct_counts",
           "new_run_id"]

PHASES = ("plan", "execute", "evaluate", "select", "summarize")
BASELINE_ID = "baseline"
BASELINE_ITERATION = -1


def new_run_id(problem: str) -> str:
    """A fresh, sortable run id: ``<problem>-<UTC time>-<random>``."""
    return f"{problem}-{datetime.now(timezone.utc).strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"


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
    fidelity: str | None = None
    result: dict[str, Any] | None = None  # the latest evaluation's result (EvalResult.to_dict())
    screened: str | None = None  # the screening's status, once a confirmation superseded it

    @property
    def confirmed_correct(self) -> bool:
        """Correct with a full-fidelity verdict (the only correct that reaches the beam or memory)."""
        return self.correct and self.confirmed

    @property
    def evaluated(self) -> bool:
        return self.status is not None

    @property
    def correct(self) -> bool:
        return self.status == "correct" and self.latency_ms is not None and math.isfinite(self.latency_ms)

    @property
    def confirmed(self) -> bool:
        """Evaluated at full fidelity (not only screened)."""
        return self.evaluated and self.fidelity != "screen"

    @property
    def inherited_from(self) -> str | None:
        """The kernel whose verdict this one's is (the same program, evaluated once), if any."""
        return (self.result or {}).get("inherited_from")

    @cached_property
    def hash(self) -> str:
        """The beam identity (normalized syntax tree); cached: the beam is chosen again after every
        result while multi-fidelity confirmations run in the stream."""
        return ast_hash(self.source)

    def candidate(self) -> Candidate:
        return Candidate(self.kernel_id, self.hash, self.latency_ms, self.correct, self.order)


def correct_counts(kernels: "list[KernelView]") -> dict[str, int]:
    """Correct kernels by the verdict behind them: ``new_correct`` with a full-fidelity verdict (all
    that the beam and memory ever take), ``screened_correct`` correct at screening and never
    confirmed, ``rejected_on_confirmation`` correct at screening but not at the full check."""
    return {"new_correct": sum(k.confirmed_correct for k in kernels),
            "screened_correct": sum(k.correct and not k.confirmed for k in kernels),
            "rejected_on_confirmation": sum(k.screened == "correct" and not k.correct for k in kernels)}


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


class RunState:
    """Kernels, plans, beam, memory and position of one run of one problem (see the module docstring)."""

    def __init__(self, *, store: "RunStore", run_id: str, problem: SearchProblem, config: SearchConfig,
                 memory: OptimizationMemory | None = None) -> None:
        self.store = store
        self.run_id = run_id
        self.problem = problem
        self.config = config
        self.memory = memory if memory is not None else OptimizationMemory(config.memory.capacity)
        self.kernels: dict[str, KernelView] = {}
        self.plans: dict[str, PlanView] = {}
        self.beam: list[str] = [BASELINE_ID]  # kernel ids, fastest first
        self.iteration = 0
        self.next_phase = PHASES[0]
        self.started: dict[str, float] = {}  # phase -> monotonic start time of its latest attempt

    @property
    def scope(self) -> str:
        return self.problem.name

    # ------------------------------------------------------------------ replay from the store
    @classmethod
    def load(cls, store: "RunStore", run_id: str, problem: SearchProblem, config: SearchConfig, *,
             memory: OptimizationMemory | None = None, restore_memory: bool = True) -> "RunState":
        """The state as the store holds it. A run whose baseline is not evaluated yet has
        ``has_baseline == False``; the caller evaluates it (the state never evaluates)."""
        state = cls(store=store, run_id=run_id, problem=problem, config=config, memory=memory)
        for row in store.rows("kernels", run_id):
            if row["problem_id"] != state.scope:
                continue
            data = row.get("data") or {}
            state.kernels[row["kernel_id"]] = KernelView(
                kernel_id=row["kernel_id"], iteration=int(row["iteration"]), source=row["source"],
                parent_id=row["parent_id"], plan_id=row["plan_id"], origin=row["origin"] or "",
                order=int(data.get("order", 0)), data=data)
        # rows in insertion order: a confirmation supersedes the screening of the same kernel
        for ev in store.rows("evaluations", run_id):
            view = state.kernels.get(ev["kernel_id"])
            if view is not None:
                state._apply_evaluation(view, ev.get("result") or {}, ev["status"], ev.get("pct_peak"))
        for row in store.rows("plans", run_id):
            if row["problem_id"] != state.scope:
                continue
            data = row.get("data") or {}
            state.plans[row["plan_id"]] = PlanView(plan_id=row["plan_id"], iteration=int(row["iteration"]),
                                                   parent_id=row["parent_kernel_id"], text=row["text"],
                                                   step=data.get("step", row["text"]),
                                                   origin=data.get("origin", "llm"),
                                                   slot=tuple(data.get("slot", (0, 0))), data=data)
        steps = state.done_steps()
        last_select = max((it for it, s in steps if s == "select"), default=None)
        if last_select is not None:
            state.beam = list(steps[(last_select, "select")]["beam"])
        if restore_memory:
            snap = state._latest_memory_snapshot(steps)
            if snap is not None:
                state.memory = OptimizationMemory(config.memory.capacity, [MemoryItem.from_dict(d) for d in snap])
        state.iteration, state.next_phase = store.resume_point(run_id, PHASES, scope=state.scope)
        return state

    @property
    def has_baseline(self) -> bool:
        return BASELINE_ID in self.kernels and self.kernels[BASELINE_ID].evaluated

    def done_steps(self) -> dict[tuple[int, str], dict[str, Any]]:
        """``(iteration, step) -> info`` of every completed step of this problem."""
        out: dict[tuple[int, str], dict[str, Any]] = {}
        for row in self.store.rows("steps", self.run_id):
            if row["scope"] == self.scope and row["status"] == "done":
                out[(int(row["iteration"]), row["step"])] = row.get("info") or {}
        return out

    def step_rows(self) -> list[dict[str, Any]]:
        """Every step row of this problem (any status), with start and finish times."""
        return [r for r in self.store.rows("steps", self.run_id) if r["scope"] == self.scope]

    @staticmethod
    def _latest_memory_snapshot(steps: Mapping[tuple[int, str], dict]) -> list[dict] | None:
        best: tuple[int, int] | None = None
        snap = None
        for (it, name), info in steps.items():
            if name in ("plan", "summarize") and "memory" in info:
                key = (it, PHASES.index(name))
                if best is None or key > best:
                    best, snap = key, info["memory"]
        return snap

    # ------------------------------------------------------------------ step markers
    def mark_started(self, phase: str) -> None:
        """Start (or restart) a step; a restart keeps the earlier attempts' settled failures."""
        self.started[phase] = time.monotonic()
        settled = self.settled_failures(phase)
        self.store.mark_step(self.run_id, self.iteration, phase, "started", scope=self.scope,
                             info={"settled": settled} if settled else None)

    def settled_failures(self, phase: str) -> list[dict[str, Any]]:
        """Failed calls of this iteration's ``phase`` that a resume does not make again (their
        failure records, ``steps.SETTLED_CAUSES``): the rest of what failed is redrawn."""
        for row in self.step_rows():
            if int(row["iteration"]) == self.iteration and row["step"] == phase:
                return list((row.get("info") or {}).get("settled") or [])
        return []

    def mark_failed(self, phase: str, info: Mapping[str, Any]) -> None:
        self.store.mark_step(self.run_id, self.iteration, phase, "failed", scope=self.scope, info=info)

    def mark_done(self, phase: str, info: Mapping[str, Any]) -> None:
        """Record the step as done and move to the next one."""
        self.store.mark_step(self.run_id, self.iteration, phase, "done", scope=self.scope, info=info)
        i = PHASES.index(phase)
        if i + 1 < len(PHASES):
            self.next_phase = PHASES[i + 1]
        else:
            self.iteration, self.next_phase = self.iteration + 1, PHASES[0]

    # ------------------------------------------------------------------ recorders (write-through)
    def record_baseline(self, result: "EvalResult") -> KernelView:
        src = self.problem.baseline_source
        view = KernelView(kernel_id=BASELINE_ID, iteration=BASELINE_ITERATION, source=src, parent_id=None,
                          plan_id=None, origin="baseline", order=0)
        fields = self._evaluation_row(BASELINE_ID, result)
        with self.store.step(self.run_id, BASELINE_ITERATION, "baseline", scope=self.scope) as st:
            st.add_kernel(kernel_id=BASELINE_ID, problem_id=self.scope, source=src, iteration=BASELINE_ITERATION,
                          origin="baseline", data={"order": 0})
            st.add_evaluation(**fields)
            st.info = {"status": result.status.value, "latency_ms": result.latency_ms}
        self._apply_evaluation(view, fields["result"], fields["status"], fields["pct_peak"])
        self.kernels[BASELINE_ID] = view
        return view

    def record_plan(self, pid: str, parent: str, slot: tuple[int, int], *, text: str, step: str, origin: str,
                    data: Mapping[str, Any]) -> PlanView:
        data = {"step": step, "origin": origin, "slot": list(slot), **data}
        self.store.add_plan(self.run_id, plan_id=pid, problem_id=self.scope, iteration=self.iteration,
                            text=text, parent_kernel_id=parent, data=data)
        view = PlanView(pid, self.iteration, parent, text, step, origin, slot, data)
        self.plans[pid] = view
        return view

    def record_kernel(self, kid: str, source: str, plan: PlanView, *, origin: str, order: int,
                      data: Mapping[str, Any]) -> KernelView:
        data = {**data, "order": order, "ast_hash": ast_hash(source)}
        self.store.add_kernel(self.run_id, kernel_id=kid, problem_id=self.scope, source=source,
                              iteration=self.iteration, parent_id=plan.parent_id, plan_id=plan.plan_id,
                              origin=origin, data=data)
        view = KernelView(kid, self.iteration, source, plan.parent_id, plan.plan_id, origin, order, data)
        self.kernels[kid] = view
        return view

    def record_evaluation(self, kernel_id: str, result: "EvalResult", *, attempt: int = 0) -> KernelView:
        """Store an evaluation and apply it to the kernel's view (``pct_peak`` computed once, here).

        A later attempt (a confirmation of a screened kernel) supersedes the earlier one."""
        fields = self._evaluation_row(kernel_id, result)
        self.store.add_evaluation(self.run_id, attempt=attempt, **fields)
        view = self.kernels[kernel_id]
        self._apply_evaluation(view, fields["result"], fields["status"], fields["pct_peak"])
        return view

    def _evaluation_row(self, kernel_id: str, result: "EvalResult") -> dict[str, Any]:
        lat = result.latency_ms
        pct = self.problem.percent_of_peak(lat, result.hw) if result.correct else None
        return {"kernel_id": kernel_id, "backend": result.backend, "status": result.status.value,
                "sha256": result.kernel_sha256, "correct": result.correct,
                "latency_us": None if lat is None else lat * 1e3, "pct_peak": pct, "result": result.to_dict()}

    def _apply_evaluation(self, view: KernelView, result: Mapping[str, Any], status: str,
                          pct_peak: float | None) -> None:
        if view.fidelity == "screen" and result.get("fidelity") != "screen":
            view.screened = view.status
        view.status = status
        lat = result.get("latency_ms")
        view.latency_ms = float(lat) if isinstance(lat, (int, float)) else None
        view.profile = result.get("profile") or None
        view.message = result.get("message")
        view.fidelity = result.get("fidelity")
        view.result = dict(result)
        view.pct_peak = pct_peak if status == "correct" else None

    def record_memory_item(self, item: MemoryItem, *, call_id: str | None = None,
                           extra: Mapping[str, Any] | None = None) -> None:
        self.store.add_memory_item(self.run_id, item_id=item.item_id, problem_id=self.scope,
                                   iteration=self.iteration, summary=item.summary,
                                   slow_kernel_id=item.slow_kernel_id, fast_kernel_id=item.fast_kernel_id,
                                   speedup=item.speedup, data={**item.to_dict(), "call_id": call_id,
                                                               **dict(extra or {})})

    def stored_memory_items(self, iteration: int) -> dict[str, MemoryItem]:
        out = {}
        known = set(MemoryItem.__dataclass_fields__)
        for row in self.store.rows("memory_items", self.run_id):
            if row["problem_id"] == self.scope and int(row["iteration"]) == iteration and row.get("data"):
                item = MemoryItem.from_dict({k: v for k, v in row["data"].items() if k in known})
                out[item.item_id] = item
        return out

    # ------------------------------------------------------------------ views
    def candidates(self, iteration: int | None = None) -> dict[str, Any]:
        """How many candidates an iteration really had: ``nominal`` kernels (plans drawn × N × K,
        as configured), ``generated`` kernels, and the failed planner and executor calls by cause
        (``unusable``, ``transport``, ``request``, ...) that account for the difference."""
        it = self.iteration if iteration is None else iteration
        rows = {r["step"]: r.get("info") or {} for r in self.step_rows() if int(r["iteration"]) == it}
        sources = rows.get("plan", {}).get("from") or []
        llm_plans = [p for p in self.iteration_plans(it) if p.origin == "llm"]
        nominal = len(sources) * self.config.plans_for(it, len(sources)) * self.config.samples_per_plan \
            if llm_plans or not self.iteration_plans(it) else None
        lost: dict[str, dict[str, int]] = {}
        for step in ("plan", "execute"):
            for rec in rows.get(step, {}).get("failed") or []:
                cause = str(rec.get("cause") or rec.get("status") or "error")
                lost.setdefault(step, {})[cause] = lost.setdefault(step, {}).get(cause, 0) + 1
        return {"nominal": nominal, "generated": len(self.iteration_kernels(it)), "failed_calls": lost}

    def rewrite_pairs(self, iteration: int | None = None) -> list[RewritePair]:
        """The slow→fast pairs an iteration contributes to memory (before summarization), from the
        verdicts as they stand (under multi-fidelity search the summarizer waits until each side of
        these pairs has a full verdict: :meth:`Evaluations.settle`)."""
        records = []
        for k in self.iteration_kernels(iteration):
            parent = self.kernels.get(k.parent_id or "")
            if parent is None or parent.latency_ms is None:
                continue
            records.append(RewriteRecord(parent.kernel_id, parent.source, parent.latency_ms, k.kernel_id, k.source,
                                         k.latency_ms if k.correct else None, k.plan_id or "", k.order))
        m = self.config.memory
        return select_rewrites(records, m.top_k, m.positive_threshold, m.negative_threshold)

    @property
    def baseline(self) -> KernelView:
        return self.kernels[BASELINE_ID]

    @property
    def best(self) -> KernelView:
        """The fastest correct kernel found so far (confirmed at full fidelity)."""
        pool = [k for k in self.kernels.values() if k.correct and k.confirmed]
        return min(pool, key=lambda k: (k.latency_ms, k.iteration, k.order, k.kernel_id))

    def beam_kernels(self) -> list[KernelView]:
        return [self.kernels[k] for k in self.beam]

    def iteration_kernels(self, iteration: int | None = None) -> list[KernelView]:
        it = self.iteration if iteration is None else iteration
        return sorted((k for k in self.kernels.values() if k.iteration == it), key=lambda k: (k.order, k.kernel_id))

    def iteration_plans(self, iteration: int | None = None) -> list[PlanView]:
        it = self.iteration if iteration is None else iteration
        return sorted((p for p in self.plans.values() if p.iteration == it), key=lambda p: (p.slot, p.plan_id))

