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
from accelopt_nb.search.events import ProgressEvent, ProgressFn, StepStats

if TYPE_CHECKING:
    from accelopt_nb.search.state import PlanView, RunState

__all__ = ["ROLE_OF_PHASE", "StepBook", "failure_record", "kernel_order"]

ROLE_OF_PHASE = {"plan": "planner", "execute": "executor", "summarize": "summarizer"}


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
        info = {**info, "stats": stats.to_dict()}
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


def failure_record(c: Completion, **ids: Any) -> dict[str, Any]:
    """What the store keeps of a failed call: its ids, status, error and the end of its answer."""
    return {**ids, "call_id": c.call_id, "status": c.status, "error": c.error, "finish_reason": c.finish_reason,
            "raw": _raw_of(c)}


def _raw_of(completion: Completion) -> str | None:
    if completion.text:
        return completion.text[-4000:]
    if completion.rejections:
        return completion.rejections[-1].text[-4000:]
    return None
