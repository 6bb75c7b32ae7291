"""Roofline helpers: the paper's "percentage of peak throughput".

The peak latency of a problem is the longest of its three roofs::

    max(vec_flops / PEAK_VEC, mm_flops / PEAK_MM, hbm_bytes / PEAK_BW)

and the bound is whichever roof that is (``"vec"``, ``"mm"`` or ``"memory"``, the names of the
NKIBench ``bound`` column).

trn1 uses AccelOpt's constants (``calculate_percentage_of_peak.py``, nki_hw_facts.md §3), so
figures compare with the paper: ``PEAK_BW = 410 GiB/s`` (410 * 2**30; AccelOpt's unit, about
7% above the profiler's 410e9), ``PEAK_VEC = 2*128*1.12e9`` (VectorE + ScalarE, 128 lanes, one
element per cycle at the VectorE clock) and ``PEAK_MM = 23.75e12`` (fp32 TensorE: 190 TF bf16
per chip / 2 NCs / 4).

trn2 constants are derived from public docs the same way, for one physical NeuronCore
(AccelOpt compiles with ``--logical-nc-config=1``):

* ``PEAK_MM = 128*128*2*2.4e9 / 4 = 19.66e12`` (fp32, ARCH2: "20 TF");
* ``PEAK_BW = 2.9e12 / 8 = 362.5e9`` B/s (TRN2: 2.9 TB/s per chip, 8 NCs);
* ``PEAK_VEC = 2*128*0.96e9 = 245.8e9`` (AccelOpt's formula with the NC-v3 VectorE clock).
"""
from __future__ import annotations

from dataclasses import dataclass

from accelopt_nb.errors import ConfigError


@dataclass(frozen=True)
class RooflinePeaks:
    name: str
    vec_flops: float      # FLOP/s of the vector engines
    mm_flops: float       # FLOP/s of TensorE (fp32)
    hbm_bandwidth: float  # bytes/s


PEAKS: dict[str, RooflinePeaks] = {
    "trn1": RooflinePeaks("trn1", vec_flops=2 * 128 * 1.12e9, mm_flops=23.75e12, hbm_bandwidth=410 * 2**30),
    "trn2": RooflinePeaks("trn2", vec_flops=2 * 128 * 0.96e9, mm_flops=128 * 128 * 2 * 2.4e9 / 4,
                          hbm_bandwidth=2.9e12 / 8),
}


def peaks(hw: "str | RooflinePeaks" = "trn1") -> RooflinePeaks:
    if isinstance(hw, RooflinePeaks):
        return hw
    name = getattr(hw, "name", hw)     # also accepts an HWConfig
    try:
        return PEAKS[str(name)]
    except KeyError:
        raise ConfigError(f"no roofline constants for hardware {name!r}; known: {', '.join(sorted(PEAKS))}") from None


def peak_latency_s(vec_flops: float, mm_flops: float, hbm_bytes: float,
                   hw: "str | RooflinePeaks" = "trn1") -> tuple[float, str]:
    """The roofline latency in seconds and its bound: ``"vec"``, ``"mm"`` or ``"memory"``."""
    if min(vec_flops, mm_flops, hbm_bytes) < 0:
        raise ValueError("peak_latency_s: FLOP and byte counts must be non-negative")
    p = peaks(hw)
    roofs = (("vec", vec_flops / p.vec_flops), ("mm", mm_flops / p.mm_flops), ("memory", hbm_bytes / p.hbm_bandwidth))
    bound, t = max(roofs, key=lambda kv: kv[1])
    return t, bound


def percent_of_peak(latency_s: float, vec_flops: float, mm_flops: float, hbm_bytes: float,
                    hw: "str | RooflinePeaks" = "trn1") -> float:
    """100 * peak latency / measured latency (100 = at the roofline)."""
    if latency_s <= 0:
        raise ValueError(f"percent_of_peak: latency must be positive, got {latency_s}")
    t, _ = peak_latency_s(vec_flops, mm_flops, hbm_bytes, hw)
    return 100.0 * t / latency_s


__all__ = ["PEAKS", "RooflinePeaks", "peak_latency_s", "peaks", "percent_of_peak"]
