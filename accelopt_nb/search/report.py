"""The final report of a run: best kernel, speedup, % of peak, and LLM tokens and cost per role."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from accelopt_nb.search.session import Session


@dataclass
class RoleUsage:
    role: str
    calls: int = 0
    failed_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: float | None = 0.0  # None when some call was unpriced (self-hosted without a price rule)


@dataclass
class RunReport:
    problem: str
    run_id: str
    strategy: str
    iterations_done: int
    baseline_latency_ms: float
    best_kernel_id: str
    best_latency_ms: float
    speedup: float
    baseline_pct_peak: float | None
    best_pct_peak: float | None
    peak_bound: str | None
    best_source: str
    memory_items: int
    history: list[dict[str, Any]] = field(default_factory=list)
    usage: list[RoleUsage] = field(default_factory=list)
    kernels: int = 0
    correct_kernels: int = 0

    @property
    def total_cost_usd(self) -> float | None:
        costs = [u.cost_usd for u in self.usage]
        return None if any(c is None for c in costs) else float(sum(costs))  # type: ignore[arg-type]

    @property
    def total_tokens(self) -> int:
        return sum(u.prompt_tokens + u.completion_tokens for u in self.usage)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["total_cost_usd"] = self.total_cost_usd
        d["total_tokens"] = self.total_tokens
        return d

    def to_text(self) -> str:
        pct = (lambda v: "n/a" if v is None else f"{v:.1f}%")
        lines = [f"AccelOpt run {self.run_id} on {self.problem} ({self.strategy}, {self.iterations_done} iterations)",
                 f"  baseline: {self.baseline_latency_ms:.4g} ms ({pct(self.baseline_pct_peak)} of peak)",
                 f"  best:     {self.best_latency_ms:.4g} ms ({pct(self.best_pct_peak)} of peak) = "
                 f"{self.speedup:.3f}x, kernel {self.best_kernel_id}"
                 + (f"; peak bound: {self.peak_bound}" if self.peak_bound else ""),
                 f"  kernels: {self.kernels} generated, {self.correct_kernels} correct; memory: {self.memory_items} items"]
        if self.history:
            lines.append("  best so far per iteration: " + ", ".join(
                f"{h['iteration']}: {h['best_speedup']:.3f}x" for h in self.history))
        lines.append("  LLM usage:")
        lines.append(f"    {'role':<11}{'calls':>6}{'failed':>7}{'prompt tok':>12}{'output tok':>12}{'USD':>10}")
        for u in self.usage:
            cost = "n/a" if u.cost_usd is None else f"{u.cost_usd:.4f}"
            lines.append(f"    {u.role:<11}{u.calls:>6}{u.failed_calls:>7}{u.prompt_tokens:>12}"
                         f"{u.completion_tokens:>12}{cost:>10}")
        total = self.total_cost_usd
        lines.append(f"    {'total':<11}{sum(u.calls for u in self.usage):>6}"
                     f"{sum(u.failed_calls for u in self.usage):>7}"
                     f"{sum(u.prompt_tokens for u in self.usage):>12}{sum(u.completion_tokens for u in self.usage):>12}"
                     f"{'n/a' if total is None else f'{total:.4f}':>10}")
        return "\n".join(lines)


def usage_by_role(store: Any, run_id: str) -> list[RoleUsage]:
    """Sum the run's ledger rows (the store's ``llm_calls`` table) per agent role."""
    df = store.llm_calls_df(run_id)
    out = []
    for role in ("planner", "executor", "summarizer"):
        sub = df[df["role"] == role] if not df.empty else df
        u = RoleUsage(role=role)
        if not sub.empty:
            u.calls = int(len(sub))
            u.failed_calls = int((sub["status"] != "ok").sum())
            u.prompt_tokens = int(sub["prompt_tokens"].sum())
            u.completion_tokens = int(sub["completion_tokens"].sum())
            u.reasoning_tokens = int(sub["reasoning_tokens"].sum())
            costs = sub["cost_usd"]
            u.cost_usd = None if costs.isna().any() else float(costs.sum())
        out.append(u)
    return out


def build_report(session: "Session") -> RunReport:
    base, best = session.baseline, session.best
    peak = session.problem.peak(session.config.evaluation.hw)
    kernels = [k for k in session.kernels.values() if k.kernel_id != base.kernel_id]
    return RunReport(problem=session.problem.name, run_id=session.run_id, strategy=session.config.strategy,
                     iterations_done=session.iteration, baseline_latency_ms=base.latency_ms,
                     best_kernel_id=best.kernel_id, best_latency_ms=best.latency_ms,
                     speedup=base.latency_ms / best.latency_ms if best.latency_ms else math.nan,
                     baseline_pct_peak=base.pct_peak, best_pct_peak=best.pct_peak,
                     peak_bound=peak[1] if peak else None, best_source=best.source,
                     memory_items=len(session.memory), history=session.history(),
                     usage=usage_by_role(session.store, session.run_id), kernels=len(kernels),
                     correct_kernels=sum(k.correct for k in kernels))
