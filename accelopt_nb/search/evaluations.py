"""The search's evaluations: jobs for this run's problem and settings, through the evaluation service.

Under ``evaluation.fidelity: full`` every candidate is evaluated fully; under ``multi`` every
candidate is screened (``fidelity="screen"``) and the kernels the search keeps are confirmed at
full fidelity (:meth:`Evaluations.confirm`). The cache, dedupe of same-tree kernels, a lost
worker as a crashed result, and the rule that a confirmation keeps an exact screening profile
are the service's (:class:`~accelopt_nb.evaluation.service.EvalService`), not the search's.
"""
from __future__ import annotations

from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Iterable

from accelopt_nb.evaluation.api import make_job
from accelopt_nb.evaluation.service import EvalService

if TYPE_CHECKING:
    from accelopt_nb.evaluation import EvalJob, EvalOptions, EvalResult
    from accelopt_nb.evaluation.executors import Evaluator
    from accelopt_nb.search.context import SearchContext

__all__ = ["Evaluations"]


class Evaluations:
    """Evaluations of one run's kernels (see the module docstring)."""

    def __init__(self, ctx: "SearchContext", *, executor: "Evaluator | None" = None, cache: Any = True,
                 options: "EvalOptions | None" = None) -> None:
        self.ctx = ctx
        self.options = options
        self.service = EvalService(executor, cache=cache, workers=ctx.config.runtime.eval_workers or None)

    @property
    def candidate_fidelity(self) -> str:
        """``screen`` under multi-fidelity search (confirmed later, before the beam), else ``full``."""
        return "screen" if self.ctx.config.evaluation.fidelity == "multi" else "full"

    @property
    def capacity(self) -> int | None:
        """How many evaluations run at once (None: unknown, e.g. a Dask cluster)."""
        return self.service.capacity

    @property
    def busy(self) -> int:
        """Evaluations holding a worker now."""
        return self.service.in_flight

    def job(self, label: str, source: str, fidelity: str) -> "EvalJob":
        ev, problem = self.ctx.config.evaluation, self.ctx.problem
        return make_job(problem.eval_target, source, backend=ev.backend, hw=ev.hw, preset=problem.preset,
                        options=self.options, label=label, fidelity=fidelity)  # type: ignore[arg-type]

    def submit(self, kernel_id: str) -> "Future[EvalResult]":
        """Evaluate one of the run's kernels at the candidates' fidelity."""
        return self.service.submit(self.job(kernel_id, self.ctx.state.kernels[kernel_id].source,
                                            self.candidate_fidelity))

    def evaluate_one(self, label: str, source: str, fidelity: str = "full") -> "EvalResult":
        result = self.service.evaluate(self.job(label, source, fidelity))
        result.label = label
        return result

    def confirm(self, kernel_id: str) -> "Future[EvalResult]":
        """Evaluate a screened kernel at full fidelity (keeping its screening profile where exact)."""
        view = self.ctx.state.kernels[kernel_id]
        screened = view.fidelity == "screen" and view.latency_ms is not None and bool(view.profile)
        return self.service.confirm(self.job(kernel_id, view.source, "confirm"),
                                    latency_ms=view.latency_ms if screened else None,
                                    profile=dict(view.profile or {}) if screened else None)

    def confirm_now(self, kernel_ids: Iterable[str], phase: str) -> None:
        """Confirm kernels (in parallel) and record each result, in the order given."""
        futures = {kid: self.confirm(kid) for kid in kernel_ids}
        for n, (kid, fut) in enumerate(futures.items(), 1):
            self.record_confirmation(kid, fut.result(), phase, done=n, total=len(futures))

    def record_confirmation(self, kernel_id: str, result: "EvalResult", phase: str, **counts: int) -> None:
        ctx = self.ctx
        ctx.state.record_evaluation(kernel_id, result, attempt=1)
        ctx.book.emit(phase, ctx.state.iteration, "eval_done",
                      message=f"confirmed {kernel_id}: {ctx.state.kernels[kernel_id].status}", **counts)

    def next_to_confirm(self, exclude: Iterable[str] = ()) -> str | None:
        """The best screened kernel that would take a beam slot now and is not confirmed yet."""
        skip = set(exclude)
        kernels = self.ctx.state.kernels
        for c in self.ctx.beam_choice():
            if c.kernel_id not in skip and not kernels[c.kernel_id].confirmed:
                return c.kernel_id
        return None

    def close(self) -> None:
        self.service.close()
