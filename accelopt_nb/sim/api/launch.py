"""SPMD launch grids: ``kernel[4, 2](...)``, ``kernel[nl.nc(2), 2]``, ``kernel[nl.spmd_dim(nl.nc(2), 2), 2]``.

A launch runs every program of the grid, in row-major order, inside one simulated launch (one
trace). ``nl.nc(n)`` marks a grid (sub-)dimension whose programs go to ``n`` physical NeuronCores;
``nl.spmd_dim(*parts)`` builds one grid dimension out of sub-dimensions (outermost first), so
``nl.spmd_dim(nl.nc(2), 2)`` is a dimension of 4 whose programs 0-1 run on core 0 and 2-3 on
core 1. The core of every program is recorded in the trace (``Trace.program_cores``) for the
performance model.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Any, Callable

import numpy as np

from accelopt_nb.errors import KernelError
from accelopt_nb.sim.core.runtime import LoopFrame, Runtime

_GRID_RULE = "launch grid entries are positive ints, nl.nc(n) or nl.spmd_dim(...)"


@dataclass(frozen=True)
class NC:
    """``nl.nc(n)``: a launch-grid dimension distributed over ``n`` physical NeuronCores."""

    size: int

    def __int__(self) -> int:
        return self.size

    def __index__(self) -> int:
        return self.size


@dataclass(frozen=True)
class SpmdDim:
    """``nl.spmd_dim(*parts)``: one launch-grid dimension tiled into sub-dimensions (outermost first)."""

    parts: tuple[int | NC, ...]

    @property
    def size(self) -> int:
        return prod(int(p) for p in self.parts)

    def __int__(self) -> int:
        return self.size

    def __index__(self) -> int:
        return self.size


def nc(n: int) -> NC:
    return NC(_positive(n, "nl.nc"))


def spmd_dim(*parts: Any) -> SpmdDim:
    if not parts:
        raise KernelError("nl.spmd_dim needs at least one sub-dimension", api="nl.spmd_dim", rule=_GRID_RULE)
    return SpmdDim(tuple(p if isinstance(p, NC) else _positive(p, "nl.spmd_dim") for p in parts))


def _positive(n: Any, api: str) -> int:
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or int(n) <= 0:
        raise KernelError(f"{api}: launch grid size must be a positive int, got {n!r}", api=api, rule=_GRID_RULE)
    return int(n)


@dataclass(frozen=True)
class Grid:
    """A parsed launch grid: its shape, and which physical core runs each program."""

    shape: tuple[int, ...]
    dims: tuple[Any, ...] = ()

    @property
    def num_cores(self) -> int:
        return prod(p.size for p in self._core_parts()) or 1

    def _core_parts(self) -> list[NC]:
        out = []
        for d in self.dims:
            parts = d.parts if isinstance(d, SpmdDim) else (d,)
            out.extend(p for p in parts if isinstance(p, NC))
        return out

    def core_of(self, pid: tuple[int, ...]) -> int:
        """Flat index over every nl.nc sub-dimension (outer dimensions first); 0 without any."""
        core = 0
        for d, i in zip(self.dims, pid):
            parts = d.parts if isinstance(d, SpmdDim) else (d,)
            sizes = [int(p) for p in parts]
            for p, sub in zip(parts, np.unravel_index(int(i), sizes)):
                if isinstance(p, NC):
                    core = core * p.size + int(sub)
        return core


def parse_grid(entries: Any) -> Grid:
    items = entries if isinstance(entries, tuple) else (entries,)
    dims = tuple(d if isinstance(d, (NC, SpmdDim)) else _positive(d, "kernel[grid]") for d in items)
    return Grid(shape=tuple(int(d) for d in dims), dims=dims)


class _ProgramFrame:
    """While one SPMD program runs: its ids, and an ``spmd`` loop frame outermost in the trace."""

    def __init__(self, rt: Runtime, grid: Grid, pid: tuple[int, ...]) -> None:
        self.rt, self.grid, self.pid = rt, grid, pid

    def __enter__(self) -> None:
        rt = self.rt
        rt.program_id = self.pid
        rt.shared_hbm_cursor = 0
        flat = int(np.ravel_multi_index(self.pid, self.grid.shape))
        self.frame = LoopFrame(uid=rt.new_uid(), kind="spmd", iteration=flat)
        rt.loops.insert(0, self.frame)
        rt._refresh_loop_key()
        if self.grid.num_cores > 1:
            rt.trace.program_cores[flat] = self.grid.core_of(self.pid)

    def __exit__(self, *exc: Any) -> bool:
        self.rt.loops.remove(self.frame)
        self.rt._refresh_loop_key()
        return False


def apply_directives(rt: Runtime, fn: Callable) -> None:
    """The ``nki.compiler`` directives ``fn`` is decorated with (``api/compiler.py`` marks them), for its launch:
    ``force_auto_alloc`` while it runs; ``skip_middle_end_transformations`` marks the whole trace (the model
    schedules its loops without the middle end's rules, perf_model.md §3d)."""
    rt.set_force_auto_alloc(getattr(fn, "_nki_force_auto_alloc", False))
    if getattr(fn, "_nki_skip_middle_end", False):
        rt.trace.skip_middle_end = True


def run_grid(rt: Runtime, fn: Callable, args: list, kwargs: dict, grid: Grid) -> Any:
    """Run ``fn`` once per program of ``grid`` (all in kernel mode); return the last program's outputs.

    Every program allocates the kernel's ``shared_hbm`` outputs; they are matched by creation order,
    so all programs write into one set of output tensors, fresh for each launch.
    """
    saved = (rt.grid, rt.program_id, rt.shared_hbm, rt.shared_hbm_cursor, rt.in_kernel, rt.num_cores)
    saved_auto_alloc = rt.force_auto_alloc
    rt.grid, rt.shared_hbm, rt.in_kernel = grid.shape, [], True
    apply_directives(rt, fn)
    rt.num_cores = grid.num_cores
    rt.trace.grid = grid.shape
    rt.trace.num_cores = max(rt.trace.num_cores, grid.num_cores)
    outputs = None
    try:
        if not grid.shape:
            rt.program_id, rt.shared_hbm_cursor = (), 0
            return fn(*args, **kwargs)
        for pid in np.ndindex(*grid.shape):
            with _ProgramFrame(rt, grid, tuple(int(i) for i in pid)):
                outputs = fn(*args, **kwargs)
        return outputs
    finally:
        rt.grid, rt.program_id, rt.shared_hbm, rt.shared_hbm_cursor, rt.in_kernel, rt.num_cores = saved
        if rt.force_auto_alloc != saved_auto_alloc:
            rt.set_force_auto_alloc(saved_auto_alloc)
