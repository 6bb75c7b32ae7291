"""The paper's peak model: roofline **max** of vector FLOPs, matmul FLOPs and minimum HBM bytes.

The roofline itself belongs to the performance model (``accelopt_nb.perf.roofline.peak_latency_s``);
this module only adapts NKIBench's counts to it, and carries the same formula as a fallback so
NKIBench works on its own (for instance in a trimmed install without the performance model).

Fallback constants:

* trn1: the AccelOpt repository's ``calculate_percentage_of_peak.py`` constants, so figures compare
  with the paper: 410 GiB/s HBM, 2*128*1.12e9 vector FLOP/s, 23.75e12 fp32 matmul FLOP/s.
* trn2: derived from public docs (``nki_hw_facts.md`` section 3): 2.9 TB/s / 8 NeuronCores =
  362.5e9 B/s, 2*128*0.96e9 vector FLOP/s (the same formula at the trn2 VectorE clock), and
  19.7e12 fp32 matmul FLOP/s (128*128*2*2.4e9 / 4).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from accelopt_nb.errors import ConfigError

FALLBACK_PEAKS: dict[str, dict[str, float]] = {
    "trn1": {"hbm_bytes_per_s": 410 * 2**30, "vec_flops_per_s": 2 * 128 * 1.12e9, "mm_flops_per_s": 23.75e12},
    "trn2": {"hbm_bytes_per_s": 2.9e12 / 8, "vec_flops_per_s": 2 * 128 * 0.96e9,
             "mm_flops_per_s": 128 * 128 * 2 * 2.4e9 / 4},
}


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


def _fallback_peak_latency_s(vec_flops: float, mm_flops: float, hbm_bytes: float, hw: str) -> tuple[float, str]:
    if hw not in FALLBACK_PEAKS:
        raise ConfigError(f"no peak constants for hardware {hw!r} (known: {', '.join(FALLBACK_PEAKS)})")
    c = FALLBACK_PEAKS[hw]
    terms = {"vec": vec_flops / c["vec_flops_per_s"], "mm": mm_flops / c["mm_flops_per_s"],
             "memory": hbm_bytes / c["hbm_bytes_per_s"]}
    bound = max(terms, key=terms.__getitem__)
    return terms[bound], bound


def peak_latency_s(vec_flops: float, mm_flops: float, hbm_bytes: float, hw: str = "trn1") -> tuple[float, str]:
    """Roofline peak latency in seconds and the bound; the performance model's when installed."""
    try:
        from accelopt_nb.perf.roofline import peak_latency_s as perf_peak
    except ImportError:
        return _fallback_peak_latency_s(vec_flops, mm_flops, hbm_bytes, hw)
    seconds, bound = perf_peak(vec_flops, mm_flops, hbm_bytes, hw)
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
