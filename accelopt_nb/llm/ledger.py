"""The cost ledger: one row per logical LLM call, persisted, with a spending cap.

A :class:`Ledger` prices calls from a :class:`~accelopt_nb.llm.prices.PriceTable`, keeps
the rows in memory for notebooks, and hands each row to its sinks (the run store's
``llm_calls`` table, a JSONL file). With ``cap_usd`` set, every call first reserves its
estimated cost (:meth:`Ledger.reserve`): a call is refused with
:class:`~accelopt_nb.errors.BudgetExceededError` once what was spent plus what calls in
flight have reserved reaches the cap, so many concurrent calls cannot all start just below
it. Calls already in flight finish and are recorded; the total exceeds the cap by at most
what those calls cost beyond their estimates.
"""
from __future__ import annotations

import json
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Protocol, Sequence

from accelopt_nb.errors import BudgetExceededError, ConfigError
from accelopt_nb.llm.prices import PriceTable
from accelopt_nb.llm.response import Usage

if TYPE_CHECKING:
    import pandas as pd

    from accelopt_nb.llm.completion import Completion

__all__ = ["LLMCallRecord", "Ledger", "LedgerSink", "JsonlLedgerSink", "summarize_calls"]


@dataclass(frozen=True)
class LLMCallRecord:
    """One ledger row. Column names match the run store's ``llm_calls`` table."""

    call_id: str
    run_id: str | None
    iteration: int | None
    role: str
    model: str
    price_key: str | None
    started_at: str | None
    latency_s: float
    prompt_tokens: int
    completion_tokens: int
    reasoning_tokens: int
    cached_tokens: int
    cost_usd: float | None
    status: str
    attempts: int
    transport_failures: int
    unusable_outputs: int
    failures_json: str
    error: str | None
    replayed: bool
    request_hash: str | None
    sample: int | None
    finish_reason: str | None = None   # the server's, for the last answer (stop, length, ...); None: no answer

    @classmethod
    def from_completion(cls, c: "Completion", price_key: str | None) -> "LLMCallRecord":
        failures = list(c.transport_failures) + ["unusable_output: " + r.reason for r in c.rejections]
        return cls(call_id=c.call_id, run_id=c.run_id, iteration=c.iteration, role=c.role,
                   model=c.model, price_key=price_key, started_at=c.started_at,
                   latency_s=c.latency_s, prompt_tokens=c.usage.prompt_tokens,
                   completion_tokens=c.usage.completion_tokens,
                   reasoning_tokens=c.usage.reasoning_tokens, cached_tokens=c.usage.cached_tokens,
                   cost_usd=c.cost_usd, status=c.status, attempts=c.attempts,
                   transport_failures=len(c.transport_failures), unusable_outputs=len(c.rejections),
                   failures_json=json.dumps(failures), error=c.error, replayed=c.replayed,
                   request_hash=c.request_hash, sample=c.sample, finish_reason=c.finish_reason)

    def to_row(self) -> dict[str, Any]:
        return asdict(self)


class LedgerSink(Protocol):
    """Anything that persists ledger rows (``RunStore`` implements this)."""

    def record_llm_call(self, row: dict[str, Any]) -> None: ...


class JsonlLedgerSink:
    """Appends one JSON object per call to a file (flushed per row)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def record_llm_call(self, row: dict[str, Any]) -> None:
        line = json.dumps(row, sort_keys=True)
        with self._lock, self.path.open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")
            fh.flush()

    def read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        rows = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # a line cut short by a crash: the call it described was in flight
        return rows


class Ledger:
    """Prices, records and caps LLM spending. Thread-safe."""

    def __init__(self, prices: PriceTable | None = None, *, cap_usd: float | None = None,
                 sinks: Sequence[LedgerSink] = (), spent_usd: float = 0.0) -> None:
        if cap_usd is not None and cap_usd < 0:
            raise ConfigError(f"spending cap must be >= 0 USD, got {cap_usd}")
        self.prices = prices if prices is not None else PriceTable.default()
        self.cap_usd = cap_usd
        self.sinks = list(sinks)
        self._spent = float(spent_usd)
        self._reserved = 0.0
        self._records: list[LLMCallRecord] = []
        self._lock = threading.Lock()

    @classmethod
    def for_store(cls, store: Any, run_id: str, *, prices: PriceTable | None = None,
                  cap_usd: float | None = None) -> "Ledger":
        """A ledger writing to a run store, counting what the run already spent (resume)."""
        return cls(prices, cap_usd=cap_usd, sinks=[store], spent_usd=store.total_llm_cost(run_id))

    # -- pricing and the cap -----------------------------------------------------------
    def cost(self, price_key: str | None, usage: Usage) -> float | None:
        """USD for ``usage`` at ``price_key``; None when the model is unpriced."""
        if price_key is None:
            return None
        return self.prices.cost(price_key, usage)

    def require_price(self, price_key: str | None, model: str) -> None:
        """A cap is meaningless for unpriced calls: refuse them up front."""
        if self.cap_usd is not None:
            if price_key is None:
                raise ConfigError(f"a spending cap is set but model {model} has no price key; "
                                  "give its ModelConfig a 'price' from the price table")
            self.prices.get(price_key)

    @property
    def spent_usd(self) -> float:
        with self._lock:
            return self._spent

    @property
    def remaining_usd(self) -> float | None:
        return None if self.cap_usd is None else max(0.0, self.cap_usd - self.spent_usd)

    @property
    def exhausted(self) -> bool:
        return self.cap_usd is not None and self.spent_usd >= self.cap_usd

    def check_budget(self, pending_usd: float = 0.0) -> None:
        """Raise BudgetExceededError if the cap is reached (counting ``pending_usd`` already
        billed to a call that has not been recorded yet)."""
        if self.cap_usd is None:
            return
        spent = self.spent_usd + pending_usd
        if spent >= self.cap_usd:
            raise BudgetExceededError(f"spending cap of {self.cap_usd:.4f} USD reached "
                                      f"({spent:.4f} USD spent); no new LLM calls are made")

    def reserve(self, estimate_usd: float) -> float:
        """Hold ``estimate_usd`` of the cap for a call about to start; refuse it (raise
        BudgetExceededError) when spent plus reserved already reach the cap. Returns the amount
        to hand back to :meth:`release` when the call is recorded."""
        if self.cap_usd is None:
            return 0.0
        amount = max(0.0, float(estimate_usd))
        with self._lock:
            committed = self._spent + self._reserved
            if committed >= self.cap_usd:
                raise BudgetExceededError(f"spending cap of {self.cap_usd:.4f} USD reached ({self._spent:.4f} USD "
                                          f"spent, {self._reserved:.4f} USD held by calls in flight); no new LLM "
                                          f"calls are made")
            self._reserved += amount
        return amount

    def release(self, amount: float) -> None:
        with self._lock:
            self._reserved = max(0.0, self._reserved - amount)

    @property
    def reserved_usd(self) -> float:
        with self._lock:
            return self._reserved

    # -- recording ---------------------------------------------------------------------
    def record(self, record: LLMCallRecord) -> None:
        with self._lock:
            self._records.append(record)
            self._spent += record.cost_usd or 0.0
            row = record.to_row()
            # Sinks run under the lock so rows reach every sink in the same order.
            for sink in self.sinks:
                sink.record_llm_call(row)

    @property
    def records(self) -> list[LLMCallRecord]:
        with self._lock:
            return list(self._records)

    def to_dataframe(self) -> "pd.DataFrame":
        import pandas as pd

        rows: Iterable[dict] = [r.to_row() for r in self.records]
        columns = [f for f in LLMCallRecord.__dataclass_fields__]
        return pd.DataFrame(list(rows), columns=columns)

    def summary(self, by: Sequence[str] = ("role", "model")) -> "pd.DataFrame":
        """Calls, tokens and USD summed per group (default: per role and model)."""
        df = self.to_dataframe()
        return summarize_calls(df, by)


def summarize_calls(df: "pd.DataFrame", by: Sequence[str] = ("role", "model")) -> "pd.DataFrame":
    """Sum a frame of ledger rows (from a Ledger or ``RunStore.llm_calls_df``) per group."""
    import pandas as pd

    sums = ["prompt_tokens", "completion_tokens", "reasoning_tokens", "cached_tokens",
            "cost_usd", "latency_s", "attempts", "transport_failures", "unusable_outputs"]
    if df.empty:
        return pd.DataFrame(columns=[*by, "calls", "failed_calls", *sums])
    grouped = df.groupby(list(by), dropna=False)
    out = grouped[sums].sum(min_count=1)
    out.insert(0, "calls", grouped.size())
    out.insert(1, "failed_calls", grouped["status"].apply(lambda s: int((s != "ok").sum())))
    return out.reset_index()
