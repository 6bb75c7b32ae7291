"""The fixer stage: repairs of candidates that failed their evaluation (optional, ``fixer.attempts``).

Upstream AccelOpt's GPU variant hands a proposal that fails to compile or check back to a model with
its error log before discarding it. Here a candidate of this iteration whose screening (or
confirmation) ends in a kernel error or an incorrect verdict (:data:`accelopt_nb.agents.fixer.FIXABLE`)
gets up to F repair attempts: the fixer sees the failing kernel, the plan it implements and the
evaluation's report (the error's line, API and rule, or each output's error against the tolerance),
and its answer is an ordinary candidate. A repair is named after what it repairs (``i1b0p3s0`` ->
``i1b0p3s0f1`` -> ``i1b0p3s0f2``), keeps its plan and parent, is recorded with ``origin="fixer"``,
screened like any kernel, and may itself be repaired until F attempts are spent. Its call's ``slot``
is that name, so a cassette replays it exactly.

The stage counts its calls apart from the executor's and the screening's (their steps' statistics
stay theirs) and owns no step. A repair owed is a screening the evaluate step still expects: from
the moment it is asked (or declined because a stop was requested) until its answer comes back
without a kernel or its kernel is offered for screening. So a stop or a crash leaves the evaluate
step open, and the stream run again asks exactly the repairs not yet recorded (:meth:`FixStage.start`).
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from accelopt_nb.agents.fixer import Fixer, failure_report, is_fixable
from accelopt_nb.errors import ConfigError
from accelopt_nb.llm.client import CallRequest
from accelopt_nb.llm.completion import Completion
from accelopt_nb.search.events import StepStats
from accelopt_nb.search.requests import call_request
from accelopt_nb.search.steps import failure_record
from accelopt_nb.search.stage import Stage

if TYPE_CHECKING:
    from accelopt_nb.search.state import KernelView
    from accelopt_nb.search.stream import IterationStream

__all__ = ["FixStage", "repair_id", "repair_attempt"]

ORIGIN = "fixer"
_REPAIRABLE_ORIGINS = ("llm", ORIGIN)  # not the baseline, not a person's kernel


def repair_id(kernel_id: str) -> str:
    """The id of the repair of ``kernel_id``: ``...s0`` -> ``...s0f1`` -> ``...s0f2``."""
    head, sep, n = kernel_id.rpartition("f")
    if sep and n.isdigit() and head:
        return f"{head}f{int(n) + 1}"
    return f"{kernel_id}f1"


def repair_attempt(view: "KernelView") -> int:
    """How many repairs led to this kernel (0 for an executor's kernel)."""
    return int(view.data.get("fix_attempt", 0)) if view.origin == ORIGIN else 0


class FixStage(Stage):
    """Asks the fixer to repair each failed candidate of the iteration, up to ``fixer.attempts`` times."""

    name, step = "fix", "evaluate"  # runs beside the screening; owns no step (ScreenStage closes evaluate)

    def __init__(self, stream: "IterationStream") -> None:
        super().__init__(stream)
        ctx = self.ctx
        self.stats = StepStats("fix", ctx.state.iteration)  # its own counts; the steps' stay their stages'
        self.attempts = ctx.config.fixer.attempts
        problem = ctx.problem
        self.fixer = Fixer(ctx.executor.prompts, hw=ctx.config.evaluation.hw, dtypes=problem.dtypes,
                           tolerance=problem.tolerance, adversarial=ctx.executor.adversarial,
                           prompt_set=ctx.config.prompts.set)
        self.asked: set[str] = set()
        self.failures: list[dict[str, Any]] = []

    def start(self) -> None:
        """Repairs owed by evaluations recorded before this stream (a resumed iteration)."""
        for view in self.ctx.state.iteration_kernels():
            if view.evaluated:
                self.on_evaluated(view.kernel_id, view)

    def on_evaluated(self, kernel_id: str, view: "KernelView") -> None:
        if not self._owes_repair(view):
            return
        self.asked.add(repair_id(view.kernel_id))
        self._expect_screening(+1)  # owed until its answer comes back (see the module docstring)
        if self.ctx.stop_requested:
            return  # declined for now: the evaluate step stays open, a resume asks it
        self.stream.ask([self._repair_request(view)], on_answer=self.on_answer)

    def _owes_repair(self, view: "KernelView") -> bool:
        ctx = self.ctx
        if self.attempts <= 0 or view.origin not in _REPAIRABLE_ORIGINS or view.iteration != ctx.state.iteration:
            return False
        if not is_fixable(view.result or {"status": view.status}) or repair_attempt(view) >= self.attempts:
            return False
        new_id = repair_id(view.kernel_id)
        return new_id not in ctx.state.kernels and new_id not in self.asked

    def _expect_screening(self, n: int) -> None:
        screen = self.stream.stage("screen")
        if screen is not None:
            screen.expected += n

    def _repair_request(self, view: "KernelView") -> CallRequest:
        ctx = self.ctx
        attempt = repair_attempt(view) + 1
        new_id = repair_id(view.kernel_id)
        plan = ctx.state.plans.get(view.plan_id) if view.plan_id else None
        report = failure_report(view.result or {"status": view.status, "message": view.message}, view.source)
        messages = self.fixer.messages(problem_name=ctx.problem.name, reference_source=ctx.reference_source,
                                       kernel_source=view.source, report=report,
                                       plan=plan.text if plan is not None else None, attempt=attempt)
        key = ("fix", new_id, view.kernel_id, attempt)
        try:
            return call_request(ctx, "fixer", messages, key=key, validate=self.fixer.validate, sample=attempt,
                                slot=new_id)
        except ConfigError:  # no client of its own for the fixer (llm={...} without it): the executor's model
            req = call_request(ctx, "executor", messages, key=key, validate=self.fixer.validate, sample=attempt,
                               slot=new_id)
            return dataclasses.replace(req, role="fixer")

    def on_answer(self, req: CallRequest, c: Completion) -> None:
        _, new_id, failed_id, attempt = req.key
        st, state = self.stats, self.ctx.state
        st.calls += 1
        failed = state.kernels[failed_id]
        self._expect_screening(-1)  # the owed screening is settled: offered below, or no kernel to screen
        if c.ok:
            got = c.parsed
            data = {"call_id": c.call_id, "extraction": got.method, "notes": got.notes, "fix_attempt": attempt,
                    "repairs": failed_id, "raw_response": c.text, "reasoning": c.reasoning,
                    "finish_reason": c.finish_reason, "rejected": [r.reason for r in c.rejections]}
            plan = state.plans[failed.plan_id]
            state.record_kernel(new_id, got.code, plan, origin=ORIGIN, order=failed.order + 1, data=data)
            self.stream.offer(new_id)
        else:
            st.add_failure(c.error, unusable=c.status == "unusable")
            self.failures.append(failure_record(c, kernel_id=new_id, repairs=failed_id))
        self.stream.book.emit("execute", st.iteration, "call_done", done=st.calls, total=len(self.asked),
                              failed=st.failed, message=f"repair {attempt} of {failed_id}: {c.status}")
        return None
