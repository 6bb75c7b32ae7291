"""The paper's peak model: roofline **max** of vector FLOPs, matmul FLOPs and minimum HBM bytes.

The roofline and its per-hardware constants belong to the performance model
(:mod:`accelopt_nb.perf.roofline`, with their sources); this module adapts NKIBench's counts to it.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from accelopt_nb.perf.roofline import peak_latency_s as _roofline_peak_latency_s


@dataclass(frozen=True)
class Peak:
    """Peak (roofline) latency of one problem instance on one hardware generation."""

    seconds: float
    bound: str          # "vec" | "mm" | "memory": the largest roofline term
    vec_flops: float
    mm_flops: float
    hbm_bytes: float
    hw: str

    @property
    def ms(self) -> float:
        return self.seconds * 1e3

    def to_dict(self) -> dict:
        return {**asdict(self), "ms": self.ms}


def peak_latency_s(vec_flops: float, mm_flops: float, hbm_bytes: float, hw: str = "trn1") -> tuple[float, str]:
    """Roofline peak latency in seconds and the bound (the performance model's roofline)."""
    seconds, bound = _roofline_peak_latency_s(vec_flops, mm_flops, hbm_bytes, hw)
    return float(seconds), _normalise_bound(str(bound))


def _normalise_bound(bound: str) -> str:
    # The paper's CSV writes "memory", "mm" and "vec"; accept common synonyms from other code.
    b = bound.lower()
    if b in ("mem", "memory", "hbm", "bandwidth", "bw"):
        return "memory"
    if b in ("mm", "matmul", "tensor", "pe"):
        return "mm"
    if b in ("vec", "vector", "vector+scalar"):
        return "vec"
    return b


def compute_peak(vec_flops: float, mm_flops: float, hbm_bytes: float, hw: str = "trn1") -> Peak:
    seconds, bound = peak_latency_s(vec_flops, mm_flops, hbm_bytes, hw)
    return Peak(seconds=seconds, bound=bound, vec_flops=float(vec_flops), mm_flops=float(mm_flops),
                hbm_bytes=float(hbm_bytes), hw=hw)
