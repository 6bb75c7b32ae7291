"""Problems in the paper's NKIBench file format, loaded as they are.

The paper's suite stores each problem as a materialised task module (``reference/<case>.py``, with
module-level shape constants and ``get_inputs``/``forward``/``transform_to_nki_inputs``/
``transform_nki_outputs``) and a kernel module defining ``kernel`` (``kernels/<case>.py``), indexed
by ``summary.json``. :func:`load_external` wraps one such pair; :func:`load_external_suite` reads a
``summary.json``. When the problem is one of the 14 built-in ones, its peak counts come from the
built-in formulas evaluated at the file's own shape constants, so external kernels get a % of peak.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from accelopt_nb.errors import ProblemError
from accelopt_nb.taskfile import TaskModule, load_task
from nkibench.peak import Peak, compute_peak
from nkibench.problem import DEFAULT_TOLERANCE, PEAK_KEYS


@dataclass
class ExternalProblem:
    """A task file plus a kernel file, with the same interface the benchmark uses for built-in problems."""

    name: str
    task_path: Path
    kernel_path: Path
    tolerance: float = DEFAULT_TOLERANCE
    counts_override: Mapping[str, float] | None = None
    builtin: str | None = None            # name of the matching built-in problem, if any
    values: Mapping[str, int] = field(default_factory=dict)
    _task: TaskModule | None = field(default=None, repr=False)

    @property
    def baseline_path(self) -> Path:
        return self.kernel_path

    def baseline_source(self) -> str:
        return self.kernel_path.read_text()

    def task(self, preset: Any = None) -> TaskModule:
        """The task module; ``preset`` is ignored because an external task file has fixed shapes."""
        if self._task is None:
            self._task = load_task(self.task_path)
        return self._task

    def shapes(self, preset: Any = None) -> dict[str, int]:
        if self.values:
            return dict(self.values)
        mod = self.task().module
        return {k: v for k, v in vars(mod).items() if k.isupper() and isinstance(v, int) and not isinstance(v, bool)}

    def preset_label(self, preset: Any = None) -> str:
        return "external"

    def counts(self, preset: Any = None) -> dict[str, float] | None:
        if self.counts_override is not None:
            return {k: float(self.counts_override[k]) for k in PEAK_KEYS}
        if self.builtin is None:
            return None
        from nkibench.registry import get_problem
        problem = get_problem(self.builtin)
        shapes = self.shapes()
        missing = [p for p in problem.param_names if p not in shapes]
        if missing:
            raise ProblemError(f"external task {self.task_path} matches built-in problem {self.builtin!r} but does not "
                               f"define its shape constant(s) {', '.join(missing)}; pass counts= explicitly")
        return problem.counts({p: shapes[p] for p in problem.param_names})

    def peak(self, preset: Any = None, hw: str = "trn1") -> Peak | None:
        c = self.counts()
        return None if c is None else compute_peak(c["vec_flops"], c["mm_flops"], c["hbm_bytes"], hw)


def _match_builtin(stem: str) -> str | None:
    from nkibench.registry import list_problems
    names = sorted(list_problems(), key=len, reverse=True)   # longest first: "bmm_softmax" before "bmm"
    for n in names:
        if stem == n or stem.startswith(n + "_"):
            return n
    return None


def load_external(task_path: str | Path, kernel_path: str | Path, *, name: str | None = None,
                  tolerance: float | None = None, counts: Mapping[str, float] | None = None,
                  values: Mapping[str, int] | None = None) -> ExternalProblem:
    """Wrap an NKIBench-format task file and kernel file.

    ``name`` defaults to the task file's stem; when it is (or starts with ``<builtin>_``) one of the
    built-in problems, that problem's tolerance and peak formulas apply unless ``tolerance`` /
    ``counts`` are given. ``counts`` maps ``vec_flops``, ``mm_flops`` and ``hbm_bytes`` to numbers.
    """
    task_path, kernel_path = Path(task_path), Path(kernel_path)
    for p, what in ((task_path, "task"), (kernel_path, "kernel")):
        if not p.is_file():
            raise ProblemError(f"{what} file not found: {p}")
    if counts is not None and sorted(counts) != sorted(PEAK_KEYS):
        raise ProblemError(f"counts must have exactly the keys {', '.join(PEAK_KEYS)}")
    name = name or task_path.stem
    builtin = _match_builtin(name)
    if tolerance is None:
        if builtin is not None:
            from nkibench.registry import get_problem
            tolerance = get_problem(builtin).tolerance
        else:
            tolerance = DEFAULT_TOLERANCE
    ext = ExternalProblem(name=name, task_path=task_path, kernel_path=kernel_path, tolerance=float(tolerance),
                          counts_override=counts, builtin=builtin, values=dict(values or {}))
    ext.task()   # import now so a broken task file fails here, with its path
    return ext


def load_external_suite(summary_json: str | Path) -> list[ExternalProblem]:
    """Every (case, impl) of a paper-format ``summary.json``; task/kernel paths are relative to its folder."""
    summary_json = Path(summary_json)
    if not summary_json.is_file():
        raise ProblemError(f"summary file not found: {summary_json}")
    try:
        data = json.loads(summary_json.read_text())
    except json.JSONDecodeError as exc:
        raise ProblemError(f"{summary_json}: invalid JSON: {exc}") from exc
    root = summary_json.parent
    out: list[ExternalProblem] = []
    for problem, entry in data.items():
        cases = entry.get("cases") if isinstance(entry, dict) else None
        if not isinstance(cases, dict):
            raise ProblemError(f"{summary_json}: problem {problem!r} has no 'cases' mapping")
        for case_id, case in cases.items():
            impls = case.get("impls") or []
            if not impls:
                raise ProblemError(f"{summary_json}: case {problem}/{case_id} lists no impls")
            for i, impl in enumerate(impls):
                label = case_id if len(impls) == 1 else f"{case_id}#{i}"
                ext = load_external(root / impl["task"], root / impl["kernel"], name=str(problem),
                                    values={k: int(v) for k, v in (case.get("values") or {}).items()})
                ext.name = f"{problem}/{label}" if label != problem else str(problem)
                out.append(ext)
    return out
