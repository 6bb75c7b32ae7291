"""What a running search tells its observers: progress events and per-step call statistics.

The session emits :class:`ProgressEvent` values to a ``progress`` callable (the CLI's lines, the
notebook's bars and panels all read the same events), and keeps a :class:`StepStats` for every
step it runs (``Session.last_step``), so a caller can see failed and missing calls without
reading the store.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Literal

__all__ = ["EventKind", "ProgressEvent", "ProgressFn", "StepStats"]

# start: a phase begins (total = work items); call_done / eval_done: one LLM call or evaluation
# finished; end: the phase finished (message = its one-line summary).
EventKind = Literal["start", "call_done", "eval_done", "end"]


@dataclass(frozen=True)
class ProgressEvent:
    """One thing that happened in a search, in the order it happened."""

    phase: str            # baseline | plan | execute | evaluate | select | summarize | iteration
    iteration: int
    kind: EventKind
    done: int = 0         # items of the phase finished so far
    total: int = 0        # items of the phase (LLM calls or evaluations)
    failed: int = 0       # items that failed so far
    message: str = ""
    problem: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


ProgressFn = Callable[[ProgressEvent], None]


@dataclass
class StepStats:
    """The LLM calls (or evaluations) of one step: how many ran, failed, or never ran.

    ``missing`` counts calls the step needed but did not make (a stop request, the spending
    cap). Failed calls are counted by cause: ``unusable`` (the model answered, every answer was
    refused: no code, a refusal, cut off), ``transport`` (the endpoint gave no answer within the
    model's retry window: down, timing out, 5xx). A step with missing calls, whose calls all
    failed, or with more transport failures than ``runtime.transport_failures_allowed`` allows,
    is not marked done: resuming the run runs it again and makes only the calls still missing
    (the transport failures among them; an unusable answer is the experiment's, not redrawn).
    """

    phase: str
    iteration: int
    calls: int = 0
    failed: int = 0
    missing: int = 0
    unusable: int = 0      # failed calls whose every answer was unusable (refusal, truncation, no code)
    transport: int = 0     # failed calls the endpoint never answered (within the model's retry window)
    first_error: str | None = None
    transport_error: str | None = None  # the first transport failure's message
    stopped: bool = False  # the step ended early on request_stop()
    done: bool = False     # the step was marked done in the store
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> int:
        return self.calls - self.failed

    @property
    def all_failed(self) -> bool:
        return self.calls > 0 and self.ok == 0

    def transport_exceeds(self, allowed: float) -> bool:
        """More transport failures than ``allowed`` (a fraction of the step's calls) tolerates."""
        return self.transport > 0 and self.transport > allowed * self.calls

    def add_failure(self, message: str | None, *, unusable: bool = False, transport: bool = False) -> None:
        self.failed += 1
        self.unusable += int(unusable)
        self.transport += int(transport)
        if transport and message:
            self.transport_error = self.transport_error or message
        if message:
            self.first_error = self.first_error or message
            if len(self.errors) < 5:
                self.errors.append(message)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
