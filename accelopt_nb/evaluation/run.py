"""One job, now: the static check here, then the judge in a sandboxed process (or a warm worker).

:func:`run_job` is the bottom of every evaluation: no cache, no dedupe, no fan-out (those are the
evaluation service's, :mod:`.service`). It never raises for anything the kernel does; it raises
for infrastructure problems (an unknown problem, a missing toolchain), which concern every job.
"""
from __future__ import annotations

import os
import time
from typing import Any

from accelopt_nb.errors import (AccelOptError, BackendUnavailableError, ConfigError, EvaluationError,
                                KernelLoadError, KernelRejectedError, ProblemError)
from accelopt_nb.evaluation.job import EVALUATOR_VERSION, EvalJob, default_limits
from accelopt_nb.evaluation.result import EvalResult, Status
from accelopt_nb.evaluation.sandbox import SandboxLimits, run_sandboxed
from accelopt_nb.evaluation.static_check import check_kernel_source

__all__ = ["FILE_SIZE_MB", "INFRA_ERRORS", "crashed_result", "describe_exception", "input_cache_dir",
           "run_job", "skeleton_result"]

ENGINE_TARGET = "accelopt_nb.evaluation.engine:run_job_payload"
# Errors that are about the problem or the machine, not the job: they raise instead of becoming
# a kernel's status, wherever they happen (in the worker, where they cross as data, or here).
INFRA_ERRORS: tuple[type[AccelOptError], ...] = (ProblemError, EvaluationError, BackendUnavailableError,
                                                 ConfigError)
_INFRA_BY_NAME = {cls.__name__: cls for cls in INFRA_ERRORS}
# Largest file a worker may write: NTFF traces of real hardware runs are large.
FILE_SIZE_MB = {"simulator": 1024, "neuron": 16384}
JUDGE_MARGIN_S = 120.0


def run_job(job: EvalJob, worker: Any = None) -> EvalResult:
    """Run one job now (no cache): static check here, then the judge in a fresh sandboxed
    process, or in ``worker`` (a :class:`~accelopt_nb.evaluation.pool.WarmWorker`), which forks
    the kernel's runner. Never raises for anything the kernel does; raises for infrastructure
    problems (unknown problem, no toolchain)."""
    t0 = time.monotonic()
    early = static_verdict(job, t0)
    if early is not None:
        return early
    timeout_s, _ = default_limits(job.preset)
    timeout_s = job.options.timeout_s if job.options.timeout_s is not None else timeout_s
    # The judge's own backstop: the runner has timeout_s; computing inputs and references the
    # first time, and the checks, get as long again plus a margin.
    backstop_s = 2 * timeout_s + JUDGE_MARGIN_S
    payload = {"job": job.to_dict(), "input_cache": input_cache_dir()}
    if worker is not None:
        outcome = worker.run(ENGINE_TARGET, payload, backstop_s)
    else:
        outcome = run_sandboxed(ENGINE_TARGET, payload, SandboxLimits(
            timeout_s=backstop_s, memory_mb=None, file_size_mb=FILE_SIZE_MB.get(job.backend, 1024)))
    if outcome.kind == "ok":
        result = EvalResult.from_dict(outcome.value)
    elif outcome.kind == "error" and (outcome.error or {}).get("type") in _INFRA_BY_NAME:
        err = outcome.error or {}
        raise _INFRA_BY_NAME[err["type"]](err.get("message", ""))
    else:
        result = _outcome_failure(job, outcome, backstop_s)
    result.wall_time_s = time.monotonic() - t0
    result.label = job.label
    return result


def static_verdict(job: EvalJob, t0: float) -> EvalResult | None:
    """The result of a kernel the static check refuses or cannot load; None when it may run."""
    try:
        check_kernel_source(job.kernel_source, filename=job.options.kernel_filename)
    except KernelRejectedError as exc:
        return _early(job, Status.REJECTED, exc, f"rejected by the static check: {exc.message}", t0)
    except KernelLoadError as exc:
        return _early(job, Status.BUILD_FAILED, exc, f"kernel failed to load: {exc.message}", t0)
    return None


def _outcome_failure(job: EvalJob, outcome: Any, backstop_s: float) -> EvalResult:
    """The result of a judge process that did not answer: timeout, out of memory or crash."""
    result = skeleton_result(job)
    if outcome.kind == "timeout":
        result.status = Status.TIMEOUT
        result.message = f"the evaluation exceeded its wall-time limit of {backstop_s:g} s"
    elif outcome.kind == "out_of_memory":
        result.status = Status.OUT_OF_MEMORY
        result.message = "the evaluation ran out of memory"
    else:
        result.status = Status.CRASHED
        notes = f" ({'; '.join(outcome.notes)})" if outcome.notes else ""
        result.message = f"the evaluation process crashed: {outcome.describe()}{notes}"
    if outcome.error:
        result.error = {"type": outcome.error.get("type"), "message": outcome.error.get("message"),
                        "api": None, "file": job.options.kernel_filename, "line": None, "rule": None}
    tail = (outcome.error or {}).get("traceback") or outcome.stderr_tail
    if tail:
        result.log.append("[evaluator] worker output tail:\n" + tail[-2000:])
    return result


def input_cache_dir() -> str | None:
    """Where judges share inputs and references; ``ACCELOPT_INPUT_CACHE=0`` turns sharing off."""
    if os.environ.get("ACCELOPT_INPUT_CACHE", "1") == "0":
        return None
    from accelopt_nb.evaluation.datacache import default_input_cache_dir
    return str(default_input_cache_dir().resolve())


def skeleton_result(job: EvalJob) -> EvalResult:
    """A result of ``job`` with its identity filled in and no verdict yet (status ``crashed``)."""
    return EvalResult(status=Status.CRASHED, message="", problem=job.problem.name,
                      preset=job.preset if job.problem.kind == "nkibench" else "task",
                      backend=job.backend, hw=job.hw, kernel_sha256=job.kernel_sha256,
                      evaluator_version=EVALUATOR_VERSION, label=job.label, fidelity=job.fidelity)


def crashed_result(job: EvalJob, message: str, t0: float | None = None) -> EvalResult:
    """The ``crashed`` result of a job whose evaluation failed outside the kernel's verdict."""
    result = skeleton_result(job)
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


def _early(job: EvalJob, status: Status, exc: AccelOptError, message: str, t0: float) -> EvalResult:
    result = skeleton_result(job)
    result.status, result.message = status, message
    result.error = exc.to_dict() if hasattr(exc, "to_dict") else {"type": type(exc).__name__,
                                                                   "message": str(exc)}
    result.wall_time_s = time.monotonic() - t0
    return result
