"""The instruction stream: what the simulator records and the performance model consumes.

This module is the contract between layer 1 (the functional simulator) and layer 2 (the
Trainium performance model). It holds plain data only, no simulation logic.

Conventions
-----------
* A *tensor* is one logical allocation: a kernel input or output in HBM, an ``nl.ndarray``
  / ``nl.zeros`` buffer, or the fresh result tile of a compute API. Each has a unique id.
* On-chip tensors may have *block* dimensions in front of the partition dimension
  (``(B0, B1, par_dim(P), F0, F1)``). Blocks are logical: the performance model decides the
  physical footprint from the liveness of each block.
* A :class:`Region` is the part of one tensor an instruction touches, as a half-open box
  ``[lo, hi)`` over *all* the tensor's dimensions (block dims included), plus the exact number
  of elements touched (a strided or gathered access touches fewer elements than its box).
* Engines are named ``tensor``, ``vector``, ``scalar``, ``gpsimd`` and ``dma``.
* ``loops`` lists the enclosing kernel loops from outermost to innermost as
  ``(loop_uid, kind, iteration)``; ``kind`` is ``affine``, ``sequential``, ``static`` or ``spmd``.
  ``loop_uid`` identifies one *instance* of a loop (a loop nested in another loop gets a new uid
  for every outer iteration).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Iterator

ENGINES = ("tensor", "vector", "scalar", "gpsimd", "dma")
BUFFERS = ("hbm", "sbuf", "psum")


@dataclass(slots=True)
class TensorInfo:
    """One logical allocation. A result tile that no instruction reads or writes (its instruction computed
    straight into the destination it was assigned to, ``buf[...] = nl.exp(t)``) is none: the compiler never
    allocates it. Tensors are in id (allocation) order."""

    id: int
    name: str
    buffer: str                # "hbm" | "sbuf" | "psum"
    kind: str                  # "input" | "output" | "internal" | "constant" | "result"
    shape: tuple[int, ...]
    dtype: str                 # numpy/ml_dtypes name: "float32", "bfloat16", ...
    itemsize: int
    par_axis: int              # index of the partition dim (= number of block dims); 0 for HBM
    alloc_index: int           # number of instructions recorded before this allocation
    loops: tuple[tuple[int, str, int], ...] = ()
    line: int | None = None
    # explicit placement (nki.compiler sbuf/psum alloc or mod_alloc), e.g. {"kind": "mod_alloc",
    # "buffer": "sbuf", "base_addr": 0, "num_free_tiles": (2,), ...}; None = placed by the compiler.
    # A pinned tensor is never spilled.
    allocation: dict[str, Any] | None = None

    @property
    def num_blocks(self) -> int:
        n = 1
        for d in self.shape[: self.par_axis]:
            n *= d
        return n

    @property
    def partitions(self) -> int:
        """Partition count of one block tile (1 for a 1-D HBM tensor)."""
        if self.buffer == "hbm":
            return self.shape[0] if self.shape else 1
        return self.shape[self.par_axis] if len(self.shape) > self.par_axis else 1

    @property
    def bytes_per_partition(self) -> int:
        """Bytes per partition of one block tile (on-chip) or of one row (HBM)."""
        n = self.itemsize
        for d in self.shape[self.par_axis + 1:]:
            n *= d
        return n

    @property
    def block_bytes(self) -> int:
        return self.partitions * self.bytes_per_partition

    @property
    def total_bytes(self) -> int:
        return self.num_blocks * self.block_bytes


@dataclass(slots=True)
class Region:
    """The part of one tensor an instruction reads or writes."""

    tensor: int                        # TensorInfo.id
    buffer: str                        # "hbm" | "sbuf" | "psum"
    lo: tuple[int, ...]                # inclusive box corner, one entry per tensor dim
    hi: tuple[int, ...]                # exclusive box corner
    elements: int                      # elements actually touched
    itemsize: int
    block: int = 0                     # flat block index when the access lies in one block, else -1

    @property
    def nbytes(self) -> int:
        return self.elements * self.itemsize

    def overlaps(self, other: "Region") -> bool:
        if self.tensor != other.tensor:
            return False
        for a0, a1, b0, b1 in zip(self.lo, self.hi, other.lo, other.hi):
            if a1 <= b0 or b1 <= a0:
                return False
        return True


@dataclass(slots=True)
class Instruction:
    """One hardware instruction (or DMA transfer) issued by the kernel.

    ``partitions`` and ``free_elems`` describe the instruction's iteration space: the
    partition count and the number of elements per partition it processes (the N of the
    ISA cost formulas). ``attrs`` holds op-specific facts, documented per op below.

    * ``nc_matmul`` (engine tensor): ``k`` (contraction = partitions of both operands),
      ``m`` (stationary free size = output partitions), ``n`` (moving free size),
      ``dtype`` (operand dtype), ``is_transpose``, ``stationary_onezero``, ``moving_onezero``.
    * DMA ops (``dma_load``, ``dma_store``, ``dma_copy``, ``dma_transpose``): ``bytes``,
      ``partitions`` (partitions on the on-chip side), ``bytes_per_partition``,
      ``contiguous_bytes`` (length of the innermost contiguous HBM run), ``src``/``dst`` buffers,
      ``transpose`` (bool).
    * element-wise ops: ``alu`` / ``func`` names, ``num_inputs``, ``psum_input`` (bool).
    """

    index: int
    engine: str
    op: str
    api: str
    reads: tuple[Region, ...]
    writes: tuple[Region, ...]
    partitions: int
    free_elems: int
    in_dtypes: tuple[str, ...]
    out_dtype: str
    accumulate: bool = False           # the write accumulates (+=) instead of overwriting
    attrs: dict[str, Any] = field(default_factory=dict)
    loops: tuple[tuple[int, str, int], ...] = ()
    file: str | None = None
    line: int | None = None


@dataclass(slots=True)
class Trace:
    """The instruction stream of one kernel launch (all SPMD instances, in program order)."""

    kernel_name: str
    instructions: list[Instruction] = field(default_factory=list)
    tensors: dict[int, TensorInfo] = field(default_factory=dict)
    grid: tuple[int, ...] = ()
    trace_only: bool = False
    num_cores: int = 1                                         # physical NeuronCores used (nl.nc launch grids)
    program_cores: dict[int, int] = field(default_factory=dict)  # flat SPMD program id -> core, when num_cores > 1
    replayed: int = 0          # instructions extrapolated by loop replay, not executed (sim/replay/loops.py)
    # the kernel is marked nki.compiler.skip_middle_end_transformations: neuronx-cc's middle end (its loop-level
    # optimizations, where sequential_range differs from affine_range) does not run on it (perf_model.md §3d)
    skip_middle_end: bool = False

    def __len__(self) -> int:
        return len(self.instructions)

    def __iter__(self) -> Iterator[Instruction]:
        return iter(self.instructions)

    def by_engine(self) -> dict[str, list[Instruction]]:
        out: dict[str, list[Instruction]] = {e: [] for e in ENGINES}
        for ins in self.instructions:
            out.setdefault(ins.engine, []).append(ins)
        return out

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for ins in self.instructions:
            counts[ins.op] = counts.get(ins.op, 0) + 1
        return counts

    def dtypes_used(self) -> set[str]:
        """Every dtype a tensor or instruction of the kernel uses (for precision checks)."""
        used = {t.dtype for t in self.tensors.values()}
        for ins in self.instructions:
            used.update(ins.in_dtypes)
            used.add(ins.out_dtype)
        return used


def trace_fields(trace: Trace) -> tuple:
    """Everything a trace records except ``replayed``, as plain data: what loop replay must leave unchanged."""
    return ([dataclasses.astuple(i) for i in trace.instructions],
            [dataclasses.astuple(t) for t in trace.tensors.values()], list(trace.tensors), trace.kernel_name,
            trace.grid, trace.trace_only, trace.num_cores, trace.program_cores, trace.skip_middle_end)
