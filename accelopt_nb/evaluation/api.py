"""The evaluation API: ``evaluate(problem, kernel_source, backend=, hw=, preset=) -> EvalResult``.

Every evaluation goes the same way: a job (:func:`make_job`), then the evaluation service
(:mod:`.service`: the result cache, dedupe, the fidelity rules), which runs it
(:func:`.run.run_job`: static check in the caller, then the judge in a sandboxed worker process).
Results are cached on disk by kernel hash, problem, preset, backend, hardware and evaluator version.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from accelopt_nb.errors import ConfigError
from accelopt_nb.evaluation.backends import backend_names
from accelopt_nb.evaluation.cache import open_cache
from accelopt_nb.evaluation.executors import SandboxEvaluator
from accelopt_nb.evaluation.job import FIDELITIES, EvalJob, EvalOptions, Fidelity
from accelopt_nb.evaluation.problems import resolve_problem
from accelopt_nb.evaluation.result import EvalResult
from accelopt_nb.evaluation.run import run_job
from accelopt_nb.evaluation.service import EvalService
from accelopt_nb.perf.hardware import presets as hardware_names

__all__ = ["evaluate", "evaluate_task_file", "make_job", "open_cache", "run_job"]


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
    return EvalService(SandboxEvaluator(), cache=cache, dedupe=False).evaluate(job)


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
