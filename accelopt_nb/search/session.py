"""The AccelOpt search as a sequence of persisted, resumable steps.

One iteration is five steps, each a method of :class:`Session`:

1. :meth:`Session.plan` — N plans for every beam kernel (planner agent, memory in its prompt);
2. :meth:`Session.execute` — K kernels for every plan (executor agent);
3. :meth:`Session.evaluate` — correctness and latency of the new kernels (evaluation service);
4. :meth:`Session.select` — the next beam: the B fastest correct kernels among the beam and
   the new ones (:func:`accelopt_nb.search.beam.select_beam`);
5. :meth:`Session.summarize` — at most TopK new memory items from this iteration's measured
   parent→child pairs (summarizer agent), pushed into the FIFO memory. The last of the T
   iterations asks no summarizer: nobody would read its lessons.

:meth:`Session.step` runs whatever remains of the current iteration; with ``runtime.pipeline``
the first three steps run as one stream (:mod:`accelopt_nb.search.stream`): a plan starts its
executor calls as soon as it arrives, and a kernel is evaluated as soon as it arrives. Each step
is still marked done on its own, in order. :meth:`Session.run` runs iterations until T are
complete. The run's state lives in the run store (:class:`~accelopt_nb.search.state.RunState`),
so a killed process loses only the calls and evaluations in flight.

A step whose LLM calls all failed is not marked done (:class:`StepFailedError`), nor is a step
stopped by :meth:`Session.request_stop` or the spending cap; a resume re-runs it and makes only
the calls still missing. :attr:`Session.last_step` tells what the last step's calls did.

Any role can be played by a person: ``plan(manual=[...])``, ``execute(manual={plan_id: src})``
and ``summarize(manual=[...])`` record human-written plans, kernels and memory items instead of
calling the LLM.

Repeated sampling (``strategy: repeated``) is the paper's ablation baseline: the same number
of plans and kernels per iteration, always drawn from the baseline kernel, with no memory.
"""
from __future__ import annotations

import functools
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

from accelopt_nb.agents.executor import Executor
from accelopt_nb.agents.planner import ParsedPlan, Planner, parse_plan
from accelopt_nb.agents.prompts import ROLES, PromptSet, reference_for_agents
from accelopt_nb.agents.summarizer import Summarizer
from accelopt_nb.errors import ConfigError, EvaluationError, LLMError, SessionBusyError, StoreError
from accelopt_nb.llm.client import LLMClient
from accelopt_nb.search.beam import Candidate, select_beam
from accelopt_nb.search.config import SearchConfig
from accelopt_nb.search.evaluations import Evaluations
from accelopt_nb.search.events import ProgressFn, StepStats
from accelopt_nb.search.lessons import SummarizeStage, rewrite_pairs
from accelopt_nb.search.memory import MemoryItem, OptimizationMemory, RewritePair
from accelopt_nb.search.problem import SearchProblem
from accelopt_nb.search.state import (BASELINE_ID, BASELINE_ITERATION, PHASES, KernelView, PlanView, RunState,
                                      correct_counts, new_run_id)
from accelopt_nb.search.steps import StepBook, kernel_order
from accelopt_nb.search.stream import IterationStream, plan_info

if TYPE_CHECKING:
    from accelopt_nb.evaluation import EvalOptions
    from accelopt_nb.evaluation.executors import Evaluator
    from accelopt_nb.search.report import RunReport
    from accelopt_nb.store import RunStore

__all__ = ["BASELINE_ID", "PHASES", "ROLES", "KernelView", "PlanView", "Session", "new_run_id"]

LLM = LLMClient | Mapping[str, LLMClient] | None


def _step_call(method):
    """Run a public step method inside :meth:`Session._call` (one writer, stop requests, nesting)."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with self._call(method.__name__):
            return method(self, *args, **kwargs)
    return wrapper


class Session:
    """One search on one problem, backed by a run store. Build with :meth:`create` or :meth:`resume`."""

    def __init__(self, *, problem: SearchProblem, config: SearchConfig, store: "RunStore", run_id: str,
                 llm: LLM = None, memory: OptimizationMemory | None = None, prompts: PromptSet | None = None,
                 eval_executor: "Evaluator | None" = None, eval_cache: Any = True,
                 eval_options: "EvalOptions | None" = None, progress: ProgressFn | None = None,
                 memory_path: str | Path | None = None) -> None:
        self.problem = problem
        self.config = config
        self.store = store
        self.run_id = run_id
        self.prompts = prompts or PromptSet()
        self._clients = _normalize_llm(llm)
        hw = config.evaluation.hw
        pset = config.prompts.set
        self.planner = Planner(self.prompts, hw=hw, dtypes=problem.dtypes, fields=config.planner.profile_fields,
                               prompt_set=pset)
        self.executor = Executor(self.prompts, hw=hw, dtypes=problem.dtypes, tolerance=problem.tolerance,
                                 adversarial=problem.adversarial and config.prompts.show_adversarial,
                                 prompt_set=pset)
        measured = (f"measured on {hw} hardware" if config.evaluation.backend == "neuron"
                    else f"estimated by the {hw} performance model")
        self.summarizer = Summarizer(self.prompts, hw=hw, measured_on=measured, prompt_set=pset)
        self.reference_source = reference_for_agents(problem.reference_source, config.prompts.show_adversarial)
        self.state = RunState(store=store, run_id=run_id, problem=problem, config=config, memory=memory)
        self.memory_path = Path(memory_path) if memory_path is not None else None
        self.book = StepBook(problem.name, progress)
        self.evals = Evaluations(self, executor=eval_executor, cache=eval_cache, options=eval_options)
        self._stop = threading.Event()
        self._depth = 0  # nesting of step/run/phase calls; the outermost one clears a stop request
        self._writer_state = threading.Lock()  # _depth and the stop flag's clearing, against clear_stop()
        # One writer at a time: the thread running a step holds this lock; another thread's step call
        # is refused (SessionBusyError) instead of racing it in the store.
        self._writer = threading.RLock()
        self._running: str | None = None
        self.endpoint_warning = ""  # what the endpoint check said when the session was opened (launch)
        self.on_close: list[Callable[[], Any]] = []  # what open_session made for this session

    # ------------------------------------------------------------------ construction
    @classmethod
    def create(cls, problem: SearchProblem | str, *, run_dir: str | Path, config: SearchConfig | None = None,
               preset: str | Path = "smoke", llm: LLM = None, run_id: str | None = None,
               memory: OptimizationMemory | None = None, llm_settings: Mapping[str, Any] | None = None,
               prices: Mapping[str, Any] | None = None, store: "RunStore | None" = None,
               **kwargs: Any) -> "Session":
        """Start a new run: record it, evaluate the baseline, and get ready for iteration 0.

        ``prices``: the price table's snapshot (``PriceTable.snapshot()``), kept with the run.
        ``store``: the run store of ``run_dir`` when the caller has it open already (one
        connection per session).
        """
        from accelopt_nb.store import RunStore

        config = config or SearchConfig.from_preset(preset)
        if isinstance(problem, str):
            problem = SearchProblem.from_nkibench(problem, config.evaluation.shape_preset)
        store = store or RunStore.open(run_dir)
        run_id = run_id or new_run_id(problem.name)
        record = {"problem": problem.name, "shape_preset": problem.preset, "search": config.to_dict(),
                  "llm": dict(llm_settings or {}), "accelopt_nb": _version()}
        store.create_run(run_id, record, prices=prices)
        store.add_problem(run_id, problem.name, problem.to_spec())
        kwargs.setdefault("memory_path", Path(run_dir) / f"memory-{run_id}.json")
        session = cls(problem=problem, config=config, store=store, run_id=run_id, llm=llm, memory=memory, **kwargs)
        session._load(restore_memory=memory is None)
        return session

    @classmethod
    def resume(cls, run_dir: str | Path, *, run_id: str | None = None, problem: SearchProblem | None = None,
               llm: LLM = None, memory: OptimizationMemory | None = None,
               runtime: Mapping[str, Any] | None = None, store: "RunStore | None" = None,
               **kwargs: Any) -> "Session":
        """Reopen a run and continue from its last completed step (the latest run if no id is given).

        ``runtime``: overrides of the ``runtime`` settings (concurrency, pipelining), which do
        not change what the run computes. ``store``: the run store of ``run_dir``, if open already.
        """
        from accelopt_nb.store import DEFAULT_FILENAME, RunStore

        path = Path(run_dir)
        if store is None and not (path / DEFAULT_FILENAME).is_file():
            raise StoreError(f"no run store in {path} (expected {path / DEFAULT_FILENAME}); nothing to resume")
        store = store or RunStore.open(path)
        run_id = run_id or store.latest_run_id()
        if run_id is None:
            raise StoreError(f"the run store in {path} holds no runs")
        rec = store.get_run(run_id)["config"]
        config = SearchConfig.from_dict(rec["search"])
        if runtime:
            config = config.with_overrides(**{f"runtime.{k}": v for k, v in runtime.items()})
        if problem is None:
            specs = [r["spec"] for r in store.rows("problems", run_id) if r["problem_id"] == rec["problem"]]
            if not specs:
                raise StoreError(f"run {run_id} has no record of its problem {rec['problem']!r}")
            problem = SearchProblem.from_spec(specs[0])
        elif problem.name != rec["problem"]:
            raise ConfigError(f"run {run_id} optimizes {rec['problem']!r}, not {problem.name!r}")
        kwargs.setdefault("memory_path", path / f"memory-{run_id}.json")
        session = cls(problem=problem, config=config, store=store, run_id=run_id, llm=llm, memory=memory, **kwargs)
        session._load(restore_memory=memory is None)
        return session

    def _load(self, restore_memory: bool) -> None:
        """Rebuild the state from the store (evaluating the baseline of a new run)."""
        self.state = RunState.load(self.store, self.run_id, self.problem, self.config, memory=self.state.memory,
                                   restore_memory=restore_memory)
        if not self.state.has_baseline:
            self.book.emit("baseline", BASELINE_ITERATION, "start", total=1)
            result = self.evals.evaluate_one(BASELINE_ID, self.problem.baseline_source)
            view = self.state.record_baseline(result)
            self.book.emit("baseline", BASELINE_ITERATION, "end", done=1, total=1, failed=int(not view.correct),
                       message=f"baseline {view.status}, {_ms(view.latency_ms)}")
        baseline = self.state.baseline
        if not baseline.correct:
            raise EvaluationError(f"the baseline kernel of {self.problem.name} is not correct ({baseline.status}: "
                                  f"{baseline.message}); the search needs a correct starting point")

    @property
    def clients(self) -> dict[str, LLMClient]:
        """The LLM client of each role (a copy)."""
        return dict(self._clients)

    @contextmanager
    def overridden(self, *, config: SearchConfig | None = None,
                   clients: Mapping[str, LLMClient] | None = None) -> Iterator[None]:
        """Run some steps with another config and/or other LLM clients; the originals come back after."""
        saved = self.config, self._clients
        try:
            if config is not None:
                self.config = config
            if clients is not None:
                self._clients = dict(clients)
            yield
        finally:
            self.config, self._clients = saved

    def client(self, role: str) -> LLMClient:
        client = self._clients.get(role)
        if client is None:
            raise ConfigError(f"no LLM client for the {role}: pass llm= to the session, or give the step "
                              f"human input with manual=")
        return client

    # ------------------------------------------------------------------ state, as views
    kernels = property(lambda self: self.state.kernels)
    plans = property(lambda self: self.state.plans)
    memory = property(lambda self: self.state.memory)

    @property
    def iteration(self) -> int:
        return self.state.iteration

    @property
    def next_phase(self) -> str:
        return self.state.next_phase

    @property
    def beam(self) -> list[str]:
        return self.state.beam

    @property
    def baseline(self) -> KernelView:
        return self.state.baseline

    @property
    def best(self) -> KernelView:
        """The fastest correct kernel found so far."""
        return self.state.best

    def beam_kernels(self) -> list[KernelView]:
        return self.state.beam_kernels()

    def iteration_plans(self, iteration: int | None = None) -> list[PlanView]:
        """The plans of an iteration (the current one by default), in generation order."""
        return self.state.iteration_plans(iteration)

    def iteration_kernels(self, iteration: int | None = None) -> list[KernelView]:
        """The kernels of an iteration (the current one by default), in generation order."""
        return self.state.iteration_kernels(iteration)

    def done_steps(self) -> dict[tuple[int, str], dict[str, Any]]:
        """``(iteration, step) -> info`` of every completed step."""
        return self.state.done_steps()

    def kernels_df(self):
        from accelopt_nb.search.report import kernels_df
        return kernels_df(self.state)

    def history(self) -> list[dict[str, Any]]:
        from accelopt_nb.search.report import history
        return history(self.state)

    # ------------------------------------------------------------------ stopping and events
    @property
    def progress(self) -> ProgressFn | None:
        """Where progress events go (settable)."""
        return self.book.progress

    @progress.setter
    def progress(self, fn: ProgressFn | None) -> None:
        self.book.progress = fn

    @property
    def last_step(self) -> StepStats | None:
        """What the last step that ended did with its calls (None before any, and at each ``step()``)."""
        return self.book.last

    @last_step.setter
    def last_step(self, stats: StepStats | None) -> None:
        self.book.last = stats

    @property
    def step_stats(self) -> list[StepStats]:
        """Every step that ended in this session, in order."""
        return self.book.ended

    def request_stop(self) -> None:
        """Ask the running step to stop: no new LLM call or evaluation starts, the ones in
        flight finish and are stored, and the step is left not done (a resume continues it).
        Safe to call from another thread (a notebook button)."""
        self._stop.set()

    @property
    def stop_requested(self) -> bool:
        return self._stop.is_set()

    def clear_stop(self) -> None:
        """Forget a stop request no running step can take up any more (a Stop click that arrived just after
        the step ended); while a step runs its request stays. Left set, it would end the next step at once."""
        with self._writer_state:
            if self._depth == 0:
                self._stop.clear()

    @property
    def busy(self) -> str | None:
        """What another caller is running now (e.g. ``"run() from iteration 1"``), or None."""
        return self._running

    @contextmanager
    def _call(self, what: str = "step"):
        """Around every public step call: one thread at a time (others get :class:`SessionBusyError`);
        the outermost call clears a stop request when it ends."""
        if not self._writer.acquire(blocking=False):
            raise SessionBusyError(f"this session is busy: {self._running or 'a step'} is running in another thread "
                                   "(the panel?); wait for it to finish, or stop it (the panel's Stop button, "
                                   "session.request_stop()), then run this again")
        try:
            self._depth += 1
            if self._depth == 1:
                self._running = f"{what}() from iteration {self.iteration}, {self.next_phase}()"
            try:
                yield
            finally:
                with self._writer_state:
                    self._depth -= 1
                    if self._depth == 0:
                        self._running = None
                        self._stop.clear()
        finally:
            self._writer.release()

    def _require_phase(self, phase: str) -> None:
        if self.next_phase != phase:
            raise ConfigError(f"iteration {self.iteration}: the next step is {self.next_phase}(), not {phase}() "
                              f"(steps run in the order {', '.join(PHASES)})")

    def _close_step(self, stats: StepStats, info: dict[str, Any], message: str) -> None:
        self.book.close(self.state, stats, info, message)

    # ------------------------------------------------------------------ step 1: plan
    @_step_call
    def plan(self, manual: Sequence[str] | Mapping[str, Sequence[str] | str] | None = None) -> list[PlanView]:
        """N plans per beam kernel from the planner, or the given human-written plans instead.

        ``manual``: a list of plan texts (each given to every beam kernel) or a mapping from
        beam kernel id to its plan text(s). With ``manual`` no planner call is made.
        """
        self._require_phase("plan")
        if manual is not None:
            self.state.mark_started("plan")
            sources = self.plan_sources()
            per_kernel = _manual_plans(manual, sources)
            for b, kid in enumerate(sources):
                for j, text in enumerate(per_kernel.get(kid, [])):
                    pid = f"i{self.iteration}b{b}h{j}"
                    if pid not in self.plans:
                        parsed = parse_plan_lenient(text)
                        self.state.record_plan(pid, kid, (b, j), text=parsed.text, step=parsed.step,
                                               origin="manual", data={"notes": list(parsed.notes)})
            stats = StepStats("plan", self.iteration)
            self._close_step(stats, plan_info(self, []), f"{len(self.iteration_plans())} plans")
        else:
            IterationStream(self, ("plan",)).run()
        return self.iteration_plans()

    def plan_sources(self) -> list[str]:
        """The kernels plans are drawn from this iteration."""
        return [BASELINE_ID] if self.config.strategy == "repeated" else list(self.beam)

    # ------------------------------------------------------------------ step 2: execute
    @_step_call
    def execute(self, manual: Mapping[str, str | Sequence[str]] | None = None, *, llm: bool = True) -> list[KernelView]:
        """K kernels per plan from the executor; ``manual`` maps plan ids to human-written kernels.

        Plans named in ``manual`` get those kernels and no executor call; the other plans go to the
        executor unless ``llm=False``.
        """
        self._require_phase("execute")
        manual = dict(manual or {})
        plans = self.iteration_plans()
        unknown = set(manual) - {p.plan_id for p in plans}
        if unknown:
            raise ConfigError(f"manual kernels name unknown plans {sorted(unknown)}; plans of iteration "
                              f"{self.iteration}: {[p.plan_id for p in plans]}")
        if manual or not llm:
            self.state.mark_started("execute")
        for p in plans:
            if p.plan_id in manual:
                srcs = [manual[p.plan_id]] if isinstance(manual[p.plan_id], str) else list(manual[p.plan_id])
                for s, src in enumerate(srcs):
                    kid = f"{p.plan_id}m{s}"
                    if kid not in self.kernels:
                        self.state.record_kernel(kid, src, p, origin="manual", order=kernel_order(p, s), data={})
        if llm:
            IterationStream(self, ("execute",), skip_plans=set(manual)).run()
        else:
            stats = StepStats("execute", self.iteration)
            self._close_step(stats, {"kernels": len(self.iteration_kernels()), "failed": []},
                             f"{len(self.iteration_kernels())} kernels")
        return self.iteration_kernels()

    # ------------------------------------------------------------------ step 3: evaluate
    @_step_call
    def evaluate(self) -> list[KernelView]:
        """Evaluate this iteration's kernels (in parallel; each result stored as it arrives)."""
        self._require_phase("evaluate")
        IterationStream(self, ("evaluate",)).run()
        return self.iteration_kernels()

    # ------------------------------------------------------------------ step 4: select
    @_step_call
    def select(self) -> list[KernelView]:
        """The next beam: the B fastest correct kernels among the beam and this iteration's kernels."""
        self._require_phase("select")
        self.state.mark_started("select")
        t = self.iteration
        new = self.iteration_kernels()
        # Multi-fidelity: a kernel takes a beam slot only with a full verdict (the stream settled
        # this already); one the confirmation rejects (or finds slower) makes room for the next.
        self.evals.settle("select")
        chosen = self.beam_choice()
        if not chosen:  # cannot happen while the baseline is correct; guard anyway
            raise EvaluationError("no correct kernel left to form a beam")
        self.state.beam = [c.kernel_id for c in chosen]
        best, base = self.kernels[self.beam[0]], self.baseline
        info = {"beam": self.beam, "best": best.kernel_id, "best_latency_ms": best.latency_ms,
                "best_speedup": base.latency_ms / best.latency_ms, "best_pct_peak": best.pct_peak,
                "new": len(new), **correct_counts(new), "candidates": self.state.candidates(t),
                "confirmed": [k.kernel_id for k in new if k.confirmed and k.fidelity == "confirm"]}
        self._close_step(StepStats("select", t), info,
                         f"best {best.kernel_id} {_ms(best.latency_ms)} ({info['best_speedup']:.3f}x)")
        return self.beam_kernels()

    def beam_choice(self) -> list[Candidate]:
        """The beam as it would be chosen now, from the beam and this iteration's kernels so far."""
        return select_beam([k.candidate() for k in self.beam_kernels()],
                           [k.candidate() for k in self.iteration_kernels()], self.config.beam_width)

    # ------------------------------------------------------------------ step 5: summarize
    def rewrite_pairs(self, iteration: int | None = None) -> list[RewritePair]:
        """The slow→fast pairs an iteration contributes to memory (before summarization)."""
        return rewrite_pairs(self.state, iteration)

    @_step_call
    def summarize(self, manual: Sequence[MemoryItem | Mapping[str, Any]] | None = None) -> list[MemoryItem]:
        """Summarize this iteration's best rewrites into memory items and push them into the FIFO.

        ``manual``: human-written items (MemoryItem or {"title", "summary"}) added instead of
        summarizer calls. With memory disabled (or repeated sampling), and in the last of the T
        iterations, the step only closes the iteration.
        """
        self._require_phase("summarize")
        self.state.mark_started("summarize")
        t = self.iteration
        stats = StepStats("summarize", t)
        new_items: list[MemoryItem] = []
        existing = self.state.stored_memory_items(t)
        stage = SummarizeStage(self, stats, existing)
        if manual is not None:
            for n, entry in enumerate(manual):
                item = entry if isinstance(entry, MemoryItem) else MemoryItem(
                    title=str(entry.get("title", "")), summary=str(entry["summary"]), kind="manual", origin="manual")
                item.problem = item.problem or self.problem.name
                item.iteration, item.run_id = t, self.run_id
                item.item_id = f"{self.run_id}:i{t}:manual{n}"
                if item.item_id not in existing:
                    self.state.record_memory_item(item)
                new_items.append(existing.get(item.item_id, item))
        elif self.config.summarizes(t):
            new_items = stage.run()
        present = {i.item_id for i in self.memory}
        evicted = self.memory.add([i for i in new_items if i.item_id not in present])
        if self.memory_path is not None and self.config.uses_memory:
            self.memory.save(self.memory_path)
        info = {"new": [i.item_id for i in new_items], "evicted": [i.item_id for i in evicted],
                "failed": stage.failures, "no_optimization": stage.not_found, "memory": [i.to_dict() for i in self.memory],
                "skipped": manual is None and self.config.uses_memory and not self.config.summarizes(t)}
        self._close_step(stats, info,
                         f"{len(new_items)} new memory items, {len(self.memory)}/{self.memory.capacity} in memory")
        return new_items

    # ------------------------------------------------------------------ driving
    @_step_call
    def step(self) -> None:
        """Run the remaining steps of the current iteration (all five on a fresh iteration)."""
        t = self.iteration
        self.last_step = None
        self.book.emit("iteration", t, "start")
        if self.config.runtime.pipeline and self.next_phase in ("plan", "execute"):
            first = PHASES.index(self.next_phase)
            IterationStream(self, PHASES[first:3]).run()
        while self.iteration == t and not self._stopped():
            getattr(self, self.next_phase)()

    def _stopped(self) -> bool:
        return self._stop.is_set() or (self.last_step is not None and not self.last_step.done)

    @_step_call
    def run(self, iterations: int | None = None, *, until: float | None = None) -> "RunReport":
        """Run until ``iterations`` (default: the config's T) iterations are complete; returns the report.

        A resumed session continues where it stopped; ``until`` is an optional wall-clock deadline
        (``time.time()`` value) checked between steps; :meth:`request_stop` stops it between calls.
        """
        from accelopt_nb.search.report import build_report

        total = self.config.iterations if iterations is None else iterations
        if total < 0:
            raise ConfigError(f"iterations must be >= 0, got {total}")
        self.last_step = None
        while self.iteration < total and not self._stopped():
            if until is not None and time.time() >= until:
                break
            self.step()
        self.store.set_run_status(self.run_id, "done" if self.iteration >= total else "stopped")
        return build_report(self.state)

    def close(self) -> None:
        self.evals.close()
        while self.on_close:
            self.on_close.pop()()

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


def _normalize_llm(llm: LLM) -> dict[str, LLMClient]:
    if llm is None:
        return {}
    if isinstance(llm, Mapping):
        bad = set(llm) - set(ROLES)
        if bad:
            raise ConfigError(f"unknown agent role(s) {sorted(bad)} in llm=; roles: {ROLES}")
        return dict(llm)
    return {role: llm for role in ROLES}


def _ms(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.4g} ms"


def _version() -> str:
    import accelopt_nb
    return accelopt_nb.__version__

