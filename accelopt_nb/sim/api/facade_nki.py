"""The standalone ``nki`` package style (NKI 0.2+): ``import nki``, ISA calls with an explicit ``dst``.

A thin facade over the same core as ``neuronxcc.nki``: every ``nki.isa`` instruction takes the
destination tile first and returns nothing, so each one here runs the NKI 0.1 instruction and
writes its result into ``dst`` (re-targeting the recorded instruction, not adding a copy).

``nc_matmul(dst, ..., accumulate=None)``: ``True`` accumulates into ``dst``, ``False`` overwrites;
``None`` (the compiler infers it) overwrites elements never written and accumulates onto written
ones, which matches an accumulation group into a PSUM tile allocated for that group.
"""
from __future__ import annotations

import inspect
import types
from typing import Any, Callable

from accelopt_nb.sim.api import compiler as _compiler
from accelopt_nb.sim.api import guard
from accelopt_nb.sim.api import isa as _isa
from accelopt_nb.sim.api import language as _nl
from accelopt_nb.sim.api import language_nki as _nl_nki
from accelopt_nb.sim.api import ops as _ops
from accelopt_nb.sim.api import registers as _registers
from accelopt_nb.sim.api.facade_neuronxcc import compiler_module, typing_module
from accelopt_nb.sim.api.kernel import Kernel, jit
from accelopt_nb.sim.core.context import active, current
from accelopt_nb.sim.core.operands import as_view


def _dst_view(dst: Any, api: str):
    view = as_view(dst)
    if view is None:
        raise current().rule_error(api, f"dst must be a tensor or a view of one, got {type(dst).__name__}",
                                   "nki.isa instructions write into an explicit dst")
    return view


def _with_dst(name: str, old: Callable) -> Callable:
    api = f"nki.isa.{name}"

    def instruction(dst, *args, **kwargs):
        view = _dst_view(dst, api)
        result = old(*args, **kwargs)
        if view.tensor.on_chip:
            _ops.copy_into(view, result, api)
        else:
            _nl.store(view, result)
    instruction.__name__ = name
    instruction.__qualname__ = name
    instruction.__doc__ = f"``{name}`` writing into ``dst`` (NKI 0.2+ calling convention)."
    # the signature the API boundary (api_guard) binds calls with: dst, then the NKI 0.1 parameters
    old_params = [p for n, p in inspect.signature(old).parameters.items() if not n.startswith("_")]
    instruction.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter("dst", inspect.Parameter.POSITIONAL_OR_KEYWORD)] + old_params)
    instruction.__wrapped__ = old  # type: ignore[attr-defined]  # where the forwarded parameters are read
    return instruction


def nc_matmul(dst, stationary, moving, *, is_stationary_onezero: bool = False, is_moving_onezero: bool = False,
              is_transpose: bool = False, accumulate: bool | None = None, tile_position=(), tile_size=(),
              perf_mode=None, **kwargs) -> None:
    api = "nki.isa.nc_matmul"
    view = _dst_view(dst, api)
    result = _isa.nc_matmul(stationary, moving, is_stationary_onezero=is_stationary_onezero,
                            is_moving_onezero=is_moving_onezero, is_transpose=is_transpose,
                            tile_position=tile_position, tile_size=tile_size, perf_mode=perf_mode, _api=api)
    if accumulate is False:
        _ops.copy_into(view, result, api)
    else:
        # True, or None: the PSUM write path overwrites never-written elements and accumulates the rest
        _ops.accumulate_into(view, result)


def memset(dst, value, *, engine=None, **kwargs) -> None:
    view = _dst_view(dst, "nki.isa.memset")
    _ops.copy_into(view, _isa.memset(view.shape, value, view.dtype, engine=engine), "nki.isa.memset")


def dma_copy(dst, src, *, dst_rmw_op=None, oob_mode=None, dge_mode=None, **kwargs) -> None:
    _isa.dma_copy(dst=dst, src=src, dst_rmw_op=dst_rmw_op, oob_mode=oob_mode, dge_mode=dge_mode)


_DST_FIRST = ("nc_transpose", "activation", "activation_reduce", "tensor_tensor", "tensor_scalar",
              "tensor_reduce", "tensor_tensor_scan", "reciprocal", "tensor_copy", "bn_stats", "bn_aggr",
              "tensor_scalar_reduce", "dropout")


def _scalar_tensor_tensor(dst, data, op0, operand0, op1, operand1, reverse0: bool = False, reverse1: bool = False,
                          **kwargs) -> None:
    _with_dst("scalar_tensor_tensor", _isa.scalar_tensor_tensor)(
        dst, data=data, op0=op0, operand0=operand0, op1=op1, operand1=operand1, reverse0=reverse0,
        reverse1=reverse1, **kwargs)


def _dst_leading(name: str, old: Callable) -> Callable:
    """An instruction that takes its ``dst`` in NKI 0.1 already: the same, with ``dst`` its first parameter."""
    params = [p for n, p in inspect.signature(old).parameters.items() if not n.startswith("_")]
    dst = next(p for p in params if p.name == "dst")
    # dst loses its default; the positional parameters keep theirs (local_gather's num_elem_per_idx=1)
    first = [dst.replace(kind=inspect.Parameter.POSITIONAL_OR_KEYWORD, default=inspect.Parameter.empty)] + [
        p for p in params if p is not dst and p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    rest = [p for p in params if p is not dst and p.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD]
    signature = inspect.Signature(first + rest)
    extra = next((p.name for p in rest if p.kind is inspect.Parameter.VAR_KEYWORD), None)

    def instruction(*args, **kwargs):
        arguments = signature.bind(*args, **kwargs).arguments
        more = arguments.pop(extra, {}) if extra else {}
        return old(**arguments, **more)
    instruction.__name__ = name
    instruction.__qualname__ = name
    instruction.__doc__ = f"``{name}`` with ``dst`` first (NKI 0.2+ calling convention)."
    instruction.__signature__ = signature  # type: ignore[attr-defined]
    instruction.__wrapped__ = old  # type: ignore[attr-defined]
    return instruction


# NKI 0.1 instructions that NKI 0.4 removed (today: tensor_copy of an access pattern with scalar_offset=)
_NKI01_ONLY = frozenset({"tensor_copy_dynamic_src", "tensor_copy_dynamic_dst"})


def _build_isa() -> types.ModuleType:
    attrs: dict[str, Any] = {k: getattr(_isa, k) for k in _isa.__all__ if not callable(getattr(_isa, k))
                             or isinstance(getattr(_isa, k), type)}
    # an instruction whose NKI 0.1 form takes dst already needs no listing: dst moves to the front
    attrs.update({n: _dst_leading(n, getattr(_isa, n)) for n in _isa.__all__
                  if inspect.isfunction(getattr(_isa, n)) and getattr(_isa, n).__module__ == _isa.__name__
                  and "dst" in inspect.signature(getattr(_isa, n)).parameters and n not in _NKI01_ONLY})
    attrs.update({n: _with_dst(n, getattr(_isa, n)) for n in _DST_FIRST})
    attrs.update(nc_matmul=nc_matmul, memset=memset, dma_copy=dma_copy, scalar_tensor_tensor=_scalar_tensor_tensor,
                 get_nc_version=_isa.get_nc_version)
    attrs.update({n: getattr(_registers, n) for n in _registers.__all__})   # virtual registers (NKI 0.2+)
    mod = types.ModuleType("nki.isa")
    mod.__dict__.update(attrs)
    return mod


isa_module = _build_isa()


def _module(name: str, attrs: dict[str, Any]) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    return mod


def _constants_module() -> types.ModuleType:
    """``nki.isa.constants``: the ISA's enums (the docs define them in ``nki.isa``; kernels import them from here)."""
    names = ("engine", "dma_engine", "reduce_cmd", "dge_mode", "oob_mode", "matmul_perf_mode", "nc_version")
    return _module("nki.isa.constants", {n: isa_module.__dict__[n] for n in names if n in isa_module.__dict__})


# nki.collectives (Neuron docs: nki.collectives.rst): communication between the ranks of a multi-core launch
_COLLECTIVES = ("all_reduce", "all_gather", "all_gather_v", "reduce_scatter", "all_to_all", "all_to_all_v",
                "collective_permute", "collective_permute_implicit", "collective_permute_implicit_reduce",
                "collective_permute_implicit_current_processing_rank_id", "rank_id", "ReplicaGroup")


def _collectives_module() -> types.ModuleType:
    mod = _module("nki.collectives", {})

    def __getattr__(name: str) -> Any:
        from accelopt_nb.sim.api.guard import UnknownNameError
        if name.startswith("__"):
            raise AttributeError(name)
        what = ("documented NKI API that the simulator does not implement (collective communication between "
                "NeuronCores is not simulated)" if name in _COLLECTIVES
                else f"module 'nki.collectives' has no attribute {name!r} (not an NKI API of this front end)")
        err = UnknownNameError(what, api=f"nki.collectives.{name}")
        rt = active()
        if rt is not None:
            err.locate(*rt.location())
        raise err
    mod.__getattr__ = __getattr__  # type: ignore[attr-defined]
    return mod


# the package: the same language as neuronxcc.nki plus the names NKI 0.1 lacks, the ISA with an explicit dst
language_module = _module("nki.language", {**{k: getattr(_nl, k) for k in _nl.__all__},
                                           **{k: getattr(_nl_nki, k) for k in _nl_nki.__all__},
                                           **{k: getattr(_registers, k) for k in _registers.LANGUAGE},
                                           "__nki_undocumented__": _nl_nki.UNDOCUMENTED})
isa_constants_module = _constants_module()
collectives_module = _collectives_module()
typing_module_nki = _module("nki.typing", dict(typing_module.__dict__, __name__="nki.typing"))
compiler_module_nki = _module("nki.compiler", dict(compiler_module.__dict__, __name__="nki.compiler"))
nki_module = _module("nki", {"jit": jit, "language": language_module, "isa": isa_module, "typing": typing_module_nki,
                             "compiler": compiler_module_nki, "collectives": collectives_module,
                             "simulate": lambda kernel: (kernel if isinstance(kernel, Kernel) else Kernel(kernel)),
                             "baremetal": _compiler.baremetal, "benchmark": _compiler.benchmark,
                             "profile": _compiler.profile})

MODULES: dict[str, types.ModuleType] = {"nki": nki_module, "nki.language": language_module, "nki.isa": isa_module,
                                        "nki.isa.constants": isa_constants_module, "nki.typing": typing_module_nki,
                                        "nki.compiler": compiler_module_nki, "nki.collectives": collectives_module}

# the API boundary: every nl / nisa function checks its call against the NKI docs of this front end
guard.guard_module(language_module, "nki", "language")
guard.guard_module(isa_module, "nki", "isa")
isa_module.constants = isa_constants_module   # `nisa.constants.oob_mode` (after the guard, which keeps no modules)
