"""The LLM calls of an iteration: planner, executor and summarizer requests, with the run's sampling.

Each builder asks only for calls whose answer is not stored yet, so a resumed step makes only
the calls still missing. Every call is named by its ``slot`` within the run (the plan or kernel
id it will produce), which makes its cassette key exact however the calls are scheduled.
"""
from __future__ import annotations

import hashlib
import random
from typing import TYPE_CHECKING, Any, Collection

from accelopt_nb.agents.prompts import PeakInfo, format_profile
from accelopt_nb.llm.client import CallRequest
from accelopt_nb.search.memory import RewritePair
from accelopt_nb.search.state import KernelView, PlanView

if TYPE_CHECKING:
    from accelopt_nb.search.context import SearchContext

__all__ = ["call_request", "executor_requests", "planner_requests", "summarizer_request"]


def call_request(ctx: "SearchContext", role: str, messages: Any, *, key: Any, validate: Any, sample: int,
                 slot: str) -> CallRequest:
    """A call of ``role`` with the run's sampling settings (seed mode, unusable retries).

    ``slot`` names the call in its run (``i3b1p4s0``: iteration 3, beam slot 1, plan 4, sample 0);
    under ``sampling.seed_mode: per_call`` a seeded model gets :func:`call_seed` of it."""
    s = ctx.config.sampling
    client = ctx.client(role)
    slot = f"{ctx.problem.name}/{slot}"
    params: dict[str, Any] | None = None
    if s.seed_mode == "none":
        params = {"seed": None}
    elif s.seed_mode == "per_call" and client.config.seed is not None:
        params = {"seed": call_seed(client.config.seed, ctx.config.seed, slot)}
    return CallRequest(messages=messages, role=role, key=key, validate=validate, sample=sample, slot=slot,
                       params=params, run_id=ctx.run_id, iteration=ctx.state.iteration,
                       unusable_retries=s.unusable_retries, client=client)


def call_seed(*parts: Any) -> int:
    """A seed from ``parts`` (30 bits, so the client's ``+ sample`` stays a non-negative int32)."""
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x3FFF_FFFF


def planner_requests(ctx: "SearchContext", skip: Collection[str] = ()) -> list[CallRequest]:
    """N plans for each kernel plans are drawn from (the beam, or the baseline), the missing ones
    (not ``skip``: plan ids whose call failed for good).

    Key: ``("plan", plan id, parent kernel id, beam slot, sample)``."""
    state, config = ctx.state, ctx.config
    t = state.iteration
    n = config.plans_for(t, len(state.beam))
    memory = state.memory.visible(ctx.problem.name, shared=config.memory.shared) if config.uses_memory else []
    out = []
    for b, kid in enumerate(ctx.plan_sources()):
        kernel = state.kernels[kid]
        rng = random.Random(f"{config.seed}:{t}:{kid}")  # seeded, resume-stable
        lines = format_profile(_profile_with_latency(kernel), config.planner.profile_order, rng,
                               fields=config.planner.profile_fields)
        hints = _hints(kernel) if config.planner.show_hints else []
        messages = ctx.planner.messages(problem_name=ctx.problem.name, reference_source=ctx.reference_source,
                                        kernel_source=kernel.source, profile_lines=lines, memory_items=memory,
                                        peak=_peak_info(ctx, kernel), hints=hints)
        for j in range(n):
            pid = f"i{t}b{b}p{j}"
            if pid not in state.plans and pid not in skip:
                out.append(call_request(ctx, "planner", messages, key=("plan", pid, kid, b, j),
                                        validate=ctx.planner.validate, sample=j, slot=pid))
    return out


def executor_requests(ctx: "SearchContext", plan: PlanView, skip: Collection[str] = ()) -> list[CallRequest]:
    """K kernels for one plan, the missing ones (not ``skip``: kernel ids whose call failed for good).
    Key: ``("kernel", kernel id, plan id, sample)``."""
    parent = ctx.state.kernels[plan.parent_id]
    messages = ctx.executor.messages(problem_name=ctx.problem.name, reference_source=ctx.reference_source,
                                     kernel_source=parent.source, plan=plan.text)
    out = []
    for k in range(ctx.config.samples_per_plan):
        kid = f"{plan.plan_id}s{k}"
        if kid not in ctx.state.kernels and kid not in skip:
            out.append(call_request(ctx, "executor", messages, key=("kernel", kid, plan.plan_id, k),
                                    validate=ctx.executor.validate, sample=k, slot=kid))
    return out


def summarizer_request(ctx: "SearchContext", item_id: str, pair: RewritePair) -> CallRequest:
    """The summarizer's call about one slow→fast pair. Key: ``(memory item id, pair)``."""
    kernels, t = ctx.state.kernels, ctx.state.iteration
    slow, fast = kernels[pair.slow_id], kernels[pair.fast_id]
    messages = ctx.summarizer.messages(slow_source=pair.slow_source, fast_source=pair.fast_source,
                                       speedup=pair.speedup, slow_ms=slow.latency_ms, fast_ms=fast.latency_ms)
    return call_request(ctx, "summarizer", messages, key=(item_id, pair), validate=ctx.summarizer.validate,
                        sample=0, slot=f"i{t}:{pair.slow_id}>{pair.fast_id}")


def _peak_info(ctx: "SearchContext", kernel: KernelView) -> PeakInfo | None:
    if not ctx.config.planner.show_peak:
        return None
    p = ctx.problem.peak(ctx.config.evaluation.hw)
    if p is None or kernel.latency_ms is None:
        return None
    return PeakInfo(percent=100.0 * p[0] / kernel.latency_ms, peak_ms=p[0], bound=p[1])


def _profile_with_latency(kernel: KernelView) -> dict[str, Any]:
    prof = dict(kernel.profile or {})
    if kernel.latency_ms is not None:
        prof["latency"] = kernel.latency_ms
    return prof


def _hints(kernel: KernelView) -> list[str]:
    notes = (kernel.profile or {}).get("bottleneck") or []
    return [str(n) for n in notes] if isinstance(notes, (list, tuple)) else [str(notes)]
