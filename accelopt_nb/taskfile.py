"""Task modules in the paper's NKIBench file format, and the paper's correctness metric.

A task module defines, at module level:

* ``get_inputs()`` -> list of NumPy arrays (the problem inputs, float32, seeded by the caller
  through ``np.random.seed``),
* ``forward(*inputs)`` -> the NumPy reference (an array or a tuple of arrays),
* ``transform_to_nki_inputs(inputs)`` -> the inputs in the kernel's layout,
* ``transform_nki_outputs(k_res, ref)`` -> the kernel outputs reshaped like the reference,
* optionally ``get_adversarial_inputs()`` -> a list of input lists that catch shortcuts.
"""
from __future__ import annotations

import hashlib
import math
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Sequence

import numpy as np

from accelopt_nb.errors import ProblemError

REQUIRED = ("get_inputs", "forward", "transform_to_nki_inputs", "transform_nki_outputs")


@dataclass
class TaskModule:
    """A loaded NKIBench-format task."""

    path: Path | None
    module: ModuleType

    @property
    def name(self) -> str:
        return self.path.stem if self.path else self.module.__name__

    def get_inputs(self, seed: int | None = None) -> list[np.ndarray]:
        if seed is not None:
            np.random.seed(seed)
        return list(self.module.get_inputs())

    def forward(self, *inputs: np.ndarray) -> Any:
        return self.module.forward(*inputs)

    def to_nki(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return list(self.module.transform_to_nki_inputs(list(inputs)))

    def from_nki(self, k_res: Any, ref: Any) -> tuple[np.ndarray, ...]:
        out = self.module.transform_nki_outputs(k_res, ref)
        return out if isinstance(out, tuple) else (out,) if not isinstance(out, list) else tuple(out)

    @property
    def has_adversarial(self) -> bool:
        return callable(getattr(self.module, "get_adversarial_inputs", None))

    def adversarial_inputs(self) -> list[list[np.ndarray]]:
        fn: Callable | None = getattr(self.module, "get_adversarial_inputs", None)
        return [list(x) for x in fn()] if fn else []


def load_task(path: str | Path) -> TaskModule:
    """Import a task module from a file, checking it defines the four required functions."""
    path = Path(path)
    if not path.is_file():
        raise ProblemError(f"task file not found: {path}")
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:10]
    mod_name = f"_accelopt_task_{path.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise ProblemError(f"cannot import task file {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # a broken task is a user error worth a clear message
        sys.modules.pop(mod_name, None)
        raise ProblemError(f"task file {path} failed to import: {type(exc).__name__}: {exc}") from exc
    missing = [f for f in REQUIRED if not callable(getattr(module, f, None))]
    if missing:
        raise ProblemError(f"task file {path} does not define {', '.join(missing)} "
                           f"(NKIBench task modules need {', '.join(REQUIRED)})")
    return TaskModule(path=path, module=module)


def as_output_tuple(ref: Any) -> tuple:
    return tuple(ref) if isinstance(ref, (tuple, list)) else (ref,)


def l2_relative_error(actual: np.ndarray, expected: np.ndarray, chunk: int = 1 << 22) -> float:
    """The paper's metric: ||a - e||_2 / ||e||_2 over the whole tensor, in float64.

    Computed in chunks, so it needs no whole-tensor float64 temporaries (at the paper's bmm shape
    those are 2 GB each).
    """
    a, e = np.ravel(actual), np.ravel(expected)
    num = den = 0.0
    for i in range(0, max(a.size, 1), chunk):
        ea = e[i:i + chunk].astype(np.float64, copy=False)   # a float64 reference is read in place
        d = np.subtract(a[i:i + chunk], ea, dtype=np.float64)  # the kernel's chunk cast as it is read
        num += float(np.dot(d, d))
        den += float(np.dot(ea, ea))
    if not np.isfinite(num):
        return float("inf")
    if den == 0.0:
        return 0.0 if num == 0.0 else float("inf")
    return math.sqrt(num) / math.sqrt(den)
