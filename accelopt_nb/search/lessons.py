"""The summarize step's LLM work: measured slow→fast pairs → summarizer calls → memory items.

:func:`rewrite_pairs` picks an iteration's pairs (at most TopK, positives best-first, then the
reversed negatives; :func:`accelopt_nb.search.memory.select_rewrites`); :class:`SummarizeStage`
asks the summarizer about each pair not summarized yet and records the lessons. An answer "No
optimization found" spends no memory slot.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from accelopt_nb.agents.summarizer import ParsedSummary
from accelopt_nb.errors import BudgetExceededError, ConfigError, LLMError
from accelopt_nb.llm.client import CallRequest
from accelopt_nb.llm.completion import Completion
from accelopt_nb.search.events import StepStats
from accelopt_nb.search.memory import MemoryItem, RewritePair, memory_item_from_pair
from accelopt_nb.search.requests import summarizer_request
from accelopt_nb.search.state import RunState
from accelopt_nb.search.steps import count_failure, failure_record

if TYPE_CHECKING:
    from accelopt_nb.search.context import SearchContext

__all__ = ["SummarizeStage", "rewrite_pairs"]


def rewrite_pairs(state: RunState, iteration: int | None = None) -> list[RewritePair]:
    """The slow→fast pairs an iteration contributes to memory (:meth:`RunState.rewrite_pairs`)."""
    return state.rewrite_pairs(iteration)


class SummarizeStage:
    """The summarizer's calls of one iteration: one per pair not summarized yet (``existing``)."""

    name = step = "summarize"

    def __init__(self, ctx: "SearchContext", stats: StepStats, existing: dict[str, MemoryItem]) -> None:
        self.ctx = ctx
        self.stats = stats
        self.existing = existing
        self.failures: list[dict[str, Any]] = []
        self.not_found: list[str] = []           # pairs the summarizer found no difference in
        self.results: dict[str, MemoryItem] = {}
        self.expected = 0

    def item_id(self, pair: RewritePair) -> str:
        return f"{self.ctx.run_id}:i{self.ctx.state.iteration}:{pair.slow_id}>{pair.fast_id}"

    def run(self) -> list[MemoryItem]:
        """Summarize the current iteration's pairs; returns the new items in pair order."""
        ctx = self.ctx
        ctx.evals.settle("summarize")   # both sides of every pair with a full verdict (multi-fidelity)
        pairs = ctx.state.rewrite_pairs()
        requests = []
        self.failures = ctx.state.settled_failures("summarize")   # an earlier attempt's, not redrawn
        settled = {r.get("item_id") for r in self.failures}
        for pair in pairs:
            iid = self.item_id(pair)
            if iid in self.existing:
                self.results[iid] = self.existing[iid]
            elif iid not in settled:
                requests.append(summarizer_request(ctx, iid, pair))
        self.expected = len(requests)
        ctx.book.emit("summarize", ctx.state.iteration, "start", total=self.expected)
        self._fan_out(requests)
        # Enqueue in pair order (positives best-first, then negatives), not completion order.
        return [self.results[iid] for iid in map(self.item_id, pairs) if iid in self.results]

    def on_answer(self, req: CallRequest, c: Completion) -> None:
        iid, pair = req.key
        st, ctx = self.stats, self.ctx
        st.calls += 1
        if not c.ok:
            count_failure(st, c)
            self.failures.append(failure_record(c, item_id=iid))
        else:
            parsed: ParsedSummary = c.parsed
            if not parsed.found:
                self.not_found.append(iid)  # no meaningful difference: no memory slot is spent on it
            else:
                item = memory_item_from_pair(pair, parsed.title, parsed.summary, problem=ctx.problem.name,
                                             iteration=ctx.state.iteration, run_id=ctx.run_id)
                item.item_id = iid
                ctx.state.record_memory_item(item, call_id=c.call_id,
                                             extra={"reasoning": parsed.reasoning or c.reasoning,
                                                    "finish_reason": c.finish_reason})
                self.results[iid] = item
        ctx.book.emit("summarize", ctx.state.iteration, "call_done", done=st.calls, total=self.expected,
                      failed=st.failed)

    def _fan_out(self, requests: list[CallRequest]) -> None:
        """Run the calls; a stop or the spending cap leaves calls missing (the step stays open)."""
        if not requests:
            return
        driver = requests[0].client or self.ctx.client(requests[0].role)
        stop = lambda: self.ctx.stop_requested  # noqa: E731
        try:
            missing = driver.complete_each(requests, self.on_answer, stop=stop)
        except (BudgetExceededError, LLMError, ConfigError):
            self.stats.missing = max(0, len(requests) - self.stats.calls)
            raise
        self.stats.missing += len(missing)
        self.stats.stopped = stop() and bool(missing)
