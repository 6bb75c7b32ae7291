"""One job's failure is one job's result: the AST race, lost workers, Dask's KilledWorker."""
import gc
import sys
import threading
import time
from types import SimpleNamespace
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from accelopt_nb.evaluation import LocalPoolEvaluator, Status, evaluate_many, make_job
from accelopt_nb.evaluation.static_check import check_kernel_source

HOSTILE = Path(__file__).parent / "fixtures" / "hostile"
GOOD = (HOSTILE / "good_scale.py").read_text()
SCALE_TASK = HOSTILE / "scale_task.py"


class _Finalized:
    """Garbage whose finalizer runs Python code: a thread switch inside ``ast.parse``'s C code,
    which is what exposes CPython 3.11's per-interpreter AST recursion counter."""

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        time.sleep(0)


@pytest.mark.slow     # a stress test: 2000 parses on 8 threads with a 1 µs switch interval
def test_thousands_of_concurrent_static_checks_never_fail():
    source = GOOD + "\n".join(f"def f{i}(a):\n    return [[a + {i} for _ in range(3)] for _ in "
                              f"range(2)]" for i in range(4))

    def one(_):
        for _ in range(3):
            _Finalized()
        try:
            check_kernel_source(source)
        except SystemError as exc:
            return str(exc)
        return None

    old_interval, old_threshold = sys.getswitchinterval(), gc.get_threshold()
    sys.setswitchinterval(1e-6)
    gc.set_threshold(50, 1, 1)
    try:
        with ThreadPoolExecutor(8) as pool:
            errors = [e for e in pool.map(one, range(2000)) if e]
    finally:
        sys.setswitchinterval(old_interval)
        gc.set_threshold(*old_threshold)
    assert errors == []


class _FakeExecutor:
    """An executor at the system boundary: futures that fail the way Dask's do."""

    def __init__(self, exc_for: dict[str, BaseException]) -> None:
        self.exc_for = exc_for
        self.pool = LocalPoolEvaluator(workers=1)

    def submit(self, job):
        if job.label in self.exc_for:
            fut: Future = Future()
            fut.set_exception(self.exc_for[job.label])
            return fut
        return self.pool.submit(job)

    def shutdown(self, wait=True):
        self.pool.shutdown(wait)


def test_killed_worker_and_any_exception_become_that_jobs_crashed_result():
    distributed = pytest.importorskip("distributed")
    jobs = [make_job(SCALE_TASK, GOOD + f"\nX = {i}\n", label=f"k{i}") for i in range(3)]
    worker = SimpleNamespace(address="tcp://127.0.0.1:1")
    ex = _FakeExecutor({"k0": distributed.KilledWorker("task-k0", worker, 3),
                        "k1": RuntimeError("the worker's disk is full")})
    try:
        results = {r.label: r for r in evaluate_many(jobs, ex, progress=False, cache=False)}
    finally:
        ex.shutdown()
    assert results["k0"].status is Status.CRASHED and "KilledWorker" in results["k0"].message
    assert results["k1"].status is Status.CRASHED and "disk is full" in results["k1"].message
    assert results["k2"].status is Status.CORRECT


def test_a_worker_that_dies_is_that_jobs_result_and_is_replaced(tmp_path):
    # The task (trusted code, run by the judge) kills the judge's own process for one input.
    task = tmp_path / "dying_task.py"
    task.write_text(SCALE_TASK.read_text() + "\n\nimport os as _os\n_real_forward = forward\n\n"
                    "def forward(x):\n    if float(x.flat[0]) == 7.0:\n        _os._exit(3)\n"
                    "    return _real_forward(x)\n")
    good_task = make_job(SCALE_TASK, GOOD, label="ok-before")
    with LocalPoolEvaluator(workers=1) as pool:
        first = pool.submit(good_task).result()
        # make the dying task's seed inputs start with 7.0: its own get_inputs is replaced too
        task.write_text(task.read_text() + "\n_real_get = get_inputs\n\ndef get_inputs():\n"
                        "    x = _real_get()[0]\n    x.flat[0] = 7.0\n    return [x]\n")
        dying = make_job(task, GOOD, label="dies")
        died = pool.submit(dying).result()
        after = pool.submit(make_job(SCALE_TASK, GOOD + "\n# again\n", label="ok-after")).result()
    assert first.status is Status.CORRECT
    assert died.status is Status.CRASHED, died.summary()
    assert "exited with status 3" in died.message and "worker died" in died.message
    assert after.status is Status.CORRECT


def test_static_checks_from_many_threads_of_a_pool_agree():
    """The pool's threads run the static check concurrently: same verdicts as one at a time."""
    sources = [GOOD, "import os\n", "def kernel(:\n"] * 30
    with ThreadPoolExecutor(8) as pool:
        verdicts = list(pool.map(_verdict, sources))
    assert verdicts == [_verdict(s) for s in sources]


def _verdict(source: str) -> str:
    try:
        check_kernel_source(source)
        return "ok"
    except Exception as exc:  # noqa: BLE001
        return type(exc).__name__


def test_threads_are_not_left_behind():
    before = threading.active_count()
    with LocalPoolEvaluator(workers=2) as pool:
        pool.submit(make_job(SCALE_TASK, GOOD, label="x")).result()
    assert threading.active_count() <= before + 1
