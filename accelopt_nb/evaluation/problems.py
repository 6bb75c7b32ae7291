"""Turn what the caller names (an NKIBench problem, a task file, a loaded task) into a task.

The caller side (:func:`resolve_problem`) makes a :class:`ProblemRef` that can travel to another
process or machine; the worker side (:func:`load_problem`) turns it back into a
:class:`~accelopt_nb.taskfile.TaskModule` plus the correctness tolerance.
"""
from __future__ import annotations

import hashlib
import inspect
import re
from pathlib import Path
from typing import Any

from accelopt_nb.errors import ProblemError
from accelopt_nb.evaluation.job import ProblemRef
from accelopt_nb.taskfile import TaskModule, load_task
from nkibench.problem import DEFAULT_TOLERANCE

# Module-level names a task file may use to state its own tolerance (e.g. mamba's looser one).
TASK_TOLERANCE_NAMES = ("REL_TOL", "TOLERANCE")


def resolve_problem(problem_or_task: Any, preset: str = "small") -> ProblemRef:
    """An NKIBench problem name, a task file path, or a loaded TaskModule -> a ProblemRef."""
    if isinstance(problem_or_task, ProblemRef):
        return problem_or_task
    if isinstance(problem_or_task, TaskModule):
        task = problem_or_task
        if task.path is not None:
            return ProblemRef(kind="task", name=task.name, source=Path(task.path).read_text())
        try:
            source = inspect.getsource(task.module)
        except (OSError, TypeError) as exc:
            raise ProblemError(f"task module {task.name!r} has no file and no retrievable source; "
                               f"save it as a task file ({exc})") from None
        return ProblemRef(kind="task", name=task.name, source=source)
    if isinstance(problem_or_task, Path) or (
            isinstance(problem_or_task, str) and (problem_or_task.endswith(".py")
                                                  or Path(problem_or_task).is_file())):
        path = Path(problem_or_task)
        if not path.is_file():
            raise ProblemError(f"task file not found: {path}")
        return ProblemRef(kind="task", name=path.stem, source=path.read_text())
    if isinstance(problem_or_task, str):
        problem = _nkibench_problem(problem_or_task)  # fail early, in the caller, on an unknown name
        return ProblemRef(kind="nkibench", name=problem_or_task,
                          fingerprint=_task_fingerprint(problem, preset))
    raise ProblemError(f"cannot evaluate against {type(problem_or_task).__name__!r}: pass an "
                       f"NKIBench problem name, a task file path or a TaskModule")


# Tasks a long-lived judge already materialised: (identity, preset) -> (task, tolerance).
_LOADED: dict[tuple[str, str], tuple[TaskModule, float]] = {}
_MAX_LOADED = 16


def load_problem(ref: ProblemRef, preset: str, workdir: Path) -> tuple[TaskModule, float]:
    """Materialise the task in this process (once per process); returns it with its tolerance."""
    key = (ref.identity(), preset)
    if key not in _LOADED:
        if len(_LOADED) >= _MAX_LOADED:
            _LOADED.pop(next(iter(_LOADED)))
        _LOADED[key] = _load_problem(ref, preset, workdir)
    return _LOADED[key]


def task_key(ref: ProblemRef, preset: str) -> str:
    """Identity of the task at one preset, for the input cache: it changes when the task does."""
    if ref.kind == "nkibench":
        fingerprint = _task_fingerprint(_nkibench_problem(ref.name), preset)
        return f"nkibench:{ref.name}:{preset}:{fingerprint or ''}"
    return ref.identity()


def _load_problem(ref: ProblemRef, preset: str, workdir: Path) -> tuple[TaskModule, float]:
    if ref.kind == "nkibench":
        problem = _nkibench_problem(ref.name)
        task = problem.task(preset)
        tol = getattr(problem, "tolerance", None)
        return task, float(tol if tol is not None else _task_tolerance(task))
    if ref.kind == "task":
        Path(workdir).mkdir(parents=True, exist_ok=True)
        path = Path(workdir) / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', ref.name)}.py"  # a suite's names hold "/"
        path.write_text(ref.source or "")
        task = load_task(path)
        return task, _task_tolerance(task)
    raise ProblemError(f"unknown problem kind {ref.kind!r}")


def _task_fingerprint(problem: Any, preset: str) -> str | None:
    """Hash of the problem's materialised task and tolerance, so cached results go stale when the
    benchmark's definition of the problem changes."""
    task_source = getattr(problem, "task_source", None)
    if not callable(task_source):
        return None
    text = f"{task_source(preset)}\n# tolerance {getattr(problem, 'tolerance', None)}"
    return hashlib.sha256(text.encode()).hexdigest()


def _task_tolerance(task: TaskModule) -> float:
    for name in TASK_TOLERANCE_NAMES:
        value = getattr(task.module, name, None)
        if value is not None:
            return float(value)
    return DEFAULT_TOLERANCE


def _nkibench_problem(name: str) -> Any:
    try:
        import nkibench
    except ImportError as exc:
        raise ProblemError(f"problem {name!r}: the nkibench package is not importable ({exc}); "
                           f"pass a task file instead") from None
    return nkibench.get_problem(name)
