"""What the search needs to know about a problem, from NKIBench or from a pair of files.

The search needs: the reference program the prompts show, the baseline kernel it starts
from, the correctness tolerance the executor is told, the theoretical peak (for % of peak),
and what the evaluation service takes as the problem (an NKIBench name or a task file).
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accelopt_nb.errors import ProblemError
from nkibench.problem import DEFAULT_TOLERANCE


@dataclass
class SearchProblem:
    """One problem instance (problem + shape preset) to optimize."""

    name: str
    preset: str
    reference_source: str
    baseline_source: str
    tolerance: float = DEFAULT_TOLERANCE
    dtypes: str = "float32"
    eval_target: Any = None  # passed to accelopt_nb.evaluation.make_job as the problem
    peaks: dict[str, tuple[float, str]] = field(default_factory=dict)  # hw -> (peak ms, bound)
    adversarial: bool = True

    # -- persistence (a resumed run rebuilds its problem from the store, files or no files) --
    def to_spec(self) -> dict[str, Any]:
        target = self.eval_target
        if isinstance(target, str):
            kind, task_source = "nkibench", None
        else:
            kind, task_source = "task", _task_source(target)
        return {"name": self.name, "preset": self.preset, "reference_source": self.reference_source,
                "baseline_source": self.baseline_source, "tolerance": self.tolerance, "dtypes": self.dtypes,
                "peaks": {hw: list(v) for hw, v in self.peaks.items()}, "adversarial": self.adversarial,
                "kind": kind, "task_source": task_source}

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> "SearchProblem":
        from accelopt_nb.evaluation import ProblemRef

        if spec.get("kind") == "task":
            target: Any = ProblemRef(kind="task", name=spec["name"], source=spec["task_source"])
        else:
            target = spec["name"]
        return cls(name=spec["name"], preset=spec["preset"], reference_source=spec["reference_source"],
                   baseline_source=spec["baseline_source"], tolerance=float(spec["tolerance"]),
                   dtypes=spec.get("dtypes", "float32"), eval_target=target,
                   peaks={hw: (float(v[0]), str(v[1])) for hw, v in (spec.get("peaks") or {}).items()},
                   adversarial=bool(spec.get("adversarial", True)))

    def peak(self, hw: str) -> tuple[float, str] | None:
        return self.peaks.get(hw)

    def percent_of_peak(self, latency_ms: float | None, hw: str) -> float | None:
        p = self.peak(hw)
        if p is None or latency_ms is None or not latency_ms > 0:
            return None
        return 100.0 * p[0] / latency_ms

    # -- constructors ----------------------------------------------------------------------
    @classmethod
    def from_nkibench(cls, name: str, preset: str = "small", hws: tuple[str, ...] | None = None) -> "SearchProblem":
        try:
            import nkibench
        except ImportError as exc:  # pragma: no cover - nkibench ships with accelopt_nb
            raise ProblemError(f"the nkibench package is not importable: {exc}") from exc
        problem = nkibench.get_problem(name)
        task = problem.task(preset)
        reference = _reference_source(problem, task, preset)
        peaks: dict[str, tuple[float, str]] = {}
        if hws is None:
            from accelopt_nb.perf.hardware import presets as hardware_names
            hws = tuple(hardware_names())
        for hw in hws:
            try:
                pk = problem.peak(preset, hw)
            except Exception:  # a problem without a peak model for this hw still optimizes
                continue
            peaks[hw] = (float(pk.ms), _bound_words(getattr(pk, "bound", "")))
        tol = getattr(problem, "tolerance", None)
        return cls(name=name, preset=preset, reference_source=reference, baseline_source=problem.baseline_source(),
                   tolerance=float(tol) if tol is not None else DEFAULT_TOLERANCE,
                   eval_target=name, peaks=peaks, adversarial=task.has_adversarial)

    @classmethod
    def from_files(cls, task_path: str | Path, kernel_path: str | Path, name: str | None = None) -> "SearchProblem":
        """A problem in the paper's NKIBench file format: a task module and a baseline kernel."""
        from accelopt_nb.taskfile import load_task

        task_path, kernel_path = Path(task_path), Path(kernel_path)
        if not kernel_path.is_file():
            raise ProblemError(f"baseline kernel file not found: {kernel_path}")
        task = load_task(task_path)
        from accelopt_nb.evaluation import ProblemRef

        tol = getattr(task.module, "REL_TOL", None) or getattr(task.module, "TOLERANCE", None)
        source = task_path.read_text()
        name = name or task_path.stem
        # The task travels as its source, so evaluation (and a resumed run) never needs the file again.
        return cls(name=name, preset="task", reference_source=source, baseline_source=kernel_path.read_text(),
                   tolerance=float(tol) if tol is not None else DEFAULT_TOLERANCE,
                   eval_target=ProblemRef(kind="task", name=name, source=source), adversarial=task.has_adversarial)


def _task_source(target: Any) -> str:
    source = getattr(target, "source", None)
    if isinstance(source, str):
        return source
    if isinstance(target, (str, Path)) and Path(target).is_file():
        return Path(target).read_text()
    raise ProblemError(f"cannot record the task of {target!r}; give a task file or an NKIBench problem name")


def _reference_source(problem: Any, task: Any, preset: str) -> str:
    for attr in ("reference_source", "task_source"):
        fn = getattr(problem, attr, None)
        if callable(fn):
            try:
                return fn(preset)
            except TypeError:
                return fn()
        if isinstance(fn, str):
            return fn
    path = getattr(task, "path", None)
    if path is not None and Path(path).is_file():
        return Path(path).read_text()
    try:
        return inspect.getsource(task.module)
    except (OSError, TypeError) as exc:
        raise ProblemError(f"cannot find the reference source of problem {getattr(problem, 'name', '?')}") from exc


def _bound_words(bound: str) -> str:
    return {"memory": "HBM bandwidth", "mem": "HBM bandwidth", "mm": "Tensor Engine throughput",
            "vec": "Vector/Scalar Engine throughput"}.get(bound, bound or "unknown")
