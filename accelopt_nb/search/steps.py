"""The steps of a session as they run: progress events, per-step statistics, and closing a step.

:class:`StepBook` is what every part of the search (the session's steps, the iteration stream,
the summarizer's calls) reports to: it emits :class:`~accelopt_nb.search.events.ProgressEvent`
values, keeps a :class:`~accelopt_nb.search.events.StepStats` for every step that ended, and
closes a step in the run store: done, or left open (a resume runs it again and makes only the
calls still missing) when calls are missing, were stopped, or all failed.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Mapping

from accelopt_nb.errors import StepFailedError
from accelopt_nb.llm.completion import Completion
from accelopt_nb.llm.retry import is_transient_kind
from accelopt_nb.search.events import ProgressEvent, ProgressFn, StepStats

if TYPE_CHECKING:
    from accelopt_nb.search.state import PlanView, RunState

__all__ = ["ROLE_OF_PHASE", "StepBook", "count_failure", "failure_cause", "failure_record", "kernel_order"]

ROLE_OF_PHASE = {"plan": "planner", "execute": "executor", "summarize": "summarizer"}
SETTLED_CAUSES = ("unusable", "request")


class StepBook:
    """Progress events and step statistics of one session (``last`` is the latest step that ended)."""

    def __init__(self, problem: str, progress: ProgressFn | None = None) -> None:
        self.problem = problem
        self.progress = progress
        self.last: StepStats | None = None
        self.ended: list[StepStats] = []

    def emit(self, phase: str, iteration: int, kind: str, **fields: Any) -> None:
        if self.progress is not None:
            self.progress(ProgressEvent(phase=phase, iteration=iteration, kind=kind,  # type: ignore[arg-type]
                                        problem=self.problem, **fields))

    def close(self, state: "RunState", stats: StepStats, info: Mapping[str, Any], message: str) -> None:
        """Mark the step done, or leave it open when calls are missing or all of them failed
        (then a step of an LLM role raises :class:`StepFailedError`)."""
        self.last = stats
        self.ended.append(stats)
        stats.seconds = time.monotonic() - state.started.get(stats.phase, time.monotonic())
        # Failed calls a resume does not make again: the model's unusable answers and requests the server
        # refused (unless every call failed: then a resume asks them all again). Transport failures and
        # calls never made are missing and are redrawn.
        settled = [] if stats.all_failed else [r for r in info.get("failed") or []
                                                if r.get("cause") in SETTLED_CAUSES]
        info = {**info, "stats": stats.to_dict(), "settled": settled}
        if stats.stopped or stats.missing:
            state.mark_failed(stats.phase, info)
            self._end(stats, f"stopped: {stats.missing} call(s) not made; resume continues",
                      total=stats.calls + stats.missing)
            return
        if stats.all_failed and stats.phase in ROLE_OF_PHASE:
            state.mark_failed(stats.phase, info)
            self._end(stats, f"all {stats.calls} calls failed")
            raise StepFailedError(f"{stats.phase} step of iteration {stats.iteration}: all {stats.calls} LLM calls "
                                  f"failed (first error: {stats.first_error}); the step is not done, a resume "
                                  f"retries it")
        if stats.transport_exceeds(state.config.runtime.transport_failures_allowed):
            state.mark_failed(stats.phase, info)
            self._end(stats, f"{stats.transport} of {stats.calls} calls got no answer from the endpoint; "
                             f"the step stays open: a resume redraws them")
            raise StepFailedError(f"{stats.phase} step of iteration {stats.iteration}: {stats.transport} of "
                                  f"{stats.calls} LLM calls got no answer from the endpoint within the model's "
                                  f"retry window ({stats.transport_error}); the step is not done, a "
                                  f"resume makes exactly those calls again")
        state.mark_done(stats.phase, info)
        stats.done = True
        self._end(stats, message)

    def _end(self, stats: StepStats, message: str, total: int | None = None) -> None:
        self.emit(stats.phase, stats.iteration, "end", done=stats.calls,
                  total=stats.calls if total is None else total, failed=stats.failed, message=message)


def kernel_order(plan: "PlanView", sample: int) -> int:
    """Generation order of a kernel from its plan's slot alone, so ties break the same way in a
    resumed or pipelined run as in a sequential one."""
    b, j = plan.slot
    manual = 500 if plan.origin == "manual" else 0
    return ((b * 1000 + j + manual) * 10_000) + sample


def failure_cause(c: Completion) -> str:
    """Why a call gave no usable answer: ``unusable`` (every answer refused), ``transport`` (no
    answer from the endpoint within the retry window), ``budget`` (the spending cap), ``request``
    (the server refused the request, e.g. a prompt too long) or ``error`` (anything else)."""
    if c.status in ("unusable", "ok"):
        return c.status
    if c.status == "budget_exceeded":
        return "budget"
    if c.transport_failures:
        return "transport" if is_transient_kind(c.transport_failures[-1]) else "request"
    return "error"


def failure_record(c: Completion, **ids: Any) -> dict[str, Any]:
    """What the store keeps of a failed call: its ids, status, cause, error and the end of its answer."""
    return {**ids, "call_id": c.call_id, "status": c.status, "cause": failure_cause(c), "error": c.error,
            "finish_reason": c.finish_reason, "raw": _raw_of(c)}


def count_failure(stats: StepStats, c: Completion) -> None:
    """Count a failed call in its step's statistics, by cause."""
    cause = failure_cause(c)
    stats.add_failure(c.error, unusable=cause == "unusable", transport=cause == "transport")


def _raw_of(completion: Completion) -> str | None:
    if completion.text:
        return completion.text[-4000:]
    if completion.rejections:
        return completion.rejections[-1].text[-4000:]
    return None
