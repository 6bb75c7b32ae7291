"""Operands: what an NKI API call's arguments resolve to (a view's data in the engines' compute type, its
validity and its trace region), read through :mod:`accelopt_nb.sim.core.memory`."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from accelopt_nb.sim.core import dtypes as dt
from accelopt_nb.sim.core.context import current
from accelopt_nb.sim.core.indexing import IndexExpr, Mask, broadcast, broadcast_shapes
from accelopt_nb.sim.core.memory import boxed_read, read
from accelopt_nb.sim.core.prims import REBUILD, Lane, call, primitive
from accelopt_nb.sim.core.tensor import Tensor
from accelopt_nb.sim.core.views import View
from accelopt_nb.sim.trace import Region


@dataclass(slots=True, eq=False, repr=False)  # identity semantics, and no arrays in a repr
class Operand:
    """An API argument resolved to data (fp32/int compute type), validity, and trace region."""

    view: View | None
    data: Any
    written: np.ndarray | None
    dtype: Any
    shape: tuple[int, ...]
    scalar: bool = False
    mask: np.ndarray | None = None

    @property
    def buffer(self) -> str | None:
        return None if self.view is None else self.view.tensor.buffer

    @property
    def region(self) -> Region | None:
        if self.view is None:
            return None
        if self.mask is not None:
            try:
                broadcast_shapes([self.mask.shape, self.view.shape])
                return self.view.region(self.mask)  # a masked instruction only touches the masked elements
            except ValueError:
                pass
        return self.view.region()


def as_view(x: Any) -> View | None:
    if isinstance(x, View):
        return x
    if isinstance(x, Tensor):
        return x.full_view()
    return None


def operand(x: Any, api: str, *, allow_scalar: bool = True, allow_hbm: bool = False, mask=None,
            compute: bool = True, box: tuple[slice, ...] | None = None) -> Operand | None:
    """``x`` resolved; with ``box`` (of a tile's mask, see ``kept_box``) its data is that box's values alone
    (``boxed_read``), or None is returned where they cannot be read so."""
    rt = current()
    view = as_view(x)
    if view is None:
        if isinstance(x, (IndexExpr, Mask)):
            raise rt.rule_error(api, "an index expression is not a tile; build index tiles with nisa.iota",
                                "compute APIs take tiles or scalars")
        if allow_scalar and isinstance(x, (int, float, bool, np.number)):
            is_int = isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))
            return Operand(None, x if is_int else np.float32(x), None, dt.scalar_dtype(x), (), scalar=True)
        raise rt.rule_error(api, f"expected a tile, got {type(x).__name__}", "compute APIs take tiles or scalars")
    t = view.tensor
    if not t.on_chip and not allow_hbm:
        raise rt.rule_error(api, f"operand '{t.name}' is in HBM; compute engines only access SBUF and PSUM "
                            "(load it with nl.load first)", "compute APIs operate on SBUF/PSUM tiles")
    if t.on_chip:
        view.check_tile(api)
    if t.kind == "result":
        t._consumed = True
    if box is not None:
        data = boxed_read(view, mask, box)
        return None if data is None else Operand(view, data, None, t.dtype, view.shape, mask=mask)
    data, written = read(view, mask, api)
    if data is not None and compute:
        cdt = dt.compute_dtype(t.dtype)
        if data.dtype != cdt:   # a bf16 / fp8 / int tile: the engines compute in fp32 (recorded: a new array)
            data = call(_upcast, data, dtype=cdt)
    return Operand(view, data, written, t.dtype, view.shape, mask=mask)


@primitive(replay=REBUILD, lane=Lane())
def _upcast(data: np.ndarray, *, dtype: np.dtype) -> np.ndarray:
    return data.astype(dtype)


def combine_written(*ws: np.ndarray | None, shape: tuple[int, ...]) -> np.ndarray | None:
    out = None
    for w in ws:
        if w is None:
            continue
        w = broadcast(w, shape) if w.shape != shape else w
        out = w if out is None else (out & w)
    return out
