"""Where evaluations run: a local pool, a Dask cluster spanning many machines, or right here.

Every evaluator is ``concurrent.futures``-style: ``submit(job) -> Future[EvalResult]``. In the pools
each job still runs in its own sandboxed process; a pool only decides how many run at once and where.

* :class:`LocalPoolEvaluator`: ``workers`` threads, each driving one warm worker process
  (:mod:`.pool`; default: one per CPU core) that forks a fresh runner per job. Neuron jobs lease
  a NeuronCore each (``NEURON_RT_VISIBLE_CORES`` is pinned per job), so on hardware use one worker
  per NeuronCore.
* :class:`DaskEvaluator`: ``distributed.Client(address).get_executor(...)``. A Trainium fleet runs
  one ``dask worker --resources "NeuronCore=N"`` per instance; neuron jobs ask for one
  ``NeuronCore`` and lease a concrete core on the worker they land on.
* :class:`SandboxEvaluator`: one job at a time, each in a fresh sandboxed process, in the
  submitting thread (``evaluate()`` of one kernel).
* :class:`InProcessEvaluator`: the judge and the kernel in this process, no sandbox: for trusted
  kernels only (the NKIBench baselines in ``accelopt bench``).

The evaluation service (:mod:`.service`) drives any of them: it adds the result cache, dedupe and
the fidelity rules, and turns a lost worker into that job's ``crashed`` result.
"""
from __future__ import annotations

import os
import queue
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Protocol, Sequence

from accelopt_nb.errors import ConfigError, EvaluationError
from accelopt_nb.evaluation.job import EvalJob
from accelopt_nb.evaluation.result import EvalResult
from accelopt_nb.evaluation.run import INFRA_ERRORS, crashed_result, describe_exception, run_job, static_verdict

NEURON_RESOURCE = "NeuronCore"


class Evaluator(Protocol):
    """Where jobs run: ``submit(job) -> Future[EvalResult]``; ``workers`` (optional) is how many
    run at once, when the evaluator knows it."""

    def submit(self, job: EvalJob) -> "Future[EvalResult]": ...
    def shutdown(self, wait: bool = True) -> None: ...


class CoreLeases:
    """A thread-safe pool of NeuronCore ids; ``with leases.lease() as core: ...``."""

    def __init__(self, cores: Sequence[int]) -> None:
        if not cores:
            raise ConfigError("no NeuronCores to lease")
        self._free: queue.Queue[int] = queue.Queue()
        for c in cores:
            self._free.put(int(c))
        self.cores = tuple(int(c) for c in cores)

    def acquire(self) -> int:
        return self._free.get()

    def release(self, core: int) -> None:
        self._free.put(core)


def _neuron_core_ids(cores: Sequence[int] | int | None) -> list[int]:
    if isinstance(cores, int):
        return list(range(cores))
    if cores is not None:
        return [int(c) for c in cores]
    from accelopt_nb.evaluation.backends.neuron import detect_neuron_cores
    n = detect_neuron_cores()
    if not n:
        raise EvaluationError("cannot tell how many NeuronCores this machine has: set "
                              "ACCELOPT_NEURON_CORES or pass neuron_cores=")
    return list(range(n))


def run_leased(job: EvalJob, leases: CoreLeases | None, worker: Any = None) -> EvalResult:
    """Run a job, pinning a neuron job to one leased NeuronCore."""
    if job.backend != "neuron" or leases is None:
        return run_job(job, worker)
    core = leases.acquire()
    try:
        return run_job(replace(job, visible_cores=str(core)), worker)
    finally:
        leases.release(core)


def run_guarded(job: EvalJob, leases: CoreLeases | None, worker: Any = None) -> EvalResult:
    """:func:`run_leased`, with any unexpected exception as this job's ``crashed`` result."""
    t0 = time.monotonic()
    try:
        return run_leased(job, leases, worker)
    except INFRA_ERRORS:
        raise
    except Exception as exc:  # noqa: BLE001 - one job's failure is one job's result
        return crashed_result(job, f"the evaluation failed: {describe_exception(exc)}", t0)


class LocalPoolEvaluator:
    """Evaluate jobs in parallel on this machine."""

    def __init__(self, workers: int | None = None, *,
                 neuron_cores: Sequence[int] | int | None = None, warm: bool = True) -> None:
        """``warm``: judge in long-lived pre-imported workers (default); False: a fresh sandboxed
        process per job (the v1 path, kept for comparison)."""
        self._neuron_cores = neuron_cores
        self.warm = warm
        self._idle: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._all: list[Any] = []
        if workers is None:
            workers = len(_neuron_core_ids(neuron_cores)) if neuron_cores is not None else (
                os.cpu_count() or 1)
        if workers < 1:
            raise ConfigError(f"workers must be at least 1 (got {workers})")
        self.workers = workers
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="accelopt-eval")
        self._leases: CoreLeases | None = None
        self._lock = threading.Lock()

    def _core_leases(self) -> CoreLeases:
        with self._lock:
            if self._leases is None:
                self._leases = CoreLeases(_neuron_core_ids(self._neuron_cores))
            return self._leases

    def submit(self, job: EvalJob) -> "Future[EvalResult]":
        leases = self._core_leases() if job.backend == "neuron" else None
        return self._pool.submit(self._run, job, leases)

    def _run(self, job: EvalJob, leases: CoreLeases | None) -> EvalResult:
        if not self.warm:
            return run_guarded(job, leases)
        try:
            worker = self._idle.get_nowait()
        except queue.Empty:
            worker = None
        try:
            if worker is None or not worker.alive:
                from accelopt_nb.evaluation.pool import WarmWorker
                worker = WarmWorker()
                with self._lock:
                    self._all.append(worker)
        except Exception as exc:  # noqa: BLE001 - a worker that cannot start fails this job only
            return crashed_result(job, f"could not start an evaluation worker: {exc}")
        try:
            return run_guarded(job, leases, worker)
        finally:
            if worker.alive:
                self._idle.put(worker)

    def map(self, jobs: Iterable[EvalJob]) -> Iterator[EvalResult]:
        futures = [self.submit(j) for j in jobs]
        for f in futures:
            yield f.result()

    def shutdown(self, wait: bool = True) -> None:
        self._pool.shutdown(wait=wait, cancel_futures=not wait)
        with self._lock:
            workers, self._all = self._all, []
        for w in workers:
            w.close()

    def __enter__(self) -> "LocalPoolEvaluator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()


# One lease pool per Dask worker process, shared by the tasks running on its threads.
_WORKER_LEASES: CoreLeases | None = None
_WORKER_LOCK = threading.Lock()


def run_job_on_dask_worker(job_dict: dict[str, Any]) -> EvalResult:
    """The function Dask runs remotely (module level, so it pickles by reference)."""
    global _WORKER_LEASES
    job = EvalJob.from_dict(job_dict)
    leases = None
    if job.backend == "neuron":
        with _WORKER_LOCK:
            if _WORKER_LEASES is None:
                _WORKER_LEASES = CoreLeases(_neuron_core_ids(None))
            leases = _WORKER_LEASES
    return run_guarded(job, leases)


class DaskEvaluator:
    """Evaluate jobs on a Dask cluster (``distributed`` must be installed: the ``dask`` extra)."""

    def __init__(self, scheduler: Any, *, resources: dict[str, float] | None = None) -> None:
        try:
            from distributed import Client
        except ImportError as exc:
            raise ConfigError("DaskEvaluator needs dask.distributed: pip install "
                              "'accelopt_nb[dask]'") from exc
        if isinstance(scheduler, Client):
            self.client, self._owns_client = scheduler, False
        else:
            self.client, self._owns_client = Client(scheduler), True
        self.resources = resources
        self._executors: dict[str, Any] = {}

    def _executor(self, backend: str) -> Any:
        if backend not in self._executors:
            resources = {NEURON_RESOURCE: 1} if backend == "neuron" else self.resources
            kwargs: dict[str, Any] = {"pure": False}
            if resources:
                kwargs["resources"] = resources
            self._executors[backend] = self.client.get_executor(**kwargs)
        return self._executors[backend]

    def submit(self, job: EvalJob) -> "Future[EvalResult]":
        return self._executor(job.backend).submit(run_job_on_dask_worker, job.to_dict())

    def shutdown(self, wait: bool = True) -> None:
        for ex in self._executors.values():
            ex.shutdown(wait=wait)
        self._executors.clear()
        if self._owns_client:
            self.client.close()

    def __enter__(self) -> "DaskEvaluator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()


def _settled(fn: Callable[[], EvalResult]) -> "Future[EvalResult]":
    """A finished future of ``fn()`` (its result, or the exception it raised)."""
    out: Future = Future()
    try:
        out.set_result(fn())
    except BaseException as exc:  # noqa: BLE001 - handed to whoever reads the future
        out.set_exception(exc)
    return out


class SandboxEvaluator:
    """Each job in a fresh sandboxed process, run at once in the submitting thread."""

    workers = 1

    def submit(self, job: EvalJob) -> "Future[EvalResult]":
        return _settled(lambda: run_job(job))

    def shutdown(self, wait: bool = True) -> None:
        pass


class InProcessEvaluator:
    """The judge and the kernel in this process, in the submitting thread: no sandbox, no limits.

    For trusted kernels only (the NKIBench baselines): a kernel that rebinds NumPy or never
    returns takes this process with it. The static check still runs first."""

    workers = 1

    def __init__(self, input_cache: str | Path | None = None) -> None:
        self.input_cache = input_cache

    def submit(self, job: EvalJob) -> "Future[EvalResult]":
        return _settled(lambda: self._judge(job))

    def _judge(self, job: EvalJob) -> EvalResult:
        from accelopt_nb.evaluation.engine import evaluate_job  # NumPy-heavy: only where a job runs here

        t0 = time.monotonic()
        early = static_verdict(job, t0)
        if early is not None:
            return early
        with tempfile.TemporaryDirectory(prefix="accelopt-inprocess-") as tmp:
            return evaluate_job(job, Path(tmp), input_cache=self.input_cache, isolated=False)

    def shutdown(self, wait: bool = True) -> None:
        pass
