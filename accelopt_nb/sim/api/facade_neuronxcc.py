"""The ``neuronxcc.nki`` front end (NKI 0.1): the facade modules a kernel's ``import neuronxcc.nki...`` gets.

Thin: each module is the simulator's ``nl`` / ``nisa`` / ``nki.compiler`` namespace, and every ``nl`` / ``nisa``
function is bound against the signature the NKI docs give it (``api.guard``). The standalone ``nki`` package is
the other front end (``api.facade_nki``); ``api.loader`` maps import names onto both.
"""
from __future__ import annotations

import types
from typing import Any

from accelopt_nb.sim.api import compiler as _compiler
from accelopt_nb.sim.api import guard
from accelopt_nb.sim.api import isa as _isa
from accelopt_nb.sim.api import language as _nl
from accelopt_nb.sim.api.kernel import Kernel, jit


# ---- the neuronxcc.nki facade -----------------------------------------------------------------
def _module(name: str, attrs: dict[str, Any]) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    return mod


def _make_typing() -> types.ModuleType:
    class _TensorType:
        def __class_getitem__(cls, item):
            return cls
    return _module("neuronxcc.nki.typing", {"tensor": _TensorType, "mutable_tensor": _TensorType,
                                            "scalar": float, "ndarray": _TensorType})


def _simulate_kernel(kernel: Any, *args: Any, **kwargs: Any) -> Any:
    k = kernel if isinstance(kernel, Kernel) else Kernel(kernel)
    return k(*args, **kwargs)


compiler_module = _module("neuronxcc.nki.compiler", {k: getattr(_compiler, k) for k in _compiler.__all__})


language_module = _module("neuronxcc.nki.language", {k: getattr(_nl, k) for k in _nl.__all__})


isa_module = _module("neuronxcc.nki.isa", {k: getattr(_isa, k) for k in _isa.__all__})


typing_module = _make_typing()


nki_module = _module("neuronxcc.nki", {
    "jit": jit, "trace": jit, "language": language_module, "isa": isa_module, "typing": typing_module,
    "compiler": compiler_module, "simulate_kernel": _simulate_kernel, "baremetal": _compiler.baremetal,
    "benchmark": _compiler.benchmark, "profile": _compiler.profile,
})


neuronxcc_module = _module("neuronxcc", {"nki": nki_module})

MODULES: dict[str, types.ModuleType] = {
    "neuronxcc": neuronxcc_module,
    "neuronxcc.nki": nki_module,
    "neuronxcc.nki.language": language_module,
    "neuronxcc.nki.isa": isa_module,
    "neuronxcc.nki.typing": typing_module,
    "neuronxcc.nki.compiler": compiler_module,
}

# the API boundary: every nl / nisa function checks its call against the NKI docs of this front end
guard.guard_module(language_module, "neuronxcc", "language")
guard.guard_module(isa_module, "neuronxcc", "isa")
