"""The report of a run, built from its state alone: best kernel, speedup, % of peak, LLM tokens,
cost, retries and unusable answers per role, evaluation statuses, and time per phase.

A model without a price is reported as "unpriced", never as $0.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from accelopt_nb.agents.prompts import ROLES
from accelopt_nb.search.state import correct_counts

if TYPE_CHECKING:
    import pandas as pd

    from accelopt_nb.search.state import RunState
    from accelopt_nb.store import RunStore


@dataclass
class RoleUsage:
    role: str
    calls: int = 0
    failed_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: float | None = 0.0  # None when some call was unpriced (self-hosted without a price rule)
    attempts: int = 0             # HTTP requests sent (transport retries and unusable re-asks included)
    transport_failures: int = 0   # failed HTTP attempts (5xx, 429, timeouts...)
    unusable_outputs: int = 0     # answers refused: no code, refusal, truncated (finish_reason=length)
    latency_s: float = 0.0        # time spent in requests, summed over calls
    finish_reasons: dict[str, int] = field(default_factory=dict)  # the last answer's finish_reason -> calls


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
    correct_kernels: int = 0          # correct with a full-fidelity verdict (what the beam and memory take)
    screened_correct: int = 0         # correct at screening only, never confirmed (multi-fidelity)
    rejected_on_confirmation: int = 0  # correct at screening, not at the full check
    statuses: dict[str, int] = field(default_factory=dict)     # evaluation status -> kernels
    phase_seconds: dict[str, float] = field(default_factory=dict)  # wall time per phase, summed over iterations
    fidelity: str = "full"
    prompt_set: str = "extended"
    repairs: int = 0           # kernels the fixer wrote (fixer.attempts > 0)
    repairs_correct: int = 0   # of which correct
    inherited: dict[str, int] = field(default_factory=dict)   # fidelity -> verdicts inherited (the same program)

    @property
    def total_cost_usd(self) -> float | None:
        costs = [u.cost_usd for u in self.usage]
        return None if any(c is None for c in costs) else float(sum(costs))  # type: ignore[arg-type]

    @property
    def transport_losses(self) -> dict[int, int]:
        """Iteration -> LLM calls that got no answer from the endpoint (candidates the run lost to it)."""
        out = {}
        for h in self.history:
            lost = ((h.get("candidates") or {}).get("failed_calls") or {})
            n = sum(step.get("transport", 0) for step in lost.values())
            if n:
                out[h["iteration"]] = n
        return out

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
                 f"  kernels: {self.kernels} generated, {self.correct_kernels} correct"
                 + (f" (full check), {self.screened_correct} more correct at screening only, "
                    f"{self.rejected_on_confirmation} rejected by the full check after screening"
                    if self.fidelity == "multi" else "") + f"; memory: {self.memory_items} items",
                 f"  evaluation ({self.fidelity} fidelity): " + (", ".join(
                     f"{n} {s}" for s, n in sorted(self.statuses.items())) or "none"),
                 f"  prompts: {self.prompt_set}"]
        if self.inherited:
            lines.insert(-1, "  inherited from a kernel with the same program (not evaluated again): " + ", ".join(
                f"{n} {'screens' if f == 'screen' else 'confirmations' if f == 'confirm' else f + ' checks'}"
                for f, n in sorted(self.inherited.items())))
        if self.repairs:
            lines.append(f"  fixer: {self.repairs} repairs of failed candidates, {self.repairs_correct} correct")
        if self.phase_seconds:
            lines.append("  time per phase: " + ", ".join(f"{p} {sec:.1f} s" for p, sec in self.phase_seconds.items()))
        if self.history:
            lines.append("  best so far per iteration: " + ", ".join(
                f"{h['iteration']}: {h['best_speedup']:.3f}x" for h in self.history))
            lines.append("  candidates per iteration (kernels / nominal): " + ", ".join(
                _candidates_text(h) for h in self.history))
        lines.append("  LLM usage:")
        lines.append(f"    {'role':<11}{'calls':>6}{'failed':>7}{'retries':>8}{'unusable':>9}{'prompt tok':>12}"
                     f"{'output tok':>12}{'USD':>10}")
        for u in self.usage:
            lines.append(f"    {u.role:<11}{u.calls:>6}{u.failed_calls:>7}{u.attempts - u.calls:>8}"
                         f"{u.unusable_outputs:>9}{u.prompt_tokens:>12}{u.completion_tokens:>12}{_usd(u.cost_usd):>10}")
        total = self.total_cost_usd
        lines.append(f"    {'total':<11}{sum(u.calls for u in self.usage):>6}"
                     f"{sum(u.failed_calls for u in self.usage):>7}"
                     f"{sum(u.attempts - u.calls for u in self.usage):>8}"
                     f"{sum(u.unusable_outputs for u in self.usage):>9}"
                     f"{sum(u.prompt_tokens for u in self.usage):>12}{sum(u.completion_tokens for u in self.usage):>12}"
                     f"{_usd(total):>10}")
        ends = [f"{u.role} " + ", ".join(f"{n} {r}" for r, n in sorted(u.finish_reasons.items()))
                for u in self.usage if u.finish_reasons]
        if ends:  # "length" here means answers cut off by the token limit (never accepted)
            lines.append("    finish reasons: " + "; ".join(ends))
        return "\n".join(lines)


def _candidates_text(h: dict[str, Any]) -> str:
    c = h.get("candidates") or {}
    if not c:
        return f"{h['iteration']}: {h.get('new')}"
    nominal = c.get("nominal")
    text = f"{h['iteration']}: {c.get('generated')}" + (f"/{nominal}" if nominal is not None else "")
    lost = [f"{role} {n} {cause}" for step, role in (("plan", "planner"), ("execute", "executor"))
            for cause, n in sorted((c.get("failed_calls") or {}).get(step, {}).items())]
    return text + (f" ({', '.join(lost)})" if lost else "")


def _usd(cost: float | None) -> str:
    return "unpriced" if cost is None else f"{cost:.4f}"


def usage_by_role(store: "RunStore", run_id: str) -> list[RoleUsage]:
    """Sum the run's ledger rows (the store's ``llm_calls`` table) per agent role."""
    df = store.llm_calls_df(run_id)
    out = []
    ran = set(df["role"]) if not df.empty else set()
    for role in ROLES:
        if role == "fixer" and role not in ran:  # an optional agent: a row only when it ran
            continue
        sub = df[df["role"] == role] if not df.empty else df
        u = RoleUsage(role=role)
        if not sub.empty:
            u.calls = int(len(sub))
            u.failed_calls = int((sub["status"] != "ok").sum())
            u.prompt_tokens = int(sub["prompt_tokens"].sum())
            u.completion_tokens = int(sub["completion_tokens"].sum())
            u.reasoning_tokens = int(sub["reasoning_tokens"].sum())
            u.attempts = int(sub["attempts"].sum())
            u.transport_failures = int(sub["transport_failures"].sum())
            u.unusable_outputs = int(sub["unusable_outputs"].sum())
            u.latency_s = float(sub["latency_s"].sum())
            costs = sub["cost_usd"]
            u.cost_usd = None if costs.isna().any() else float(costs.sum())
            u.finish_reasons = {str(r): int(n) for r, n in sub["finish_reason"].dropna().value_counts().items()}
        out.append(u)
    return out


def phase_seconds(state: "RunState") -> dict[str, float]:
    """Wall time per phase (baseline, plan, ...), from the step rows' start and finish times.

    Pipelined steps overlap, so their times add up to more than the wall time of the run."""
    out: dict[str, float] = {}
    for row in state.step_rows():
        start, end = row.get("started_at"), row.get("finished_at")
        if start and end:
            sec = (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
            out[row["step"]] = out.get(row["step"], 0.0) + max(0.0, sec)
    return out


def history(state: "RunState") -> list[dict[str, Any]]:
    """Per completed iteration: the best kernel so far, its latency and speedup."""
    rows = []
    for (it, name), info in sorted(state.done_steps().items()):
        if name == "select":
            rows.append({"iteration": it, "best": info["best"], "best_latency_ms": info["best_latency_ms"],
                         "best_speedup": info["best_speedup"], "best_pct_peak": info.get("best_pct_peak"),
                         "new": info.get("new"), "new_correct": info.get("new_correct"),
                         "screened_correct": info.get("screened_correct", 0),
                         "candidates": info.get("candidates")})
    return rows


def kernels_df(state: "RunState") -> "pd.DataFrame":
    """One row per kernel of the run: iteration, parent, plan, origin, status and the fidelity of that
    verdict (``screen``: not confirmed; ``screened``: the screening's status a confirmation replaced),
    latency, % of peak."""
    import pandas as pd

    cols = ["kernel_id", "iteration", "parent_id", "plan_id", "origin", "status", "fidelity", "screened",
            "inherited_from", "latency_ms", "pct_peak", "in_beam"]
    beam = set(state.beam)
    rows = [{"kernel_id": k.kernel_id, "iteration": k.iteration, "parent_id": k.parent_id, "plan_id": k.plan_id,
             "origin": k.origin, "status": k.status, "fidelity": k.fidelity, "screened": k.screened,
             "inherited_from": k.inherited_from, "latency_ms": k.latency_ms, "pct_peak": k.pct_peak, "in_beam": k.kernel_id in beam}
            for k in sorted(state.kernels.values(), key=lambda k: (k.iteration, k.order, k.kernel_id))]
    return pd.DataFrame(rows, columns=cols)


def build_report(state: "RunState") -> RunReport:
    """The report of a run (a Session passes its ``state``; a Session itself is accepted too)."""
    state = getattr(state, "state", state)
    base, best = state.baseline, state.best
    cfg = state.config
    peak = state.problem.peak(cfg.evaluation.hw)
    kernels = [k for k in state.kernels.values() if k.kernel_id != base.kernel_id]
    counts = correct_counts(kernels)
    return RunReport(problem=state.problem.name, run_id=state.run_id, strategy=cfg.strategy,
                     iterations_done=state.iteration, baseline_latency_ms=base.latency_ms,
                     best_kernel_id=best.kernel_id, best_latency_ms=best.latency_ms,
                     speedup=base.latency_ms / best.latency_ms if best.latency_ms else math.nan,
                     baseline_pct_peak=base.pct_peak, best_pct_peak=best.pct_peak,
                     peak_bound=peak[1] if peak else None, best_source=best.source,
                     memory_items=len(state.memory), history=history(state),
                     usage=usage_by_role(state.store, state.run_id), kernels=len(kernels),
                     correct_kernels=counts["new_correct"], screened_correct=counts["screened_correct"],
                     rejected_on_confirmation=counts["rejected_on_confirmation"],
                     statuses=dict(Counter(k.status or "not evaluated" for k in kernels)),
                     phase_seconds=phase_seconds(state), fidelity=cfg.evaluation.fidelity,
                     prompt_set=cfg.prompts.set, repairs=sum(k.origin == "fixer" for k in kernels),
                     repairs_correct=sum(k.origin == "fixer" and k.correct for k in kernels),
                     inherited=inherited_verdicts(state))


def inherited_verdicts(state: "RunState") -> dict[str, int]:
    """Fidelity -> evaluations of the run recorded as another kernel's verdict (the same program)."""
    counts: Counter[str] = Counter()
    for row in state.store.rows("evaluations", state.run_id):
        result = row.get("result") or {}
        if result.get("inherited_from"):
            counts[str(result.get("fidelity"))] += 1
    return dict(counts)
