"""The NKI CPU simulator: run unmodified ``neuronxcc.nki`` kernels on NumPy.

>>> from accelopt_nb.sim import load_kernel, simulate
>>> kern = load_kernel("my_kernel.py")
>>> result = simulate(kern, a, b)          # result.outputs, result.trace

The names below load on first use (PEP 562), so ``import accelopt_nb.sim.trace`` (the performance model's one
import from here) does not load the simulator.
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    # the loader brings the whole simulator (both front ends, the API bound into the core)
    **dict.fromkeys(("Kernel", "SimResult", "jit", "simulate", "load_kernel"), "accelopt_nb.sim.api.loader"),
    "SimOptions": "accelopt_nb.sim.core.runtime",
    "program_fingerprint": "accelopt_nb.sim.api.loader",
    "Instruction": "accelopt_nb.sim.trace", "Region": "accelopt_nb.sim.trace", "TensorInfo": "accelopt_nb.sim.trace",
    "Trace": "accelopt_nb.sim.trace",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
