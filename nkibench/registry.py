"""Where problems come from: the built-in folder, directories registered at run time, and ``NKIBENCH_PATH``.

A *problem directory* holds problem folders (``<dir>/<name>/problem.yaml``). The built-in one is
``nkibench/problems``. Users add their own with :func:`register_problem_dir` or by listing
directories in the ``NKIBENCH_PATH`` environment variable (``os.pathsep``-separated). A name may be
defined only once across all directories unless a registration passes ``override=True``, so a
typo'd duplicate never silently shadows a built-in problem.
"""
from __future__ import annotations

import os
from pathlib import Path

from accelopt_nb.errors import ProblemError
from nkibench.problem import Problem, load_problem_dir

BUILTIN_DIR = Path(__file__).with_name("problems")
ENV_VAR = "NKIBENCH_PATH"

_registered: list[tuple[Path, bool]] = []      # (directory, override)
_cache: dict[tuple, dict[str, Problem]] = {}


def register_problem_dir(path: str | Path, *, override: bool = False) -> list[str]:
    """Add a directory of problem folders; returns the problem names it provides."""
    path = Path(path).expanduser().resolve()
    if not path.is_dir():
        raise ProblemError(f"problem directory {path} does not exist")
    names = [p.name for p in _scan(path)]
    if not names:
        raise ProblemError(f"{path} holds no problem folders (each needs <name>/problem.yaml)")
    entry = (path, override)
    if entry not in _registered:
        _registered.append(entry)
    _cache.clear()
    _all()  # surface duplicate names now, at registration
    return names


def unregister_problem_dir(path: str | Path) -> None:
    path = Path(path).expanduser().resolve()
    _registered[:] = [e for e in _registered if e[0] != path]
    _cache.clear()


def problem_dirs() -> list[Path]:
    """Every directory searched, built-in first."""
    return [d for d, _ in _sources()]


def _sources() -> list[tuple[Path, bool]]:
    env = [(Path(p).expanduser().resolve(), False) for p in os.environ.get(ENV_VAR, "").split(os.pathsep) if p]
    return [(BUILTIN_DIR, False), *env, *_registered]


def _scan(directory: Path) -> list[Path]:
    if not directory.is_dir():
        raise ProblemError(f"problem directory {directory} (from {ENV_VAR} or register_problem_dir) does not exist")
    return sorted(p for p in directory.iterdir() if (p / "problem.yaml").is_file())


def _all() -> dict[str, Problem]:
    sources = tuple(_sources())
    # problem.yaml mtimes: a notebook that edits a problem in place sees the change on the next call
    stamps = tuple((d, tuple((p / "problem.yaml").stat().st_mtime_ns for p in _scan(d))) for d, _ in sources)
    key = (sources, stamps)
    if key in _cache:
        return _cache[key]
    found: dict[str, Problem] = {}
    for directory, override in sources:
        for folder in _scan(directory):
            problem = load_problem_dir(folder)
            if problem.name in found and not override:
                raise ProblemError(f"problem {problem.name!r} is defined twice: {found[problem.name].directory} and "
                                   f"{folder} (rename one, or register with override=True)")
            found[problem.name] = problem
    _cache.clear()
    _cache[key] = found
    return found


def list_problems() -> list[str]:
    """Names of every known problem, sorted."""
    return sorted(_all())


def get_problem(name: str) -> Problem:
    problems = _all()
    if name not in problems:
        raise ProblemError(f"unknown NKIBench problem {name!r} (known: {', '.join(sorted(problems))})")
    return problems[name]
