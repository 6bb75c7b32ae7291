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


class SameProgram:
    """FAKE executor: every kernel has one program; the verdicts are made up (status, error) by label."""

    workers = 1

    def __init__(self, verdicts: dict) -> None:
        self.verdicts, self.ran = verdicts, Counter()

    def submit(self, job):
        from concurrent.futures import Future

        from accelopt_nb.evaluation import EvalResult
        self.ran[job.fidelity] += 1
        fut: Future = Future()
        status, error = (Status.PROFILED, None) if job.fidelity.startswith("identify") else self.verdicts[job.label]
        fut.set_result(EvalResult(status=status, message=str(status), problem="silu", preset=job.preset,
                                  backend=job.backend, hw=job.hw, kernel_sha256=job.kernel_sha256,
                                  evaluator_version="fake", fidelity=job.fidelity, checked_preset=job.preset,
                                  error=error, identity={"program": "p", "preset": job.preset, "why": ""}))
        return fut

    def shutdown(self, wait=True):
        pass


@pytest.mark.parametrize("status, error", [
    (Status.TIMEOUT, None),                                   # may not happen again
    (Status.INCORRECT, {"type": "UninitializedReadError", "line": 12}),   # points at the leader's lines
])
def test_a_transient_or_located_verdict_is_not_inherited(status, error):
    executor = SameProgram({"a": (status, error), "b": (Status.CORRECT, None)})
    with EvalService(executor, cache=False, programs=True) as service:
        first = service.evaluate(make_job("silu", KERNELS["base"], preset="small", label="a"))
        second = service.evaluate(make_job("silu", KERNELS["renamed"], preset="small", label="b"))
    assert first.status is status and second.status is Status.CORRECT and second.inherited_from is None
    assert executor.ran["full"] == 2


def test_a_plain_verdict_of_the_same_program_is_inherited():
    executor = SameProgram({"a": (Status.INCORRECT, None)})
    with EvalService(executor, cache=False, programs=True) as service:
        service.evaluate(make_job("silu", KERNELS["base"], preset="small", label="a"))
        heir = service.evaluate(make_job("silu", KERNELS["renamed"], preset="small", label="b"))
    assert heir.status is Status.INCORRECT and heir.inherited_from == "a" and executor.ran["full"] == 1
