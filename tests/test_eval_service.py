"""The evaluation service's own rules (cache, dedupe, lost workers, confirmation), with a FAKE executor.

The executor is the service's boundary: here it answers from a table instead of running a judge
(and holds its answers until released, to test what happens while a job is in flight), so these
tests check what the service decides, not what the judge decides."""
from __future__ import annotations

import threading
from concurrent.futures import Future
from pathlib import Path

import pytest

from accelopt_nb.errors import ProblemError
from accelopt_nb.evaluation import EvalCache, EvalResult, Status, make_job
from accelopt_nb.evaluation.service import EvalService, evaluate_many

SCALE_TASK = Path(__file__).parent / "fixtures" / "hostile" / "scale_task.py"
SRC = "import neuronxcc.nki as nki\n\n@nki.jit\ndef kernel(x):\n    return x\n"


class FakeExecutor:
    """FAKE: records submitted jobs; each answer is a made-up result (or an exception) by label."""

    workers = 2

    def __init__(self, answers: dict | None = None, hold: bool = False) -> None:
        self.answers = answers or {}
        self.jobs = []
        self.pending: list[tuple[Future, object]] = []
        self.hold = hold
        self.lock = threading.Lock()

    def submit(self, job):
        fut: Future = Future()
        answer = self.answers.get(job.label, Status.CORRECT)
        with self.lock:
            self.jobs.append(job)
        if self.hold:
            self.pending.append((fut, (job, answer)))
        else:
            _settle(fut, job, answer)
        return fut

    def release(self):
        for fut, (job, answer) in self.pending:
            _settle(fut, job, answer)
        self.pending.clear()

    def shutdown(self, wait=True):
        pass


def _settle(fut, job, answer):
    if isinstance(answer, BaseException):
        fut.set_exception(answer)
        return
    fut.set_result(EvalResult(status=answer, message=str(answer), problem="scale", preset=job.preset,
                              backend=job.backend, hw=job.hw, kernel_sha256=job.kernel_sha256,
                              evaluator_version="fake", latency_ms=1.0, fidelity=job.fidelity,
                              profile={"latency_ms": 1.0, "from": job.fidelity} if job.options.profile else None))


def job(label, source=SRC, **kw):
    return make_job(SCALE_TASK, source, label=label, **kw)


def test_a_twin_in_flight_waits_for_its_leader_and_gets_a_labelled_copy():
    fake = FakeExecutor(hold=True)
    service = EvalService(fake, cache=False)
    lead = service.submit(job("a"))
    twin = service.submit(job("b", SRC.replace("return x", "return (x)  # same program")))
    other = service.submit(job("c", SRC.replace("return x", "return x + 0")))
    assert [j.label for j in fake.jobs] == ["a", "c"] and service.in_flight == 2
    assert not twin.done()
    fake.release()
    a, b = lead.result(), twin.result()
    assert a.status is b.status is Status.CORRECT and b.label == "b" and a.label == "a"
    assert b.kernel_sha256 != a.kernel_sha256 and "evaluated once" in b.log[-1]
    assert other.result().label == "c" and service.in_flight == 0


def test_a_lost_job_is_its_crashed_result_and_an_infrastructure_error_reaches_the_caller():
    fake = FakeExecutor({"lost": RuntimeError("worker died"), "broken": ProblemError("no such task")})
    service = EvalService(fake, cache=False, dedupe=False)
    lost = service.submit(job("lost")).result()
    assert lost.status is Status.CRASHED and "worker died" in lost.message and lost.label == "lost"
    with pytest.raises(ProblemError):
        service.submit(job("broken", SRC + "\n# 2\n")).result()


def test_a_transient_verdict_is_not_copied_to_the_next_twin():
    fake = FakeExecutor({"a": Status.TIMEOUT})
    service = EvalService(fake, cache=False)
    assert service.evaluate(job("a")).status is Status.TIMEOUT
    assert service.evaluate(job("b")).status is Status.CORRECT    # evaluated again, not copied
    assert [j.label for j in fake.jobs] == ["a", "b"]


def test_cache_hits_are_answered_without_the_executor(tmp_path):
    cache = EvalCache(tmp_path)
    EvalService(FakeExecutor(), cache=cache).evaluate(job("a"))
    fake = FakeExecutor()
    again = EvalService(fake, cache=cache).evaluate(job("z"))
    assert again.cached and again.label == "z" and fake.jobs == []
    batch = [job("z"), job("new", SRC.replace("return x", "return x * 1"))]
    results = list(evaluate_many(batch, FakeExecutor(), progress=False, cache=cache))
    assert [r.cached for r in results] == [True, False]


def test_a_confirmation_keeps_an_exact_screening_profile_and_checks_correctness_only():
    fake = FakeExecutor()
    service = EvalService(fake, cache=False)
    screened = {"latency_ms": 0.5, "from": "screen"}
    r = service.confirm(job("k", fidelity="screen"), latency_ms=0.5, profile=screened).result()
    sent = fake.jobs[-1]
    assert sent.fidelity == "confirm" and sent.options.profile is False
    assert r.latency_ms == 0.5 and r.profile == screened and "from this kernel's screening" in r.log[-1]
    # without a screening profile (or on a backend that measures) the confirmation profiles itself
    r2 = service.confirm(job("k2", SRC + "\n# 2\n", fidelity="screen")).result()
    assert fake.jobs[-1].options.profile is True and r2.profile["from"] == "confirm"
