"""The summarize step's LLM work: measured slow→fast pairs → summarizer calls → memory items.

:func:`rewrite_pairs` picks an iteration's pairs (at most TopK, positives best-first, then the
reversed negatives; :func:`accelopt_nb.search.memory.select_rewrites`); :func:`summarize_calls`
asks the summarizer about each pair not summarized yet and records the lessons. An answer "No
optimization found" spends no memory slot.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from accelopt_nb.agents.summarizer import ParsedSummary
from accelopt_nb.llm.client import CallRequest
from accelopt_nb.llm.completion import Completion
from accelopt_nb.search.events import StepStats
from accelopt_nb.search.memory import MemoryItem, RewritePair, RewriteRecord, memory_item_from_pair, select_rewrites
from accelopt_nb.search.state import RunState

if TYPE_CHECKING:
    from accelopt_nb.search.session import Session

__all__ = ["rewrite_pairs", "summarize_calls"]


def rewrite_pairs(state: RunState, iteration: int | None = None) -> list[RewritePair]:
    """The slow→fast pairs an iteration contributes to memory (before summarization)."""
    records = []
    for k in state.iteration_kernels(iteration):
        parent = state.kernels.get(k.parent_id or "")
        if parent is None or parent.latency_ms is None:
            continue
        records.append(RewriteRecord(parent.kernel_id, parent.source, parent.latency_ms, k.kernel_id, k.source,
                                     k.latency_ms if k.correct else None, k.plan_id or "", k.order))
    m = state.config.memory
    return select_rewrites(records, m.top_k, m.positive_threshold, m.negative_threshold)


def summarize_calls(s: "Session", stats: StepStats, existing: dict[str, MemoryItem],
                    failures: list[dict[str, Any]], not_found: list[str]) -> list[MemoryItem]:
    """Summarize the current iteration's pairs; returns the new items in pair order."""
    from accelopt_nb.search.session import failure_record

    t = s.iteration
    pairs = rewrite_pairs(s.state)
    results: dict[str, MemoryItem] = {}
    requests = []
    for pair in pairs:
        iid = f"{s.run_id}:i{t}:{pair.slow_id}>{pair.fast_id}"
        if iid in existing:
            results[iid] = existing[iid]
            continue
        slow, fast = s.kernels[pair.slow_id], s.kernels[pair.fast_id]
        messages = s.summarizer.messages(slow_source=pair.slow_source, fast_source=pair.fast_source,
                                         speedup=pair.speedup, slow_ms=slow.latency_ms, fast_ms=fast.latency_ms)
        requests.append(s.call_request("summarizer", messages, key=(iid, pair), validate=s.summarizer.validate,
                                       sample=0, slot=f"i{t}:{pair.slow_id}>{pair.fast_id}"))
    s._emit("summarize", t, "start", total=len(requests))

    def done(req: CallRequest, c: Completion) -> None:
        iid, pair = req.key
        stats.calls += 1
        if not c.ok:
            stats.add_failure(c.error, unusable=c.status == "unusable")
            failures.append(failure_record(c, item_id=iid))
        else:
            parsed: ParsedSummary = c.parsed
            if not parsed.found:
                not_found.append(iid)  # no meaningful difference: no memory slot is spent on it
            else:
                item = memory_item_from_pair(pair, parsed.title, parsed.summary, problem=s.problem.name,
                                             iteration=t, run_id=s.run_id)
                item.item_id = iid
                s.state.record_memory_item(item, call_id=c.call_id,
                                           extra={"reasoning": parsed.reasoning or c.reasoning,
                                                  "finish_reason": c.finish_reason})
                results[iid] = item
        s._emit("summarize", t, "call_done", done=stats.calls, total=len(requests), failed=stats.failed)

    s.fan_out(requests, done, stats)
    # Enqueue in pair order (positives best-first, then negatives), not completion order.
    return [results[iid] for iid in (f"{s.run_id}:i{t}:{p.slow_id}>{p.fast_id}" for p in pairs) if iid in results]
