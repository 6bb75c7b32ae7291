"""NKIBench: the paper's 14 Trainium kernels, scored as a percentage of the hardware's peak.

>>> import nkibench
>>> nkibench.list_problems()[:3]
['adamw', 'add_rmsnorm_matmul', 'bmm']
>>> p = nkibench.get_problem("matmul")
>>> p.shapes("small"), p.peak("paper", "trn1").ms          # doctest: +SKIP
>>> task = nkibench.load_problem("matmul", "small")         # an accelopt_nb.taskfile.TaskModule
>>> nkibench.export_task("matmul", "paper", "matmul_task.py")   # a standalone NKIBench task file

Each problem is a folder ``nkibench/problems/<name>/`` holding ``problem.yaml`` (shapes for the
``paper`` and ``small`` presets, tolerance, peak formulas), ``task.py`` (the paper's task-module
format, parameterised by its module-level shape constants) and ``kernel.py`` (our baseline NKI
kernel). See ``nkibench/README.md``.
"""
from __future__ import annotations

from pathlib import Path

from nkibench.external import ExternalProblem, load_external, load_external_suite
from nkibench.peak import Peak, compute_peak, peak_latency_s
from nkibench.problem import PRESETS, PresetLike, Problem, ShapeParam, load_problem_dir
from nkibench.registry import (ENV_VAR, get_problem, list_problems, problem_dirs, register_problem_dir,
                               unregister_problem_dir)

__all__ = [
    "ENV_VAR", "ExternalProblem", "PRESETS", "Peak", "PresetLike", "Problem", "ShapeParam", "compute_peak",
    "export_problem", "export_task", "get_problem", "list_problems", "load_external", "load_external_suite",
    "load_problem", "load_problem_dir", "peak_latency_s", "problem_dirs", "register_problem_dir",
    "unregister_problem_dir",
]


def load_problem(name: str, preset: PresetLike = "small"):
    """The task module of problem ``name`` with the preset's shape constants bound."""
    return get_problem(name).task(preset)


def export_task(name: str, preset: PresetLike, path: str | Path) -> Path:
    """Write a standalone NKIBench-format task file for ``name`` at ``preset``; returns its path."""
    return get_problem(name).export_task(preset, path)


def export_problem(name: str, preset: PresetLike, directory: str | Path) -> tuple[Path, Path]:
    """Write ``<directory>/<name>_task.py`` and ``<directory>/<name>_kernel.py`` (the baseline)."""
    problem = get_problem(name)
    directory = Path(directory)
    task_path = problem.export_task(preset, directory / f"{name}_task.py")
    kernel_path = directory / f"{name}_kernel.py"
    kernel_path.write_text(problem.baseline_source())
    return task_path, kernel_path
