"""The evaluation service: the one way kernels get evaluated, for bench, search, magics and experiments.

``EvalService(executor, cache=, dedupe=).submit(job) -> Future[EvalResult]``. What every caller
would otherwise do again lives here once:

* **the result cache** (:mod:`.cache`): a hit is answered at once, a new result is stored;
* **dedupe**: a kernel with the same normalised syntax tree as one already submitted (comments,
  docstrings and formatting aside) under the same settings is evaluated once; the others get a
  copy of its result, with their own label and kernel hash and a note in the log;
* **one evaluation per program** (``programs=True``; the search turns it on): before a screen or a full
  check, a cheap ``identify`` job hashes the program the kernel runs (:func:`accelopt_nb.sim.program_fingerprint`:
  every NKI call with its exact operands, a trace-only run). A kernel whose program equals one already
  evaluated under the same settings gets that kernel's verdict, marked ``inherited_from`` its label, instead of
  its own evaluation: a full check (or confirmation) when the program at the job's shape is equal, a screen when
  the program at the small shape and the instruction stream at the job's shape (its latency) are equal. A
  kernel without a program hash (value-dependent addressing, exception handlers, ...) is evaluated itself;
* **the fidelity rules**: :meth:`EvalService.confirm` checks a screened kernel at full fidelity,
  and, where the backend's trace-only profile is exact, keeps the screening's latency and profile;
* **failure containment**: a lost worker (or Dask's ``KilledWorker``) is that job's ``crashed``
  result; only infrastructure errors that concern every job (an unknown problem, no toolchain)
  reach the caller, through the future.

Where jobs run is the executor's business (:mod:`.executors`): a local pool of warm workers
(the default), a Dask cluster, one sandbox per call, or this process. :func:`evaluate_many` is
a batch over one service, yielding results as they arrive.
"""
from __future__ import annotations

import ast
import hashlib
import threading
from collections import Counter
from concurrent.futures import Future, as_completed
from dataclasses import replace
from typing import Any, Iterable, Iterator

from accelopt_nb.evaluation.backends import exact_trace_profile
from accelopt_nb.evaluation.cache import EvalCache, open_cache
from accelopt_nb.evaluation.executors import Evaluator, LocalPoolEvaluator
from accelopt_nb.evaluation.job import EvalJob
from accelopt_nb.evaluation.result import TRANSIENT_STATUSES, EvalResult, Status
from accelopt_nb.evaluation.run import INFRA_ERRORS, crashed_result, describe_exception
from accelopt_nb.evaluation.static_check import parse_source

__all__ = ["EvalService", "dedupe_key", "evaluate_many", "normalized_source_key"]


class EvalService:
    """Cache, dedupe and fidelity over an executor (see the module docstring).

    ``executor``: where jobs run (default: a :class:`LocalPoolEvaluator` with ``workers``
    workers, made on the first job that is not a cache hit, and shut down by :meth:`close`).
    ``cache``: True (the default directory), False/None, a directory or an :class:`EvalCache`.
    """

    def __init__(self, executor: Evaluator | None = None, *, cache: Any = True, dedupe: bool = True,
                 workers: int | None = None, programs: bool = False) -> None:
        self._executor = executor
        self._owned: Evaluator | None = None
        self._workers = workers
        self.cache: EvalCache | None = open_cache(cache)
        self.dedupe = dedupe
        self._lock = threading.Lock()
        self._leaders: dict[str, tuple[str | None, Future]] = {}  # dedupe key -> (label, its future)
        self._running: set[Future] = set()                         # the executor's futures not done
        self.programs = programs
        self._programs: dict[str, tuple[str | None, Future]] = {}  # program key -> (label, its verdict's future)

    @property
    def executor(self) -> Evaluator:
        if self._executor is None:
            self._executor = self._owned = LocalPoolEvaluator(self._workers)
        return self._executor

    @property
    def in_flight(self) -> int:
        """Jobs the executor is running or holds (cache hits and twins' copies are not jobs)."""
        with self._lock:
            return len(self._running)

    @property
    def capacity(self) -> int | None:
        """How many evaluations run at once (None: unknown, e.g. a Dask cluster)."""
        workers = getattr(self.executor, "workers", None)
        return workers if isinstance(workers, int) and workers > 0 else None

    # ------------------------------------------------------------------ submitting
    def submit(self, job: EvalJob) -> "Future[EvalResult]":
        """A future of ``job``'s result: from the cache, from a twin, or evaluated now."""
        hit = self.cache.get(job) if self.cache is not None else None
        if not self.dedupe:
            return _finished(hit) if hit is not None else self._run(job)
        key = dedupe_key(job)
        with self._lock:
            lead = self._leaders.get(key)
            if lead is None:  # the first of its kind: its twins wait on this slot
                slot: Future = Future()
                self._leaders[key] = (job.label, slot)
        if lead is not None:
            return _finished(hit) if hit is not None else self._twin_of(lead[1], job, lead[0])
        if hit is not None:
            self._lead_program(job, hit)
        # outside the lock: an executor may run the job right here, in this thread
        _then(_finished(hit) if hit is not None else self._run_by_program(job), lambda r: r, into=slot)
        slot.add_done_callback(lambda f: self._forget_if_transient(key, f))
        return slot

    def evaluate(self, job: EvalJob) -> EvalResult:
        """``submit(job).result()``."""
        return self.submit(job).result()

    def confirm(self, job: EvalJob, *, latency_ms: float | None = None,
                profile: dict[str, Any] | None = None) -> "Future[EvalResult]":
        """Check a screened kernel at full fidelity (``job`` as screened; its fidelity becomes ``confirm``).

        Where the backend's trace-only profile is exact (the simulator: the same instruction
        stream as a run with values) and the screening profiled the kernel at the job's shape
        (``latency_ms`` and ``profile`` given), only correctness is checked: the latency and
        profile are the screening's."""
        job = replace(job, fidelity="confirm")
        if latency_ms is None or not profile or not exact_trace_profile(job.backend):
            return self.submit(job)
        inner = self.submit(replace(job, options=replace(job.options, profile=False)))
        return _then(inner, lambda r: _with_screening(r, latency_ms, profile, job.preset))

    # ------------------------------------------------------------------ one evaluation per program
    def _identity_fidelity(self, job: EvalJob) -> str | None:
        if not self.programs or not exact_trace_profile(job.backend):
            return None
        return {"full": "identify", "confirm": "identify", "screen": "identify_screen"}.get(job.fidelity)

    def _identify(self, job: EvalJob, fidelity: str) -> "Future[EvalResult]":
        ident = replace(job, fidelity=fidelity)
        hit = self.cache.get(ident) if self.cache is not None else None
        return _finished(hit) if hit is not None else self._run(ident)

    @staticmethod
    def _program_key(job: EvalJob, identity: dict[str, Any] | None) -> str | None:
        """Jobs with equal keys have the same verdict: the same program (and, for a screen, the same
        instruction stream at the job's shape) under the same settings. A full check and a confirmation
        check the same inputs at the same shape: one key."""
        if not identity or not identity.get("program"):
            return None
        checks = "full" if job.fidelity in ("full", "confirm") else job.fidelity
        blank = replace(job, kernel_source="", label=None, fidelity=checks,
                        options=replace(job.options, profile=True))
        return f"{identity['program']}|{identity.get('preset')}|{identity.get('stream')}|{blank.cache_key()}"

    def _run_by_program(self, job: EvalJob) -> "Future[EvalResult]":
        """Run ``job``, or inherit the verdict of an earlier kernel with the same program."""
        fidelity = self._identity_fidelity(job)
        if fidelity is None:
            return self._run(job)
        out: Future = Future()

        def decide(ident: Future) -> None:
            result = None if ident.cancelled() or ident.exception() is not None else ident.result()
            key = self._program_key(job, result.identity if result is not None else None)
            lead = None
            if key is not None:
                with self._lock:
                    lead = self._programs.get(key)
                    if lead is None:
                        self._programs[key] = (job.label, out)
                        out.add_done_callback(lambda f: self._forget_program_if_transient(key, f))
            if lead is None:
                _then(self._run(job), lambda r: r, into=out)
            else:
                at = result.identity.get("preset")
                lead[1].add_done_callback(lambda f: self._inherit(f, job, lead[0], at, out))
        self._identify(job, fidelity).add_done_callback(decide)
        return out

    def _inherit(self, leader: Future, job: EvalJob, leader_label: str | None, at: str | None, out: Future) -> None:
        """``out`` gets the leader's verdict as ``job``'s, or ``job``'s own where the leader's cannot stand for it:
        lost, transient, not checked at the shape ``at`` where the two programs are equal (a screen that could
        not run at the small shape was checked at the job's), or an error that points at the leader's lines."""
        result = None if leader.cancelled() or leader.exception() is not None else leader.result()
        located = result is not None and (result.error is not None or any(c.error for c in result.checks))
        if result is None or result.status in TRANSIENT_STATUSES or result.checked_preset != at or located:
            _then(self._run(job), lambda r: r, into=out)
            return
        heir = EvalResult.from_dict(result.to_dict())
        heir.kernel_sha256, heir.fidelity, heir.cached, heir.wall_time_s = job.kernel_sha256, job.fidelity, False, 0.0
        heir.inherited_from = leader_label
        heir.log.append(f"[evaluator] the same program as {leader_label!r}: its verdict, not evaluated again")
        try:
            out.set_result(self._store(job, heir))
        except BaseException as err:  # noqa: BLE001 - the future must settle
            out.set_exception(err)

    def _lead_program(self, job: EvalJob, result: EvalResult) -> None:
        """A cached verdict leads its program too (the baseline, evaluated before the run opened). Identified
        now, before the hit is answered, so whether a later kernel inherits it never depends on timing."""
        fidelity = self._identity_fidelity(job)
        if fidelity is None or result.status in TRANSIENT_STATUSES or result.inherited_from is not None:
            return
        try:
            found = self._identify(job, fidelity).result()
        except BaseException:  # noqa: BLE001 - no identity: the hit leads nothing
            found = None
        key = self._program_key(job, found.identity if found is not None else None)
        if key is not None:
            with self._lock:
                self._programs.setdefault(key, (job.label, _finished(result)))

    def _forget_program_if_transient(self, key: str, fut: Future) -> None:
        if fut.cancelled() or fut.exception() is not None or fut.result().status in TRANSIENT_STATUSES:
            with self._lock:
                if self._programs.get(key, (None, None))[1] is fut:
                    del self._programs[key]

    def _run(self, job: EvalJob) -> "Future[EvalResult]":
        inner = self.executor.submit(job)
        with self._lock:
            self._running.add(inner)
        inner.add_done_callback(self._done_running)
        return _then(inner, lambda r: self._store(job, r), lost=lambda exc: crashed_result(
            job, f"the evaluation was lost: {describe_exception(exc)}"))

    def _store(self, job: EvalJob, result: EvalResult) -> EvalResult:
        result.label = job.label
        if self.cache is not None and not result.cached:
            self.cache.put(job, result)
        return result

    def _twin_of(self, leader: Future, job: EvalJob, leader_label: str | None) -> "Future[EvalResult]":
        def copy(result: EvalResult) -> EvalResult:
            twin = EvalResult.from_dict(result.to_dict())
            twin.kernel_sha256 = job.kernel_sha256
            twin.log.append(f"[evaluator] same normalised kernel as {leader_label!r}: evaluated once")
            return self._store(job, twin)
        return _then(leader, copy)

    def _forget_if_transient(self, key: str, fut: Future) -> None:
        """A timeout or crash may not happen again: the next twin is evaluated, not copied."""
        if fut.exception() is not None or fut.result().status in TRANSIENT_STATUSES:
            with self._lock:
                if self._leaders.get(key, (None, None))[1] is fut:
                    del self._leaders[key]

    def _done_running(self, fut: Future) -> None:
        with self._lock:
            self._running.discard(fut)

    # ------------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Cancel the evaluations not started yet and shut down the executor made here."""
        with self._lock:
            running, self._running = list(self._running), set()
        for fut in running:
            fut.cancel()
        if self._owned is not None:
            self._owned.shutdown(wait=True)
            self._owned = self._executor = None

    def __enter__(self) -> "EvalService":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def evaluate_many(jobs: Iterable[EvalJob], executor: Evaluator | None = None, *,
                  progress: bool = True, cache: Any = True, dedupe: bool = True) -> Iterator[EvalResult]:
    """Evaluate jobs in parallel, yielding each result as it arrives (cache hits first, in job order).

    Each result's ``label`` is its job's label (the job's position when it has none). Without an
    ``executor`` a :class:`LocalPoolEvaluator` with one worker per core is used and shut down.
    ``dedupe``: evaluate kernels with the same normalised syntax tree once (see :class:`EvalService`)."""
    from tqdm.auto import tqdm

    jobs = [j if j.label is not None else replace(j, label=str(i)) for i, j in enumerate(jobs)]
    service = EvalService(executor, cache=cache, dedupe=dedupe)
    bar = tqdm(total=len(jobs), desc="evaluating", unit="kernel", disable=not progress)
    counts: Counter[str] = Counter()

    def tally(result: EvalResult) -> EvalResult:
        counts[result.status.value] += 1
        bar.update(1)
        bar.set_postfix(counts, refresh=False)
        return result

    try:
        futures = [service.submit(job) for job in jobs]
        ready = [f for f in futures if f.done()]
        for fut in ready:
            yield tally(fut.result())
        for fut in as_completed(set(futures) - set(ready)):
            yield tally(fut.result())
    finally:
        bar.close()
        service.close()


# ---------------------------------------------------------------------- dedupe keys
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


def dedupe_key(job: EvalJob) -> str:
    """Jobs with equal keys have the same verdict: the same program under the same settings."""
    blank = replace(job, kernel_source="", label=None)
    return f"{normalized_source_key(job.kernel_source)}|{blank.cache_key()}"


# ---------------------------------------------------------------------- futures
def _finished(result: EvalResult) -> "Future[EvalResult]":
    out: Future = Future()
    out.set_result(result)
    return out


def _then(inner: Future, fn: Any, *, lost: Any = None, into: Future | None = None) -> "Future[EvalResult]":
    """A future (``into``, or a new one) of ``fn(inner's result)``. An infrastructure error passes
    through; any other exception becomes ``lost(exc)`` where given, else passes through too."""
    out: Future = into if into is not None else Future()

    def settle(f: Future) -> None:
        if f.cancelled():
            out.cancel()
            return
        exc = f.exception()
        try:
            if exc is None:
                out.set_result(fn(f.result()))
            elif lost is not None and not isinstance(exc, INFRA_ERRORS):
                out.set_result(lost(exc))
            else:
                out.set_exception(exc)
        except BaseException as err:  # noqa: BLE001 - a failing callback must still settle the future
            out.set_exception(err)
    inner.add_done_callback(settle)
    return out


def _with_screening(result: EvalResult, latency_ms: float, profile: dict[str, Any], preset: str) -> EvalResult:
    if result.status in (Status.CORRECT, Status.CHEAT):
        result.latency_ms, result.profile = latency_ms, dict(profile)
        result.log.append(f"[evaluator] latency and profile from this kernel's screening (a trace-only run at "
                          f"the {preset} shape; the same instruction stream)")
    return result
