"""The front of an iteration as one stream: plan → execute → screen → confirm, each item as it arrives.

:class:`IterationStream` runs any consecutive run of the steps plan, execute and evaluate. Run
alone (``Session.plan()``, ``execute()``, ``evaluate()``) a step makes only its own calls; run
together (``Session.step()`` with ``runtime.pipeline``) a plan starts its K executor calls the
moment it is stored, and a kernel is screened the moment it is stored, while other LLM calls are
still in flight.

The stream is a few named stages, each with its own state:

* :class:`PlanStage` — the planner's calls; each stored plan hands its executor calls on;
* :class:`ExecuteStage` — the executor's calls; each stored kernel is offered for screening;
* :class:`ScreenStage` — evaluates the offered kernels at the candidates' fidelity, as workers free up;
* :class:`ConfirmStage` — under multi-fidelity search, the full verdicts ``select`` and the
  summarizer will need: speculatively while screens arrive, then recorded in rank order once
  they are all in (:meth:`~accelopt_nb.search.evaluations.Evaluations.settle`).

LLM answers reach a stage on the LLM client's worker thread (:meth:`Stage.on_answer`);
evaluations are submitted and recorded on the caller's thread, which waits on one queue for both.
A stage may start more LLM calls (:meth:`IterationStream.ask`) or offer more kernels for screening
(:meth:`IterationStream.offer`) at any time, and hears of every recorded evaluation
(:meth:`Stage.on_evaluated`): that is all a new stage (a fixer, say) needs.

Whatever was already stored is not redone, so running the stream again after a crash or a stop
makes only the missing calls and evaluations. Each step is then closed in order; the first that
is not complete leaves the later ones open.
"""
from __future__ import annotations

import queue
from collections import deque
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from accelopt_nb.errors import BudgetExceededError, ConfigError, LLMError
from accelopt_nb.llm.client import CallRequest
from accelopt_nb.llm.completion import Completion
from accelopt_nb.search.events import StepStats
from accelopt_nb.search.fixing import FixStage
from accelopt_nb.search.requests import executor_requests, planner_requests
from accelopt_nb.search.stage import Stage
from accelopt_nb.search.steps import count_failure, failure_record, kernel_order

if TYPE_CHECKING:
    from accelopt_nb.evaluation import EvalResult
    from accelopt_nb.search.context import SearchContext
    from accelopt_nb.search.state import KernelView

__all__ = ["FRONT", "ConfirmStage", "ExecuteStage", "IterationStream", "PlanStage", "ScreenStage",
           "plan_info"]

FRONT = ("plan", "execute", "evaluate")
OnAnswer = Callable[[CallRequest, Completion], "list[CallRequest] | None"]


class PlanStage(Stage):
    """N plans per beam kernel; the plan step closes once every planner call has answered."""

    name = step = "plan"

    def __init__(self, stream: "IterationStream") -> None:
        super().__init__(stream)
        self.failures: list[dict[str, Any]] = []

    def start(self) -> None:
        self.failures = self.ctx.state.settled_failures("plan")   # an earlier attempt's, not redrawn
        requests = planner_requests(self.ctx, skip={r.get("plan_id") for r in self.failures})
        self.expected = len(requests)
        self.stream.ask(requests)

    def on_answer(self, req: CallRequest, c: Completion) -> list[CallRequest] | None:
        _, pid, kid, b, j = req.key
        st = self.stats
        st.calls += 1
        more: list[CallRequest] = []
        if c.ok:
            parsed = c.parsed
            plan = self.ctx.state.record_plan(
                pid, kid, (b, j), text=parsed.text, step=parsed.step, origin="llm",
                data={"call_id": c.call_id, "reasoning": parsed.reasoning or c.reasoning,
                      "finish_reason": c.finish_reason, "notes": list(parsed.notes),
                      "rejected": [r.reason for r in c.rejections]})
            execute = self.stream.stage("execute")
            if execute is not None:
                more = execute.requests_for(plan)
        else:
            count_failure(st, c)
            self.failures.append(failure_record(c, plan_id=pid, parent_id=kid))
        self.stream.book.emit("plan", st.iteration, "call_done", done=st.calls, total=self.expected, failed=st.failed)
        allowed = self.ctx.config.runtime.transport_failures_allowed
        if st.calls == self.expected and not st.all_failed and not st.transport_exceeds(allowed) \
                and not self.ctx.stop_requested:
            self.stream.close_early(self)  # every planner call answered: a crash now keeps it done
        return more

    def close(self) -> tuple[dict[str, Any], str]:
        info = plan_info(self.ctx, self.failures)
        return info, f"{info['plans']} plans, {self.stats.failed} failed"


class ExecuteStage(Stage):
    """K kernels per plan; each stored kernel is offered for screening."""

    name = step = "execute"

    def __init__(self, stream: "IterationStream", skip_plans: Iterable[str] = ()) -> None:
        super().__init__(stream)
        self.skip = set(skip_plans)
        self.failures: list[dict[str, Any]] = []
        self.settled: set[str] = set()

    def start(self) -> None:
        self.failures = self.ctx.state.settled_failures("execute")   # an earlier attempt's, not redrawn
        self.settled = {r.get("kernel_id") for r in self.failures}
        requests: list[CallRequest] = []
        for plan in self.ctx.state.iteration_plans():
            if plan.plan_id not in self.skip:
                requests += self.requests_for(plan)
        self.stream.ask(requests)

    def requests_for(self, plan: Any) -> list[CallRequest]:
        more = executor_requests(self.ctx, plan, skip=self.settled)
        self.expected += len(more)
        return more

    def on_answer(self, req: CallRequest, c: Completion) -> None:
        _, kid, pid, k = req.key
        st = self.stats
        st.calls += 1
        if c.ok:
            got = c.parsed
            data = {"call_id": c.call_id, "extraction": got.method, "notes": got.notes, "sample": k,
                    "raw_response": c.text, "reasoning": c.reasoning, "finish_reason": c.finish_reason,
                    "rejected": [r.reason for r in c.rejections]}
            plan = self.ctx.state.plans[pid]
            self.ctx.state.record_kernel(kid, got.code, plan, origin="llm", order=kernel_order(plan, k), data=data)
            self.stream.offer(kid)
        else:
            count_failure(st, c)
            self.failures.append(failure_record(c, kernel_id=kid, plan_id=pid))
        self.stream.book.emit("execute", st.iteration, "call_done", done=st.calls, total=self.expected,
                              failed=st.failed)
        return None

    def close(self) -> tuple[dict[str, Any], str]:
        n = len(self.ctx.state.iteration_kernels())
        return {"kernels": n, "failed": self.failures}, f"{n} kernels, {self.stats.failed} calls without a kernel"


class ScreenStage(Stage):
    """Evaluates offered kernels at the candidates' fidelity, in arrival order, as workers free up."""

    name, step = "screen", "evaluate"

    def __init__(self, stream: "IterationStream") -> None:
        super().__init__(stream)
        self.waiting: "deque[str]" = deque()

    def start(self) -> None:
        for k in self.ctx.state.iteration_kernels():
            if not k.evaluated:
                self.stream.offer(k.kernel_id)

    def accept(self, kernel_id: str) -> None:
        if not self.ctx.stop_requested:
            self.waiting.append(kernel_id)

    def pump(self) -> None:
        if self.ctx.stop_requested:
            self.waiting.clear()  # counted as missing
            return
        while self.waiting and self.stream.has_free_worker():
            kid = self.waiting.popleft()
            self.stream.evaluate(kid, self.ctx.evals.submit(kid), self.record)

    def record(self, kernel_id: str, result: "EvalResult") -> None:
        view = self.ctx.state.record_evaluation(kernel_id, result)
        st = self.stats
        st.calls += 1
        if not view.correct:
            st.failed += 1
        self.stream.book.emit("evaluate", st.iteration, "eval_done", done=st.calls, total=self.expected,
                              failed=st.failed)
        self.stream.evaluated(kernel_id, view)

    def close(self) -> tuple[dict[str, Any], str]:
        counts: dict[str, int] = {}
        for k in self.ctx.state.iteration_kernels():
            status = k.status or "not evaluated"   # stopped before its evaluation: a JSON key, never None
            counts[status] = counts.get(status, 0) + 1
        msg = ", ".join(f"{n} {s}" for s, n in sorted(counts.items(), key=lambda x: str(x[0])))
        return {"statuses": counts}, msg or "nothing to evaluate"


class ConfirmStage(Stage):
    """Multi-fidelity search: full verdicts for what ``select`` and the summarizer will need.

    While screens are still arriving, a worker with no screen to run confirms, speculatively, the
    first kernel the search would need now (:meth:`Evaluations.needed`); nothing of that is
    recorded. Once every screen is in, :meth:`settle` confirms what is needed, round by round in
    rank order, taking the speculative results where they match: the recorded confirmations
    depend on verdicts alone, never on which answer came first."""

    name, step = "confirm", "evaluate"

    def __init__(self, stream: "IterationStream") -> None:
        super().__init__(stream)
        self.confirming: set[str] = set()

    def pump(self) -> None:
        # Without a known capacity, confirm only once nothing is being screened.
        stream = self.stream
        while stream.has_free_worker(only_confirming=self.confirming):
            kid = self.ctx.evals.next_to_confirm(exclude=self.confirming)
            if kid is None:
                break
            self.confirming.add(kid)
            stream.evaluate(kid, self.ctx.evals.prefetch(kid), self.done)

    def done(self, kernel_id: str, result: "EvalResult") -> None:
        self.confirming.discard(kernel_id)   # kept by Evaluations until settle() asks for it

    def settle(self) -> None:
        self.ctx.evals.settle("evaluate")


def plan_info(ctx: "SearchContext", failures: list[dict[str, Any]]) -> dict[str, Any]:
    """What the store keeps of a plan step: plans, failed calls, the kernels planned from, the memory."""
    return {"plans": len(ctx.state.iteration_plans()), "failed": failures, "from": ctx.plan_sources(),
            "memory": [i.to_dict() for i in ctx.state.memory]}


class IterationStream:
    """Runs consecutive steps of plan/execute/evaluate as one stream of stages (module docstring)."""

    def __init__(self, ctx: "SearchContext", phases: Sequence[str], *, skip_plans: Iterable[str] = ()) -> None:
        phases = tuple(phases)
        if not phases or any(p not in FRONT for p in phases) or \
                FRONT[FRONT.index(phases[0]):FRONT.index(phases[0]) + len(phases)] != phases:
            raise ConfigError(f"the front runs consecutive steps of {FRONT}, got {phases}")
        self.ctx, self.book, self.phases = ctx, ctx.book, phases
        t = ctx.state.iteration
        self.stats = {p: StepStats(p, t) for p in phases}
        self.stages: list[Stage] = []
        if "plan" in phases:
            self.stages.append(PlanStage(self))
        if "execute" in phases:
            self.stages.append(ExecuteStage(self, skip_plans))
        if "evaluate" in phases:
            self.stages.append(ScreenStage(self))
            if ctx.config.evaluation.fidelity == "multi":
                self.stages.append(ConfirmStage(self))
            if ctx.config.fixer.attempts > 0:
                self.stages.append(FixStage(self))
        self.closed: set[str] = set()
        self._events: "queue.Queue[tuple[str, Any]]" = queue.Queue()
        self._first_calls: list[CallRequest] | None = []  # asked before the stream starts: one fan-out
        self._llm: list[Future] = []            # LLM fan-outs started
        self._llm_running = 0
        self._running: set[str] = set()         # kernels being screened or confirmed
        self._capacity: int | None = None

    def stage(self, name: str) -> Any:
        return next((s for s in self.stages if s.name == name), None)

    def owner(self, step: str) -> Any:
        """The stage that counts and closes ``step`` (the first one naming it)."""
        return next(s for s in self.stages if s.step == step)

    # ------------------------------------------------------------------ what stages call
    def ask(self, requests: Sequence[CallRequest], on_answer: OnAnswer | None = None) -> None:
        """Start LLM calls; each answer goes to ``on_answer`` (default: the stage named by the
        request key's first element, ``plan`` or ``kernel``) on the LLM thread."""
        if not requests:
            return
        if self._first_calls is not None and on_answer is None:
            self._first_calls += requests
            return
        driver = requests[0].client
        assert driver is not None
        fut = driver.submit_each(list(requests), on_answer or self._dispatch, stop=lambda: self.ctx.stop_requested)
        self._llm.append(fut)
        self._llm_running += 1
        fut.add_done_callback(lambda f: self._events.put(("llm_done", None)))

    def offer(self, kernel_id: str) -> None:
        """A kernel to screen (any thread); it waits for a free worker."""
        screen = self.stage("screen")
        if screen is not None:
            screen.expected += 1
            self._events.put(("kernel", kernel_id))

    def evaluate(self, kernel_id: str, fut: "Future[EvalResult]",
                 record: Callable[[str, "EvalResult"], None]) -> None:
        """Track an evaluation in flight; ``record`` gets its result on the caller's thread."""
        self._running.add(kernel_id)
        fut.add_done_callback(lambda f: self._events.put(("result", (kernel_id, f, record))))

    def evaluated(self, kernel_id: str, view: "KernelView") -> None:
        for stage in self.stages:
            stage.on_evaluated(kernel_id, view)

    def has_free_worker(self, only_confirming: set[str] | None = None) -> bool:
        """Whether an evaluation may start now. ``only_confirming`` (the confirm stage's ask):
        no screen may wait, and with an unknown capacity nothing but confirmations may run."""
        if only_confirming is not None:
            screen = self.stage("screen")
            if screen is not None and screen.waiting:
                return False
            if self._capacity is None:
                return self._running <= only_confirming
        # cache hits and copies of a twin's result hold no worker: the service counts its own jobs
        return self._capacity is None or self.ctx.evals.busy < self._capacity

    def close_early(self, stage: Stage) -> None:
        """Close a stage's step before the stream ends (the plan step, once its calls are in)."""
        info, message = stage.close()  # type: ignore[misc]
        self.book.close(self.ctx.state, stage.stats, info, message)
        self.closed.add(stage.step)

    # ------------------------------------------------------------------ running
    def run(self) -> None:
        """Run the stages until nothing is in flight, then close the steps in order."""
        self._start()
        self._loop()
        fatal = self._llm_fatal()
        self._count_missing()
        confirm = self.stage("confirm")
        if confirm is not None and fatal is None and not self.stats["evaluate"].missing:
            confirm.settle()
        try:
            self._close_steps()
        finally:
            if fatal is not None:
                raise fatal

    def _start(self) -> None:
        ctx, t = self.ctx, self.ctx.state.iteration
        for p in self.phases:
            ctx.state.mark_started(p)
        if self.stage("screen") is not None:
            self._capacity = ctx.evals.capacity
        for stage in self.stages:
            stage.start()
        for p in self.phases:
            self.book.emit(p, t, "start", total=self.owner(p).expected)
        plan = self.stage("plan")
        if plan is not None and plan.expected == 0:
            self.close_early(plan)
        first, self._first_calls = self._first_calls or [], None
        self.ask(first)

    def _dispatch(self, req: CallRequest, c: Completion) -> list[CallRequest] | None:
        stage = self.stage("plan" if req.key[0] == "plan" else "execute")
        return stage.on_answer(req, c)

    def _loop(self) -> None:
        self._pump()
        while self._llm_running or self._running or self._waiting() or not self._events.empty():
            what, item = self._events.get()
            if what == "llm_done":
                self._llm_running -= 1
            elif what == "kernel":
                self.stage("screen").accept(item)
            elif what == "result":
                kid, fut, record = item
                self._running.discard(kid)
                record(kid, fut.result())  # an infrastructure error (unknown problem, no toolchain) propagates
            self._pump()

    def _waiting(self) -> bool:
        screen = self.stage("screen")
        return screen is not None and bool(screen.waiting)

    def _pump(self) -> None:
        """Keep the evaluators busy: screens first, then (multi-fidelity) confirmations."""
        for name in ("screen", "confirm"):
            stage = self.stage(name)
            if stage is not None:
                stage.pump()

    def _llm_fatal(self) -> BaseException | None:
        for fut in self._llm:
            try:
                fut.result()
            except (BudgetExceededError, LLMError, ConfigError) as exc:
                return exc
        return None

    def _count_missing(self) -> None:
        stop = self.ctx.stop_requested
        for p in self.phases:
            owner = self.owner(p)
            owner.stats.missing = owner.missing()
            owner.stats.stopped = stop and owner.stats.missing > 0

    def _close_steps(self) -> None:
        """Close in order; the first step left open keeps the later ones open too."""
        for p in self.phases:
            st = self.stats[p]
            if p in self.closed:
                if not st.done:
                    break
                continue
            info, message = self.owner(p).close()  # type: ignore[misc]
            self.book.close(self.ctx.state, st, info, message)
            if not st.done:
                break
