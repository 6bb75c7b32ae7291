"""What every stage of the iteration stream is (:mod:`accelopt_nb.search.stream`): a named part with its own
state that the stream starts, hands its LLM answers and tells of every recorded evaluation.

It has a module of its own so that stages defined elsewhere (the fixer, :mod:`accelopt_nb.search.fixing`) and the
stream that runs them both build on it without importing each other.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from accelopt_nb.llm.client import CallRequest
    from accelopt_nb.llm.completion import Completion
    from accelopt_nb.search.state import KernelView
    from accelopt_nb.search.stream import IterationStream

__all__ = ["Stage"]


class Stage:
    """One named part of the stream. ``step`` is the store step whose statistics it counts."""

    name = ""
    step = ""

    def __init__(self, stream: "IterationStream") -> None:
        self.stream = stream
        self.ctx = stream.ctx
        self.stats = stream.stats[self.step]
        self.expected = 0   # work items (LLM calls, evaluations) the step needs, as far as known

    def missing(self) -> int:
        """Work items the step needed but did not finish (a stop, the spending cap)."""
        return max(0, self.expected - self.stats.calls)

    def start(self) -> None:
        """Begin: ask the first LLM calls, offer the first kernels."""

    def on_answer(self, req: CallRequest, c: Completion) -> list[CallRequest] | None:
        """One of this stage's LLM calls answered (on the LLM thread); returns follow-up calls."""
        return None

    def on_evaluated(self, kernel_id: str, view: "KernelView") -> None:
        """An evaluation of one of the iteration's kernels was recorded (on the caller's thread)."""

    def close(self) -> tuple[dict[str, Any], str] | None:
        """The step's info and one-line summary, once the stream is over (None: not this stage's step)."""
        return None
