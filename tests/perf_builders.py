"""Hand-made instruction streams for the performance-model tests (no simulator needed)."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from accelopt_nb.sim.trace import Instruction, Region, TensorInfo, Trace

ITEMSIZE = {"float32": 4, "bfloat16": 2, "float16": 2, "int32": 4, "uint8": 1, "float8_e4m3": 1}


class TraceBuilder:
    def __init__(self, name: str = "kernel") -> None:
        self.trace = Trace(kernel_name=name)
        self._next = 1
        self.loops: tuple[tuple[int, str, int], ...] = ()
        self.line: int | None = None

    # ---- tensors -------------------------------------------------------------------------
    def tensor(self, name: str, shape: Sequence[int], dtype: str = "float32", buffer: str = "sbuf",
               kind: str = "internal", par_axis: int = 0) -> int:
        tid = self._next
        self._next += 1
        self.trace.tensors[tid] = TensorInfo(tid, name, buffer, kind, tuple(shape), dtype, ITEMSIZE[dtype], par_axis,
                                             len(self.trace.instructions), loops=self.loops, line=self.line)
        return tid

    def hbm(self, name: str, shape: Sequence[int], dtype: str = "float32", kind: str = "input") -> int:
        return self.tensor(name, shape, dtype, "hbm", kind)

    def region(self, tid: int, lo: Sequence[int] | None = None, hi: Sequence[int] | None = None,
               block: int | None = None) -> Region:
        info = self.trace.tensors[tid]
        lo = tuple(lo) if lo is not None else (0,) * len(info.shape)
        hi = tuple(hi) if hi is not None else tuple(info.shape)
        elems = int(np.prod([h - l for l, h in zip(lo, hi)]))
        if block is None:
            if info.par_axis == 0:
                block = 0
            else:
                dims = info.shape[: info.par_axis]
                if all(h - l == 1 for l, h in zip(lo[: info.par_axis], hi[: info.par_axis])):
                    block = int(np.ravel_multi_index(lo[: info.par_axis], dims))
                else:
                    block = -1
        return Region(tid, info.buffer, lo, hi, elems, info.itemsize, block)

    def block(self, tid: int, *idx: int) -> Region:
        info = self.trace.tensors[tid]
        lo = tuple(idx) + (0,) * (len(info.shape) - len(idx))
        hi = tuple(i + 1 for i in idx) + tuple(info.shape[len(idx):])
        return self.region(tid, lo, hi)

    # ---- instructions --------------------------------------------------------------------
    def emit(self, engine: str, op: str, reads: Sequence[Region], writes: Sequence[Region], nparts: int,
             free: int, in_dtypes: Sequence[str] = ("float32",), out_dtype: str = "float32",
             accumulate: bool = False, **attrs) -> Instruction:
        ins = Instruction(len(self.trace.instructions), engine, op, op, tuple(reads), tuple(writes), nparts, free,
                          tuple(in_dtypes), out_dtype, accumulate, dict(attrs), self.loops, "kernel.py", self.line)
        self.trace.instructions.append(ins)
        return ins

    def dma(self, dst: Region, src: Region, *, contiguous_bytes: int | None = None, **attrs) -> Instruction:
        onchip = dst if dst.buffer != "hbm" else src
        info = self.trace.tensors[onchip.tensor]
        parts = onchip.hi[info.par_axis] - onchip.lo[info.par_axis]
        nbytes = src.nbytes
        bpp = nbytes // max(parts, 1)
        op = "dma_load" if src.buffer == "hbm" else "dma_store" if dst.buffer == "hbm" else "dma_copy"
        return self.emit("dma", op, [src], [dst], parts, bpp // src.itemsize, in_dtypes=(info.dtype,),
                         out_dtype=info.dtype, bytes=nbytes, partitions=parts, bytes_per_partition=bpp,
                         contiguous_bytes=contiguous_bytes if contiguous_bytes is not None else bpp,
                         src=src.buffer, dst=dst.buffer, **attrs)

    def vector(self, op: str, reads: Sequence[Region], writes: Sequence[Region], free: int, partitions: int = 128,
               dtype: str = "float32", engine: str = "vector", **attrs) -> Instruction:
        return self.emit(engine, op, reads, writes, partitions, free, in_dtypes=(dtype,) * len(reads),
                         out_dtype=dtype, num_inputs=len(reads),
                         psum_input=any(r.buffer == "psum" for r in reads), **attrs)

    def matmul(self, out: Region, stationary: Region, moving: Region, k: int, m: int, n: int,
               dtype: str = "bfloat16", accumulate: bool = True, **attrs) -> Instruction:
        return self.emit("tensor", "nc_matmul", [stationary, moving], [out], m, n, in_dtypes=(dtype, dtype),
                         out_dtype="float32", accumulate=accumulate, k=k, m=m, n=n, dtype=dtype, **attrs)


__all__ = ["TraceBuilder"]
