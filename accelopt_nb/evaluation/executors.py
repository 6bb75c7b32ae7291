"""Evaluate many kernels at once: a local pool, or a Dask cluster spanning many machines.

Both evaluators are ``concurrent.futures``-style: ``submit(job) -> Future[EvalResult]``. Each job
still runs in its own sandboxed process; the pool only decides how many run at once and where.

* :class:`LocalPoolEvaluator`: ``workers`` threads, each driving one warm worker process
  (:mod:`.pool`; default: one per CPU core) that forks a fresh runner per job. Neuron jobs lease
  a NeuronCore each (``NEURON_RT_VISIBLE_CORES`` is pinned per job), so on hardware use one worker
  per NeuronCore.
* :class:`DaskEvaluator`: ``distributed.Client(address).get_executor(...)``. A Trainium fleet runs
  one ``dask worker --resources "NeuronCore=N"`` per instance; neuron jobs ask for one
  ``NeuronCore`` and lease a concrete core on the worker they land on.

:func:`evaluate_many` drives either, serves cache hits first and yields results as they arrive,
with a tqdm progress bar. Jobs whose kernels have the same normalised AST (comments, docstrings
and formatting aside) are evaluated once per batch.

One job's failure is one job's result: any exception while running a job, a worker that dies and
Dask's ``KilledWorker`` become that job's ``crashed`` result; the rest of the batch completes.
Infrastructure errors that concern every job (an unknown problem) still raise.
"""
from __future__ import annotations

import ast
import hashlib
import os
import queue
import threading
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import replace
from typing import Any, Iterable, Iterator, Protocol, Sequence

from accelopt_nb.errors import BackendUnavailableError, ConfigError, EvaluationError, ProblemError
from accelopt_nb.evaluation.api import _skeleton, open_cache, run_job
from accelopt_nb.evaluation.job import EvalJob
from accelopt_nb.evaluation.result import EvalResult, Status
from accelopt_nb.evaluation.static_check import parse_source

NEURON_RESOURCE = "NeuronCore"


class Evaluator(Protocol):
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


# Errors that are about the problem or the machine, not the job: they still raise.
INFRA_ERRORS = (ProblemError, BackendUnavailableError, ConfigError)


def crashed_result(job: EvalJob, message: str, t0: float | None = None) -> EvalResult:
    """The ``crashed`` result of a job whose evaluation failed outside the kernel's verdict."""
    result = _skeleton(job)
    result.status, result.message = Status.CRASHED, message[:2000]
    result.wall_time_s = time.monotonic() - t0 if t0 is not None else 0.0
    return result


def describe_exception(exc: BaseException) -> str:
    """``Type: message``, even for exceptions whose ``__str__`` itself fails."""
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 - e.g. a KilledWorker built with a plain address
        text = repr(getattr(exc, "args", ()))
    return f"{type(exc).__name__}: {text}"


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


def normalized_source_key(source: str) -> str:
    """Hash of the kernel's AST without docstrings: comments, docstrings and formatting aside,
    two kernels with the same key are the same program. Unparsable sources key on their text."""
    try:
        tree = parse_source(source)
    except (SyntaxError, ValueError):
        return "text:" + hashlib.sha256(source.encode()).hexdigest()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return "ast:" + hashlib.sha256(ast.dump(tree, annotate_fields=False).encode()).hexdigest()


def _dedupe_key(job: EvalJob) -> str:
    blank = replace(job, kernel_source="", label=None)
    return f"{normalized_source_key(job.kernel_source)}|{blank.cache_key()}"


def evaluate_many(jobs: Iterable[EvalJob], executor: Evaluator | None = None, *,
                  progress: bool = True, cache: Any = True, dedupe: bool = True
                  ) -> Iterator[EvalResult]:
    """Evaluate jobs in parallel, yielding each result as it arrives (cache hits first).

    Each result's ``label`` is its job's label (the job's position when it has none). Without an
    ``executor`` a :class:`LocalPoolEvaluator` with one worker per core is used and shut down.
    ``dedupe``: evaluate kernels with the same normalised AST once; the others get a copy of the
    result (with their own label and kernel hash, and a note in the log)."""
    from tqdm.auto import tqdm

    jobs = [j if j.label is not None else replace(j, label=str(i)) for i, j in enumerate(jobs)]
    store = open_cache(cache)
    own = executor is None
    bar = tqdm(total=len(jobs), desc="evaluating", unit="kernel", disable=not progress)
    counts: Counter[str] = Counter()
    futures: dict[Future, EvalJob] = {}
    twins: dict[str, list[EvalJob]] = {}

    def done(job: EvalJob, result: EvalResult) -> EvalResult:
        result.label = job.label
        if store is not None and not result.cached:
            store.put(job, result)
        counts[result.status.value] += 1
        bar.update(1)
        bar.set_postfix(counts, refresh=False)
        return result

    try:
        pending = []
        leaders: dict[str, EvalJob] = {}
        for job in jobs:
            hit = store.get(job) if store is not None else None
            if hit is not None:
                yield done(job, hit)
                continue
            key = _dedupe_key(job) if dedupe else job.label or ""
            if key in leaders:
                twins.setdefault(leaders[key].label or "", []).append(job)
            else:
                leaders[key] = job
                pending.append(job)
        if pending and executor is None:
            executor = LocalPoolEvaluator()
        for job in pending:
            futures[executor.submit(job)] = job
        for fut in as_completed(futures):
            job = futures[fut]
            try:
                result = fut.result()
            except INFRA_ERRORS:
                raise
            except Exception as exc:  # noqa: BLE001 - lost worker, KilledWorker, ...
                result = crashed_result(job, f"the evaluation was lost: {describe_exception(exc)}")
            yield done(job, result)
            for twin in twins.pop(job.label or "", []):
                copy = EvalResult.from_dict(result.to_dict())
                copy.kernel_sha256 = twin.kernel_sha256
                copy.log.append(f"[evaluator] same normalised kernel as job {job.label!r}: "
                                f"evaluated once")
                yield done(twin, copy)
    finally:
        for fut in futures:
            fut.cancel()
        bar.close()
        if own and executor is not None:
            executor.shutdown(wait=True)
