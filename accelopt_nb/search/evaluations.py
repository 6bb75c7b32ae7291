"""The search's evaluations: jobs for this run's problem and settings, through the evaluation service.

Under ``evaluation.fidelity: full`` every candidate is evaluated fully; under ``multi`` every
candidate is screened (``fidelity="screen"``) and only full verdicts are learned from:

* **confirmed before learned**: a kernel takes a beam slot, or enters memory as either side of a
  rewrite pair, only with a full-fidelity verdict. :meth:`Evaluations.settle` confirms what
  ``select`` and the summarizer need, in rank order (:meth:`Evaluations.needed`: the beam as it
  would be chosen now, then both sides of the rewrite pairs), round after round until they need
  nothing more. Which kernels are confirmed, and in which order their results are recorded,
  depends only on verdicts, never on timing, so a cassette replays exactly under ``multi``.
* **speculation does not count**: while screens are still arriving, idle workers confirm what
  looks needed now (:meth:`Evaluations.prefetch`); those results are kept, not recorded, and
  used only if :meth:`settle` asks for the same kernel.

The cache, dedupe of same-tree kernels, a lost worker as a crashed result, and the rule that a
confirmation keeps an exact screening profile are the service's
(:class:`~accelopt_nb.evaluation.service.EvalService`), not the search's.
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
        self.service = EvalService(executor, cache=cache, workers=ctx.config.runtime.eval_workers or None,
                                   programs=ctx.config.evaluation.share_programs)
        self._prefetched: dict[str, "Future[EvalResult]"] = {}   # speculative confirmations, not recorded

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
        prefetched = self._prefetched.pop(kernel_id, None)
        if prefetched is not None:
            return prefetched
        view = self.ctx.state.kernels[kernel_id]
        screened = view.fidelity == "screen" and view.latency_ms is not None and bool(view.profile)
        return self.service.confirm(self.job(kernel_id, view.source, "confirm"),
                                    latency_ms=view.latency_ms if screened else None,
                                    profile=dict(view.profile or {}) if screened else None)

    def prefetch(self, kernel_id: str) -> "Future[EvalResult]":
        """Start a confirmation that :meth:`settle` may need; its result is recorded only then."""
        if kernel_id not in self._prefetched:
            self._prefetched[kernel_id] = self.confirm(kernel_id)
        return self._prefetched[kernel_id]

    @property
    def prefetched(self) -> set[str]:
        return set(self._prefetched)

    def needed(self) -> list[str]:
        """The screened kernels whose full verdict the search needs now, in rank order: those that
        would take a beam slot, then (when this iteration is summarized) both sides of each rewrite
        pair the summarizer would learn from."""
        ctx = self.ctx
        state = ctx.state
        ranked = [c.kernel_id for c in ctx.beam_choice()]
        if ctx.config.summarizes(state.iteration):
            for pair in state.rewrite_pairs():
                ranked += [pair.slow_id, pair.fast_id]
        return [kid for kid in dict.fromkeys(ranked) if not state.kernels[kid].confirmed]

    def settle(self, phase: str) -> None:
        """Confirm what :meth:`needed` names, all of a round at once, recording the results in rank
        order, until nothing more is needed (a rejected kernel makes room for the next one)."""
        while need := self.needed():
            self.confirm_now(need, phase)
        self._prefetched.clear()  # what speculation started and nobody needed is not recorded

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
        """The first kernel :meth:`needed` names that is neither excluded nor started already."""
        skip = set(exclude) | set(self._prefetched)
        return next((kid for kid in self.needed() if kid not in skip), None)

    def close(self) -> None:
        self._prefetched.clear()
        self.service.close()
