"""One evaluation per program: the service (``programs=True``) gives a kernel whose program equals an evaluated
one that kernel's verdict, marked ``inherited_from``; any other kernel is evaluated itself. Real judges (in
process) on silu at the small shape; the executor is wrapped only to count what it ran."""
from __future__ import annotations

from collections import Counter

import pytest

import nkibench
from accelopt_nb.evaluation import Status, make_job
from accelopt_nb.evaluation.executors import InProcessEvaluator
from accelopt_nb.evaluation.service import EvalService

BASE = nkibench.get_problem("silu").baseline_source()


class Counting(InProcessEvaluator):
    """The in-process judge, counting the jobs it ran by fidelity."""

    def __init__(self) -> None:
        super().__init__()
        self.ran: Counter[str] = Counter()

    def submit(self, job):
        self.ran[job.fidelity] += 1
        return super().submit(job)


KERNELS = {
    "base": BASE,
    "renamed": BASE.replace("e = ", "exp_neg = ").replace("nl.add(e, 1.0)", "nl.add(exp_neg, 1.0)")
    + "\n\n_VARIANT = 2   # a constant nobody reads\n",
    "wrong_scalar": BASE.replace("nl.add(e, 1.0)", "nl.add(e, 2.0)"),
    "narrow_tile": BASE.replace("TILE_N = 512", "TILE_N = 256"),
}


@pytest.mark.parametrize("fidelity", ["full", "screen"])
def test_a_kernel_with_an_evaluated_program_inherits_its_verdict(tmp_path, fidelity):
    executor = Counting()
    with EvalService(executor, cache=tmp_path / "cache", programs=True) as service:
        results = {}
        for label, source in KERNELS.items():   # one by one: the leader is done before its twin arrives
            results[label] = service.evaluate(make_job("silu", source, preset="small", label=label,
                                                       fidelity=fidelity))
    assert results["base"].status is Status.CORRECT and results["base"].inherited_from is None
    heir = results["renamed"]
    assert heir.inherited_from == "base" and heir.status is Status.CORRECT and heir.label == "renamed"
    assert heir.checks == results["base"].checks and heir.latency_ms == results["base"].latency_ms
    assert any("the same program as 'base'" in line for line in heir.log)
    # a different scalar (the same instruction boxes) and a different tile are evaluated themselves
    assert results["wrong_scalar"].inherited_from is None and results["wrong_scalar"].status is Status.INCORRECT
    assert results["narrow_tile"].inherited_from is None and results["narrow_tile"].status is Status.CORRECT
    assert executor.ran[fidelity] == 3
    assert executor.ran["identify" if fidelity == "full" else "identify_screen"] == 4


def test_without_programs_every_kernel_is_evaluated(tmp_path):
    executor = Counting()
    with EvalService(executor, cache=tmp_path / "cache") as service:
        for label in ("base", "renamed"):
            assert service.evaluate(make_job("silu", KERNELS[label], preset="small", label=label)).inherited_from is None
    assert executor.ran == Counter({"full": 2})
