"""The evaluation API: ``evaluate(problem, kernel_source, backend=, hw=, preset=) -> EvalResult``.

Every evaluation goes the same way: static check in the caller (cheap, no process), then the
engine in a sandboxed worker process, then the sandbox's outcome is turned into a status. Results
are cached on disk by kernel hash, problem, preset, backend, hardware and evaluator version.
"""
from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from accelopt_nb.errors import (AccelOptError, BackendUnavailableError, ConfigError,
                                EvaluationError, KernelLoadError, KernelRejectedError, ProblemError)
from accelopt_nb.evaluation.backends import backend_names
from accelopt_nb.evaluation.cache import EvalCache
from accelopt_nb.evaluation.job import (EVALUATOR_VERSION, FIDELITIES, EvalJob,
                                        EvalOptions, Fidelity, default_limits)
from accelopt_nb.evaluation.problems import resolve_problem
from accelopt_nb.evaluation.result import EvalResult, Status
from accelopt_nb.evaluation.sandbox import SandboxLimits, run_sandboxed
from accelopt_nb.evaluation.static_check import check_kernel_source
from accelopt_nb.perf.hardware import presets as hardware_names

ENGINE_TARGET = "accelopt_nb.evaluation.engine:run_job_payload"
# Errors raised inside the worker that are the evaluator's or the task's fault, not the kernel's:
# re-raised in the caller instead of being reported as a kernel status.
_INFRA_ERRORS: dict[str, type[AccelOptError]] = {
    "ProblemError": ProblemError, "EvaluationError": EvaluationError,
    "BackendUnavailableError": BackendUnavailableError, "ConfigError": ConfigError,
}
# Largest file a worker may write: NTFF traces of real hardware runs are large.
FILE_SIZE_MB = {"simulator": 1024, "neuron": 16384}
JUDGE_MARGIN_S = 120.0


def make_job(problem_or_task: Any, kernel_source: str, *, backend: str = "simulator",
             hw: str = "trn1", preset: str = "small", options: EvalOptions | None = None,
             label: str | None = None, fidelity: Fidelity = "full") -> EvalJob:
    """Validate the arguments and build a job (resolving the problem in the caller)."""
    if fidelity not in FIDELITIES:
        raise ConfigError(f"unknown fidelity {fidelity!r}; choose one of {', '.join(FIDELITIES)}")
    if backend not in backend_names():
        raise ConfigError(f"unknown backend {backend!r}; choose one of {', '.join(backend_names())}")
    if hw not in hardware_names():
        raise ConfigError(f"unknown hardware {hw!r}; choose one of {', '.join(hardware_names())}")
    if options is not None and not options.seeds:
        raise ConfigError("EvalOptions.seeds is empty: correctness needs at least one seed")
    if not isinstance(kernel_source, str):
        raise ConfigError("kernel_source must be the kernel's Python source text (a str); "
                          "use evaluate_task_file() for a kernel file")
    return EvalJob(problem=resolve_problem(problem_or_task, preset), kernel_source=kernel_source,
                   backend=backend, hw=hw, preset=preset, options=options or EvalOptions(),
                   label=label, fidelity=fidelity)


def evaluate(problem_or_task: Any, kernel_source: str, *, backend: str = "simulator",
             hw: str = "trn1", preset: str = "small", options: EvalOptions | None = None,
             cache: Any = True, label: str | None = None,
             fidelity: Fidelity = "full") -> EvalResult:
    """Evaluate one kernel at a fidelity level (``full``, ``screen`` or ``confirm``).

    ``problem_or_task``: an NKIBench problem name, a task file path or a loaded TaskModule.
    ``cache``: True (the default cache directory), False/None (no cache), a directory or an
    :class:`EvalCache`."""
    job = make_job(problem_or_task, kernel_source, backend=backend, hw=hw, preset=preset,
                   options=options, label=label, fidelity=fidelity)
    store = open_cache(cache)
    if store is not None:
        hit = store.get(job)
        if hit is not None:
            return hit
    result = run_job(job)
    if store is not None:
        store.put(job, result)
    return result


def evaluate_task_file(kernel_path: str | Path, task_path: str | Path, *,
                       backend: str = "simulator", hw: str = "trn1",
                       options: EvalOptions | None = None, cache: Any = True) -> EvalResult:
    """Evaluate a kernel file against an NKIBench-format task file (``accelopt profile`` uses this)."""
    kernel_path = Path(kernel_path)
    if not kernel_path.is_file():
        raise ConfigError(f"kernel file not found: {kernel_path}")
    options = replace(options or EvalOptions(), kernel_filename=kernel_path.name)
    return evaluate(Path(task_path), kernel_path.read_text(), backend=backend, hw=hw,
                    options=options, cache=cache, label=str(kernel_path))


def open_cache(cache: Any) -> EvalCache | None:
    if cache is None or cache is False:
        return None
    if cache is True:
        return EvalCache()
    if isinstance(cache, EvalCache):
        return cache
    return EvalCache(cache)


def run_job(job: EvalJob, worker: Any = None) -> EvalResult:
    """Run one job now (no cache): static check here, then the judge in a fresh sandboxed
    process, or in ``worker`` (a :class:`~accelopt_nb.evaluation.pool.WarmWorker`), which forks
    the kernel's runner. Never raises for anything the kernel does; raises for infrastructure
    problems (unknown problem, missing toolchain)."""
    t0 = time.monotonic()
    opts = job.options
    try:
        check_kernel_source(job.kernel_source, filename=opts.kernel_filename)
    except KernelRejectedError as exc:
        return _early(job, Status.REJECTED, exc, f"rejected by the static check: {exc.message}", t0)
    except KernelLoadError as exc:
        return _early(job, Status.BUILD_FAILED, exc, f"kernel failed to load: {exc.message}", t0)

    timeout_s, memory_mb = default_limits(job.preset)
    timeout_s = opts.timeout_s if opts.timeout_s is not None else timeout_s
    # The judge's own backstop: the runner has timeout_s; computing inputs and references the
    # first time, and the checks, get as long again plus a margin.
    backstop_s = 2 * timeout_s + JUDGE_MARGIN_S
    payload = {"job": job.to_dict(), "input_cache": _input_cache_dir()}
    if worker is not None:
        outcome = worker.run(ENGINE_TARGET, payload, backstop_s)
    else:
        outcome = run_sandboxed(ENGINE_TARGET, payload, SandboxLimits(
            timeout_s=backstop_s, memory_mb=None, file_size_mb=FILE_SIZE_MB.get(job.backend, 1024)))
    if outcome.kind == "ok":
        result = EvalResult.from_dict(outcome.value)
    elif outcome.kind == "error" and (outcome.error or {}).get("type") in _INFRA_ERRORS:
        err = outcome.error or {}
        raise _INFRA_ERRORS[err["type"]](err.get("message", ""))
    else:
        result = _skeleton(job)
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
                            "api": None, "file": opts.kernel_filename, "line": None, "rule": None}
        tail = (outcome.error or {}).get("traceback") or outcome.stderr_tail
        if tail:
            result.log.append("[evaluator] worker output tail:\n" + tail[-2000:])
    result.wall_time_s = time.monotonic() - t0
    result.label = job.label
    return result


def _input_cache_dir() -> str | None:
    """Where judges share inputs and references; ``ACCELOPT_INPUT_CACHE=0`` turns sharing off."""
    import os
    if os.environ.get("ACCELOPT_INPUT_CACHE", "1") == "0":
        return None
    from accelopt_nb.evaluation.datacache import default_input_cache_dir
    return str(default_input_cache_dir().resolve())


def _skeleton(job: EvalJob) -> EvalResult:
    return EvalResult(status=Status.CRASHED, message="", problem=job.problem.name,
                      preset=job.preset if job.problem.kind == "nkibench" else "task",
                      backend=job.backend, hw=job.hw, kernel_sha256=job.kernel_sha256,
                      evaluator_version=EVALUATOR_VERSION, label=job.label, fidelity=job.fidelity)


def _early(job: EvalJob, status: Status, exc: AccelOptError, message: str, t0: float) -> EvalResult:
    result = _skeleton(job)
    result.status, result.message = status, message
    result.error = exc.to_dict() if hasattr(exc, "to_dict") else {"type": type(exc).__name__,
                                                                   "message": str(exc)}
    result.wall_time_s = time.monotonic() - t0
    return result
