"""The result of one logical LLM call: what the model said and what it cost."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from accelopt_nb.errors import LLMError
from accelopt_nb.llm.response import Usage

__all__ = ["Completion", "Rejection", "CallStatus"]

# ok: a usable answer.  unusable: every response failed `validate` (retries exhausted).
# error: no response after transport retries, or a non-retryable request error.
# budget_exceeded: refused (or stopped) by the ledger's spending cap.
CallStatus = Literal["ok", "unusable", "error", "budget_exceeded"]


@dataclass(frozen=True)
class Rejection:
    """A response that ``validate`` refused, kept so the raw text is never lost."""

    text: str
    reason: str
    reasoning: str | None = None


@dataclass
class Completion:
    """One logical call, summed over its HTTP attempts and unusable-output retries.

    ``usage`` and ``cost_usd`` include every billed response, rejected ones too.
    ``attempts`` counts HTTP requests sent (or replayed); ``transport_failures`` lists
    the kind of each failed attempt (``timeout``, ``rate_limited``, ``http_500``,
    ``malformed_response``...). ``parsed`` is what ``validate`` returned.
    """

    call_id: str
    status: CallStatus
    model: str
    role: str
    text: str | None = None
    reasoning: str | None = None
    parsed: Any = None
    usage: Usage = field(default_factory=Usage)
    cost_usd: float | None = 0.0
    latency_s: float = 0.0
    attempts: int = 0
    transport_failures: list[str] = field(default_factory=list)
    rejections: list[Rejection] = field(default_factory=list)
    error: str | None = None
    finish_reason: str | None = None
    run_id: str | None = None
    iteration: int | None = None
    sample: int | None = None
    replayed: bool = False
    request_hash: str | None = None
    started_at: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def unusable_outputs(self) -> int:
        return len(self.rejections)

    def raise_for_status(self) -> "Completion":
        """Return self if ok, else raise :class:`LLMError` describing the failure."""
        if not self.ok:
            raise LLMError(f"LLM call {self.call_id} ({self.role}, {self.model}) {self.status}: "
                           f"{self.error or 'no usable output'}")
        return self
