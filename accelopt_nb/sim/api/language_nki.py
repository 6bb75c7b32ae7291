"""``nki.language`` names of the standalone ``nki`` front end that ``neuronxcc.nki`` (NKI 0.1) does not have.

The rest of ``nki.language`` is the shared :mod:`accelopt_nb.sim.api.language`; ``api.facade_nki`` adds these.
"""
from __future__ import annotations

from math import prod as _prod
from typing import Any

import numpy as _np

from accelopt_nb.sim.api import isa as _isa
from accelopt_nb.sim.api import language as _nl
from accelopt_nb.sim.core import dtypes as _dt
from accelopt_nb.sim.core.context import current as _current
from accelopt_nb.sim.core.limits import PMAX as _PMAX
from accelopt_nb.sim.core.runtime import Buffer as _Buffer
from accelopt_nb.sim.core.runtime import NoReorder as _NoReorder
from accelopt_nb.sim.core.tensor import Tensor as _Tensor
from accelopt_nb.sim.core.views import View as _View

# ---- dtypes (the fp8 formats and their ranges: see sim/core/dtypes.py) -------------------------------
float8_e4m3fn = _dt.float8_e4m3fn
float8_e8m0fnu = _dt.float8_e8m0fnu
float8_e5m2_x4 = _dt.float8_e5m2_x4
float8_e4m3fn_x4 = _dt.float8_e4m3fn_x4
float4_e2m1fn_x4 = _dt.float4_e2m1fn_x4
bool = _dt.bool_   # noqa: A001 - not in the docs, but the NKI library spells nl.bool_ this way
UNDOCUMENTED = ("bool",)   # names the facade keeps although the docs do not list them (real kernels use them)


# ---- classes ------------------------------------------------------------------------------------------
class NKIObject:
    """``nl.NKIObject``: the base class of kernel classes (configurations, dataclasses).

    The NKI language guide ("Class Support"): every NKI class behaves as a data class, with or without
    ``@dataclass``: unless the class defines ``__init__`` itself, the compiler gives it one that takes each class
    field in order, by position or keyword (a field without a default defaults to None), sets it on the object and
    calls ``__post_init__``. Fields are the class's annotated names and its other class-level values (the NKI
    library declares dataclass fields without annotations). Such objects live at trace time, as Python objects.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__init__" not in cls.__dict__:
            cls.__init__ = _nki_init     # before @dataclass runs: it keeps an __init__ the class already has

    def __init__(self, **kwargs: Any) -> None:
        for key, value in kwargs.items():
            setattr(self, key, value)


def _class_fields(cls: type) -> list[tuple[str, Any]]:
    """(name, default) of every field of an NKI class, base classes first; a ``_MISSING`` default is None."""
    import dataclasses
    import inspect
    fields: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        if klass is object or klass is NKIObject or not issubclass(klass, NKIObject):
            continue
        body = klass.__dict__
        for name in body.get("__annotations__", {}):
            fields[name] = body.get(name, _MISSING)
        for name, value in body.items():
            if name.startswith("__") or name in fields or inspect.isroutine(value) or isinstance(
                    value, (property, classmethod, staticmethod, type)) or name == "coverage_note":
                continue
            fields[name] = value
        if dataclasses.is_dataclass(klass):
            for f in dataclasses.fields(klass):
                if f.name in fields:
                    fields[f.name] = (f.default if f.default is not dataclasses.MISSING else
                                      _Factory(f.default_factory) if f.default_factory is not dataclasses.MISSING
                                      else _MISSING)
    return list(fields.items())


class _Factory:
    def __init__(self, make: Any) -> None:
        self.make = make


_MISSING = object()


def _nki_init(self, *args: Any, **kwargs: Any) -> None:
    fields = _class_fields(type(self))
    if len(args) > len(fields):
        raise TypeError(f"{type(self).__name__}() takes {len(fields)} fields, got {len(args)} positional arguments")
    names = [n for n, _ in fields]
    unknown = [k for k in kwargs if k not in names]
    if unknown:
        raise TypeError(f"{type(self).__name__}() got an unexpected keyword argument {unknown[0]!r}")
    for i, (name, default) in enumerate(fields):
        if i < len(args):
            if name in kwargs:
                raise TypeError(f"{type(self).__name__}() got multiple values for argument {name!r}")
            value = args[i]
        elif name in kwargs:
            value = kwargs[name]
        else:
            value = None if default is _MISSING else default.make() if isinstance(default, _Factory) else default
        object.__setattr__(self, name, value)    # as a frozen dataclass's own __init__ does
    post = getattr(self, "__post_init__", None)
    if post is not None:
        post()


class _TensorType(type):
    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, (_Tensor, _View))

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, (_Tensor, _View))


def _tensor_api_note() -> str:
    from accelopt_nb.sim.api.access import NKI_TENSOR_API
    have = [n for n in NKI_TENSOR_API if hasattr(_Tensor, n) and hasattr(_View, n)]
    lacking = [n for n in NKI_TENSOR_API if n not in have]
    return (f"tensor methods and attributes simulated: {', '.join(have)} (view and reinterpret_cast between dtypes "
            f"of one size); refused by name: {', '.join(lacking)}")


class NkiTensor(NKIObject, metaclass=_TensorType):
    """``nl.NkiTensor``: the type of every tensor and tensor view a kernel holds (``isinstance`` and annotations).

    Tensors are made by ``nl.ndarray`` and friends; this class only names their type.
    """

    coverage_note = _tensor_api_note()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        from accelopt_nb.errors import UnsupportedAPIError
        raise UnsupportedAPIError("binding a tensor to a backend storage handle is not simulated; allocate with "
                                  "nl.ndarray", api="nki.language.NkiTensor")


# ---- math ---------------------------------------------------------------------------------------------------
gelu_apprx_sigmoid_dx = _nl._unary("gelu_apprx_sigmoid_dx")   # also an activation: nisa.activation(op=...)


# ---- scheduling -------------------------------------------------------------------------------------------
def no_reorder() -> _NoReorder:
    """Keep the operations of a ``with`` block in program order (a dependency edge between every two of them)."""
    return _NoReorder()


# ---- buffer predicates ------------------------------------------------------------------------------------
def _buffer_name(buffer: Any) -> str:
    if isinstance(buffer, _Buffer):
        return buffer.name
    return str(buffer)


def is_psum(buffer) -> bool:
    """Whether ``buffer`` is PSUM."""
    return _buffer_name(buffer) == "psum"


def is_sbuf(buffer) -> bool:
    """Whether ``buffer`` is SBUF."""
    return _buffer_name(buffer) == "sbuf"


def is_hbm(buffer) -> bool:
    """Whether ``buffer`` is device memory (``nl.hbm``, ``nl.shared_hbm`` or ``nl.private_hbm``)."""
    return _buffer_name(buffer) in ("hbm", "shared_hbm", "private_hbm")


def is_on_chip(buffer) -> bool:
    """Whether ``buffer`` is on chip (SBUF or PSUM)."""
    return _buffer_name(buffer) in ("sbuf", "psum")




_tile_size = _nl.tile_size


# ---- creation ----------------------------------------------------------------------------------------------
_ON_CHIP_BYTES = {"sbuf": _tile_size.sbuf_fmax_bytes, "psum": _tile_size.psum_num_banks * _tile_size.psum_bank_fmax_bytes}


def ndarray(shape, dtype, buffer=None, name: str = "", address=None):
    """``nl.ndarray``; ``address=(partition_offset, free_offset)`` places an on-chip tensor by hand.

    The simulator gives every tensor its own memory either way (like AWS's own simulator, it does not model
    tensors that share addresses); the placement is checked against the buffer's bounds and kept in the trace
    (``TensorInfo.allocation``), where the performance model never spills it.
    """
    rt = _current()
    t = _nl._allocate("nl.ndarray", shape, dtype, buffer, name, None)
    if address is None:
        return t
    api = "nki.language.ndarray"
    try:
        partition, offset = (int(a) for a in address)
    except (TypeError, ValueError):
        raise rt.rule_error(api, f"address must be (partition_offset, free_offset), got {address!r}",
                            "an address is a partition and a byte offset within it") from None
    if not t.on_chip:
        raise rt.rule_error(api, f"address= places on-chip tensors; '{t.name}' is in {t.buffer.upper()}",
                            "only SBUF and PSUM tensors are placed by address")
    p = t.shape[t.par_axis]
    per_partition = _dt.itemsize(t.dtype) * _prod(t.shape[t.par_axis + 1:]) * _prod(t.shape[:t.par_axis])
    limit = _ON_CHIP_BYTES[t.buffer]
    if partition < 0 or partition + p > _PMAX:
        raise rt.rule_error(api, f"partitions {partition}..{partition + p - 1} of '{t.name}' are outside the "
                            f"{_PMAX} partitions", "an on-chip tensor lies within the 128 partitions")
    if offset < 0 or offset + per_partition > limit:
        raise rt.rule_error(api, f"bytes {offset}..{offset + per_partition - 1} of each partition of '{t.name}' are "
                            f"outside the {limit} bytes of a {t.buffer.upper()} partition",
                            "an on-chip tensor lies within its buffer")
    info = rt.trace.tensors.get(t.id)
    if info is not None and not rt.force_auto_alloc:
        info.allocation = {"kind": "address", "buffer": t.buffer, "partition": partition, "address": offset}
    return t


def shared_constant(constant, dtype=None, **kwargs):
    """``nl.shared_constant``: an HBM tensor of constant data, given as an array or (today's front end) as the path
    of a ``.npy`` file, as the NKI library's top-k passes its rotation matrices."""
    import os
    if isinstance(constant, (str, os.PathLike)):
        path = os.fspath(constant)
        try:
            constant = _np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise _current().rule_error("nki.language.shared_constant", f"cannot read the constant file {path!r}: "
                                        f"{exc}", "a constant given by path is a .npy file") from None
    return _nl.shared_constant(constant, dtype=dtype, **kwargs)


def shared_identity_matrix(n, dtype=_dt.uint8, dst=None):
    """``nl.shared_identity_matrix``: an ``n`` x ``n`` identity in SBUF (in ``dst`` when given), loaded by DMA from
    the constant the compiler keeps in device memory."""
    identity = _nl.shared_constant(_np.eye(int(n)), dtype=dtype)
    if dst is None:
        return _nl.load(identity)
    _isa.dma_copy(dst=dst, src=identity)
    return dst


__all__ = [n for n in dir() if not n.startswith("_") and n not in ("annotations", "Any", "UNDOCUMENTED")]
