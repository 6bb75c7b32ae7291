"""The course's measurements: its kernels simulated and timed by the performance model.

Notebooks call these so a table and the exercise check that grades an answer about it come from
one computation (cached per process: the check does not simulate again).
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

# float32 columns per DMA transfer in the transfer-size sweep: 64 B ... 32 KiB per partition
DMA_WIDTHS = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
# moving free sizes of one nc_matmul in the stationary/moving sweep
MOVING_WIDTHS = (16, 32, 64, 128, 256, 512)


@lru_cache(maxsize=None)
def kernel(file: str, name: str):
    """A shipped course kernel, loaded once."""
    from accelopt_nb.kernels import kernel_path
    from accelopt_nb.sim import load_kernel
    return load_kernel(kernel_path(file), name=name)


def profile(file: str, name: str, *args: Any, hw: str = "trn1", **kwargs: Any):
    """The performance model's profile of a course kernel on ``args`` (trace-only simulation)."""
    from accelopt_nb.perf import estimate
    from accelopt_nb.sim import SimOptions, simulate
    res = simulate(kernel(file, name), *args, options=SimOptions(trace_only=True, hw=hw), **kwargs)
    return estimate(res.trace, hw=hw)


def profiles(file: str, name: str, *args: Any, hws: tuple[str, ...], **kwargs: Any) -> dict[str, Any]:
    """One simulation, timed on several hardware configs."""
    from accelopt_nb.perf import estimate
    from accelopt_nb.sim import SimOptions, simulate
    res = simulate(kernel(file, name), *args, options=SimOptions(trace_only=True), **kwargs)
    return {hw: estimate(res.trace, hw=hw) for hw in hws}


@lru_cache(maxsize=None)
def _dma_sweep(hw: str, partitions: int, cols: int, widths: tuple[int, ...]) -> pd.DataFrame:
    x = np.zeros((partitions, cols), np.float32)
    rows = []
    for w in widths:
        p = profile("dma", "copy_tiles", x, hw=hw, width=w)
        moved = p.hbm_read_bytes + p.hbm_write_bytes
        rows.append({"bytes_per_partition": 4 * w, "partitions": partitions, "transfers": p.dma_transfer_count,
                     "latency_us": p.latency * 1e3, "GB_per_s": moved / (p.latency * 1e-3) / 1e9, "bound": p.bound})
    return pd.DataFrame(rows)


def dma_sweep(hw: str = "trn1", partitions: int = 128, cols: int = 32768,
              widths: tuple[int, ...] = DMA_WIDTHS) -> pd.DataFrame:
    """Copy a (partitions, cols) float32 array HBM -> SBUF -> HBM in tiles of each width: bandwidth per transfer size."""
    return _dma_sweep(hw, partitions, cols, tuple(widths)).copy()


def dma_knee(sweep: pd.DataFrame, share: float = 0.9) -> int:
    """The smallest bytes per partition whose copy reaches ``share`` of the sweep's best bandwidth."""
    best = sweep["GB_per_s"].max()
    return int(sweep.loc[sweep["GB_per_s"] >= share * best, "bytes_per_partition"].min())


@lru_cache(maxsize=None)
def _moving_sweep(hw: str, dtype: str, M: int, K: int, N: int, widths: tuple[int, ...]) -> pd.DataFrame:
    import ml_dtypes
    dt = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16}[dtype]
    rng = np.random.default_rng(0)
    aT, b = rng.normal(size=(K, M)).astype(dt), rng.normal(size=(K, N)).astype(dt)
    rows = []
    for w in widths:
        p = profile("tensor_engine", "matmul_moving", aT, b, hw=hw, moving=w)
        per_mm = p.tensor_engine_instruction_time / p.matmul_instruction_count
        rows.append({"moving_columns": w, "matmuls": p.matmul_instruction_count,
                     "tensor_time_us": p.tensor_engine_instruction_time * 1e6,
                     "ns_per_matmul": per_mm * 1e9, "ns_per_column": per_mm / w * 1e9,
                     "latency_us": p.latency * 1e3})
    return pd.DataFrame(rows)


def moving_sweep(hw: str = "trn1", dtype: str = "float32", M: int = 256, K: int = 1024, N: int = 2048,
                 widths: tuple[int, ...] = MOVING_WIDTHS) -> pd.DataFrame:
    """The same matmul cut into nc_matmul instructions of each moving width: TensorE time per column."""
    return _moving_sweep(hw, dtype, M, K, N, tuple(widths)).copy()


def full_rate_width(sweep: pd.DataFrame, tol: float = 0.02) -> int:
    """The smallest moving width whose TensorE time per column is within ``tol`` of the widest's."""
    best = sweep["ns_per_column"].iloc[-1]
    return int(sweep.loc[sweep["ns_per_column"] <= best * (1 + tol), "moving_columns"].min())


__all__ = ["DMA_WIDTHS", "MOVING_WIDTHS", "dma_knee", "dma_sweep", "full_rate_width", "kernel", "moving_sweep",
           "profile", "profiles"]
