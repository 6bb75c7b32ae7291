"""One NKIBench problem: its ``problem.yaml``, its parameterised ``task.py`` and its baseline ``kernel.py``.

``problem.yaml`` schema (every key is checked when the folder is loaded)::

    name: matmul                         # must equal the folder name
    description: C = A @ B ...           # one paragraph
    shapes:                              # shape parameters, in the order the paper lists them
      M: {paper: 4096, small: 256, doc: rows of A}
    tolerance: 2.0e-5                    # whole-tensor L2 relative error bound
    inputs: lhs (M, K), rhs (K, N): float32 N(0, 1)
    outputs: (M, N) float32
    layout: the kernel's input/output layouts (transform_to_nki_inputs)
    constraints: ["M % 128 == 0"]        # checked before a task is materialised
    peak:                                # the paper's counts, as expressions of the shapes
      vec_flops: "0"
      mm_flops: "2*M*N*K"
      hbm_bytes: "4*(M*N + N*K + M*K)"
    adversarial: what get_adversarial_inputs() stresses, and which shortcut it catches
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Union

import yaml

from accelopt_nb.errors import ProblemError
from accelopt_nb.taskfile import TaskModule
from nkibench import expr
from nkibench.peak import Peak, compute_peak
from nkibench.taskgen import load_task_source, materialize_source, write_text

PRESETS = ("paper", "small")
PEAK_KEYS = ("vec_flops", "mm_flops", "hbm_bytes")
DEFAULT_TOLERANCE = 2e-5
_REQUIRED_KEYS = ("name", "description", "shapes", "peak")
_KNOWN_KEYS = set(_REQUIRED_KEYS) | {"tolerance", "inputs", "outputs", "layout", "constraints", "adversarial",
                                     "notes"}

#: A preset name ("paper" | "small") or an explicit mapping of shape values (missing ones come from "paper").
PresetLike = Union[str, Mapping[str, int]]


@dataclass(frozen=True)
class ShapeParam:
    name: str
    presets: Mapping[str, int]
    doc: str = ""


@dataclass(frozen=True)
class Problem:
    """A problem folder ``<dir>/<name>/`` with ``problem.yaml``, ``task.py`` and ``kernel.py``."""

    name: str
    description: str
    directory: Path
    params: tuple[ShapeParam, ...]
    tolerance: float
    peak_exprs: Mapping[str, str]
    constraints: tuple[str, ...] = ()
    inputs: str = ""
    outputs: str = ""
    layout: str = ""
    adversarial: str = ""
    meta: Mapping[str, Any] = field(default_factory=dict)

    # ----------------------------------------------------------------------------- files
    @property
    def task_path(self) -> Path:
        return self.directory / "task.py"

    @property
    def baseline_path(self) -> Path:
        return self.directory / "kernel.py"

    def baseline_source(self) -> str:
        """The source of our baseline NKI kernel (shape-generic: one file serves every preset)."""
        if not self.baseline_path.is_file():
            raise ProblemError(f"problem {self.name!r} has no baseline kernel at {self.baseline_path}")
        return self.baseline_path.read_text()

    # ----------------------------------------------------------------------------- shapes
    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    @property
    def presets(self) -> tuple[str, ...]:
        names: list[str] = []
        for p in self.params:
            names.extend(k for k in p.presets if k not in names)
        return tuple(names)

    def shapes(self, preset: PresetLike = "small") -> dict[str, int]:
        """Shape values of a preset (or of an explicit mapping, completed from the paper preset); checked."""
        if isinstance(preset, str):
            missing = [p.name for p in self.params if preset not in p.presets]
            if missing:
                raise ProblemError(f"problem {self.name!r} has no preset {preset!r} "
                                   f"(known: {', '.join(self.presets)})")
            values = {p.name: int(p.presets[preset]) for p in self.params}
        else:
            unknown = sorted(set(preset) - set(self.param_names))
            if unknown:
                raise ProblemError(f"problem {self.name!r} has no shape parameter(s) {', '.join(unknown)} "
                                   f"(parameters: {', '.join(self.param_names)})")
            values = {p.name: int(preset.get(p.name, p.presets["paper"])) for p in self.params}
        for name, v in values.items():
            if v <= 0:
                raise ProblemError(f"problem {self.name!r}: shape {name}={v} must be positive")
        for c in self.constraints:
            if not expr.evaluate(c, values, where=f"{self.name} constraint"):
                shown = ", ".join(f"{k}={v}" for k, v in values.items())
                raise ProblemError(f"problem {self.name!r}: shapes ({shown}) violate the constraint {c!r} "
                                   "required by the kernel layout")
        return values

    def preset_label(self, preset: PresetLike) -> str:
        if isinstance(preset, str):
            return preset
        return "custom_" + "_".join(f"{k}{v}" for k, v in self.shapes(preset).items())

    # ----------------------------------------------------------------------------- tasks
    def task_source(self, preset: PresetLike = "small") -> str:
        """Standalone NKIBench-format task source with the preset's shape constants bound."""
        shapes = self.shapes(preset)
        shown = ", ".join(f"{k}={v}" for k, v in shapes.items())
        header = (f"# NKIBench task {self.name!r}, preset {self.preset_label(preset)!r} ({shown}).\n"
                  f"# Materialised by nkibench from {self.name}/task.py; tolerance {self.tolerance:g}.\n")
        return materialize_source(self.task_path.read_text(), shapes, origin=str(self.task_path), header=header)

    def task(self, preset: PresetLike = "small") -> TaskModule:
        """The task module (``get_inputs``/``forward``/transforms/``get_adversarial_inputs``) for a preset."""
        label = self.preset_label(preset)
        return load_task_source(self.task_source(preset), module_name=f"nkibench_{self.name}_{label}",
                                filename=f"<nkibench:{self.name}/task.py[{label}]>")

    def export_task(self, preset: PresetLike, path: str | Path) -> Path:
        return write_text(path, self.task_source(preset))

    # ----------------------------------------------------------------------------- peak
    def counts(self, preset: PresetLike = "paper") -> dict[str, float]:
        """The paper's vec_flops, mm_flops and minimum HBM bytes for a preset."""
        shapes = self.shapes(preset)
        return {k: float(expr.evaluate(self.peak_exprs[k], shapes, where=f"{self.name} peak.{k}"))
                for k in PEAK_KEYS}

    def peak(self, preset: PresetLike = "paper", hw: str = "trn1") -> Peak:
        c = self.counts(preset)
        return compute_peak(c["vec_flops"], c["mm_flops"], c["hbm_bytes"], hw)

    def __hash__(self) -> int:  # the mapping fields are unhashable; a problem is its folder
        return hash((self.name, str(self.directory)))

    def __repr__(self) -> str:  # the dataclass repr would dump every field
        return f"Problem({self.name!r}, shapes={self.param_names}, tolerance={self.tolerance:g})"


def load_problem_dir(directory: str | Path) -> Problem:
    """Parse and validate one problem folder."""
    directory = Path(directory)
    yml = directory / "problem.yaml"
    if not yml.is_file():
        raise ProblemError(f"{directory} is not a problem folder: it has no problem.yaml")
    try:
        data = yaml.safe_load(yml.read_text())
    except yaml.YAMLError as exc:
        raise ProblemError(f"{yml}: invalid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ProblemError(f"{yml}: expected a mapping at the top level")
    missing = [k for k in _REQUIRED_KEYS if k not in data]
    if missing:
        raise ProblemError(f"{yml}: missing key(s) {', '.join(missing)}")
    unknown = sorted(set(data) - _KNOWN_KEYS)
    if unknown:
        raise ProblemError(f"{yml}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(_KNOWN_KEYS))})")
    name = str(data["name"])
    if name != directory.name:
        raise ProblemError(f"{yml}: name {name!r} must equal the folder name {directory.name!r}")
    if not isinstance(data["shapes"], dict) or not data["shapes"]:
        raise ProblemError(f"{yml}: 'shapes' must map parameter names to {{paper: ..., small: ...}}")
    params = []
    for pname, spec in data["shapes"].items():
        if not str(pname).isidentifier():
            raise ProblemError(f"{yml}: shape parameter {pname!r} is not a valid Python name")
        if not isinstance(spec, dict) or "paper" not in spec:
            raise ProblemError(f"{yml}: shape {pname} needs at least a 'paper' value, e.g. {{paper: 4096, small: 256}}")
        presets = {k: v for k, v in spec.items() if k != "doc"}
        for k, v in presets.items():
            if not isinstance(v, int) or isinstance(v, bool):
                raise ProblemError(f"{yml}: shape {pname} preset {k} must be an integer, got {v!r}")
        params.append(ShapeParam(str(pname), presets, str(spec.get("doc", ""))))
    peak = data["peak"]
    if not isinstance(peak, dict) or sorted(peak) != sorted(PEAK_KEYS):
        raise ProblemError(f"{yml}: 'peak' must have exactly the keys {', '.join(PEAK_KEYS)}")
    tolerance = float(data.get("tolerance", DEFAULT_TOLERANCE))
    if not 0 < tolerance < 1:
        raise ProblemError(f"{yml}: tolerance must be in (0, 1), got {tolerance}")
    problem = Problem(
        name=name, description=str(data["description"]).strip(), directory=directory, params=tuple(params),
        tolerance=tolerance, peak_exprs={k: str(v) for k, v in peak.items()},
        constraints=tuple(str(c) for c in data.get("constraints", []) or []),
        inputs=str(data.get("inputs", "")).strip(), outputs=str(data.get("outputs", "")).strip(),
        layout=str(data.get("layout", "")).strip(), adversarial=str(data.get("adversarial", "")).strip(),
        meta={k: data[k] for k in ("notes",) if k in data})
    if not problem.task_path.is_file():
        raise ProblemError(f"problem folder {directory} has no task.py")
    # Validate the formulas and constraints against the paper preset now, not at first use.
    problem.counts("paper")
    return problem
