"""Error bars on an estimated latency, taken from held-out residuals of the kernel's class.

A single "±11%" hides that the model is good on some kinds of kernels and poor on others. Every
:class:`~accelopt_nb.perf.profile.Profile` therefore carries a :class:`LatencyUncertainty`:

* ``kernel_class`` — what bounds the kernel in the model's own schedule (:func:`classify`):
  ``matmul`` (TensorE-bound), ``fused`` (TensorE and Vector/Scalar both substantial),
  ``elementwise`` (Vector/Scalar/GpSimd-bound, no real matmul work), ``dma`` (data movement
  bound), ``overhead`` (fixed per-instruction or per-DMA costs dominate: tiny instructions or
  tiny transfers, where compiler fusion and overlap make the code as written a poor guide).
* ``low``, ``high`` — a multiplicative interval on the latency: the measured latency lies in
  ``[latency * low, latency * high]`` for a fraction ``coverage`` of the held-out kernels of that
  class (a log-normal prediction interval over the residuals measured/model, see
  :func:`interval_from_residuals`). It need not contain 1: a class the model is biased on says so.
* ``n``, ``sources`` — how many held-out residuals the interval rests on and which corpus sources
  they come from; ``basis`` says whether they are the class's own (``held-out``), all classes of
  the hardware pooled because the class has only 1-3 of its own (``pooled``, widened to cover
  those and to the class's prior), or none of its own on this hardware (``prior``: a wide stated
  interval, :func:`prior`).

The numbers live in ``accelopt_nb/perf/data/uncertainty.yaml``, written by
``benchmarks/perf_fidelity.py --write-uncertainty`` from residuals of kernels outside every fit
(docs/perf_model.md, "Held-out protocol"). Refining the numbers never changes this record's shape.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import yaml

DATA = Path(__file__).with_name("data") / "uncertainty.yaml"
RESIDUALS = Path(__file__).with_name("data") / "heldout.csv"     # the residuals behind DATA, one per kernel

KERNEL_CLASSES: tuple[str, ...] = ("matmul", "fused", "elementwise", "dma", "overhead")
CLASS_LABEL = {"matmul": "matmul-bound", "fused": "fused matmul+vector", "elementwise": "element-wise",
               "dma": "DMA-bound", "overhead": "fixed-cost-bound"}
COVERAGE = 0.8                 # the central share of held-out residuals the interval covers
MIN_CLASS_RESIDUALS = 4        # fewer than this: pool every class of the hardware
# no measurement of this class on this hardware: say so with a wide interval rather than a number we do not
# have (docs/perf_model.md §9: never narrower than this, nor than the class's bar on other hardware widened
# by the hardware's model_error, the measured error of the cross-hardware step)
PRIOR_LOW, PRIOR_HIGH = 0.5, 2.0


@dataclass(frozen=True)
class LatencyUncertainty:
    """The error bar of one estimated latency (see the module docstring)."""

    kernel_class: str               # one of KERNEL_CLASSES
    low: float                      # measured / model at the interval's lower end (e.g. 0.85)
    high: float                     # ... and upper end (e.g. 1.20)
    coverage: float                 # share of held-out kernels of the class inside [low, high] (0.8)
    n: int                          # held-out residuals the interval rests on (0 for a prior)
    sources: tuple[str, ...]        # corpus sources of those residuals
    basis: str                      # "held-out" | "pooled" | "prior"

    def interval_ms(self, latency_ms: float) -> tuple[float, float]:
        """The latency interval in ms for an estimate of ``latency_ms``."""
        return latency_ms * self.low, latency_ms * self.high

    @property
    def error_factor(self) -> float:
        """The larger side of the interval as one factor (>= 1): max(high, 1/low)."""
        return max(self.high, 1.0 / self.low, 1.0)

    def describe(self) -> str:
        """One phrase for people and agents, e.g. 'matmul-bound: x0.85-x1.20 (80% of 9 held-out)'."""
        label = CLASS_LABEL.get(self.kernel_class, self.kernel_class)
        span = f"x{self.low:.2f}-x{self.high:.2f}"
        if self.basis == "prior":
            return f"{label}: {span} (prior: no held-out kernel of this class measured on this hardware)"
        if self.basis == "pooled":
            return (f"{label}: {span} (few held-out kernels of this class: all {self.n} of this hardware pooled, "
                    "no narrower than a prior)")
        return f"{label}: {span} ({100 * self.coverage:.0f}% of {self.n} held-out)"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["sources"] = list(self.sources)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "LatencyUncertainty":
        return cls(kernel_class=str(d["kernel_class"]), low=float(d["low"]), high=float(d["high"]),
                   coverage=float(d["coverage"]), n=int(d["n"]), sources=tuple(str(s) for s in d.get("sources", ())),
                   basis=str(d["basis"]))


# ---- the kernel's class, from the model's own schedule ---------------------------------------
@dataclass(frozen=True)
class ClassInputs:
    """What :func:`classify` reads (all times in seconds)."""

    total: float
    tensor_busy: float               # TensorE instruction time (transposes included: they occupy it too)
    vector_busy: float               # the busiest of VectorE / ScalarE / GpSimdE
    vector_overhead: float           # fixed-overhead part of that engine's time
    dma_active: float                # time with at least one DMA moving data
    dma_transfers: int
    dma_issue: float                 # the engines' interval between transfer starts (hw.dma_issue_interval)
    dma_small_share: float           # share of DMA bytes moved in transfers under 512 B per partition
    vector_tiny: float = 0.0         # that engine's time on instructions under 128 elements per partition


def classify(x: ClassInputs) -> str:
    """The kernel's class: which resource the model says bounds it (thresholds are shares of the latency).

    ``overhead`` first: when most of the busiest vector-like engine's time goes to fixed
    per-instruction costs (overheads, or instructions so small they run at the MIN_II floor), or
    when the DMA engines' one-transfer-at-a-time issue slots fill more than half the latency with
    tiny transfers, the result hinges on fixed costs and on what the compiler merges or
    interleaves, not on throughput formulas.
    """
    t = max(x.total, 1e-30)
    if x.vector_busy > 0.3 * t and x.vector_overhead + x.vector_tiny > 0.5 * x.vector_busy:
        return "overhead"
    if x.dma_transfers * x.dma_issue > 0.5 * t and x.dma_small_share > 0.5:
        return "overhead"
    pe, vec, dma = x.tensor_busy / t, x.vector_busy / t, x.dma_active / t
    if pe >= 0.15:      # real TensorE work: fused when a vector-like engine carries a comparable share
        return "fused" if vec >= max(0.25, 0.5 * pe) else "matmul"
    return "elementwise" if vec >= dma else "dma"


# ---- intervals from residuals --------------------------------------------------------------
def interval_from_residuals(ratios: Sequence[float], coverage: float = COVERAGE) -> tuple[float, float]:
    """Log-normal prediction interval for measured/model from held-out ``ratios`` (measured / model).

    exp(mean ± t * sd * sqrt(1 + 1/n)) with Student's t at ``(1 + coverage) / 2`` and n - 1 degrees
    of freedom: a new kernel of the class, not the mean of the class, is what a user asks about.
    """
    logs = np.log(np.asarray(ratios, dtype=float))
    n = len(logs)
    if n < 2:
        raise ValueError("an interval needs at least 2 residuals")
    mean, sd = float(logs.mean()), float(logs.std(ddof=1))
    t = _student_t_quantile((1 + coverage) / 2, n - 1)
    half = t * sd * math.sqrt(1 + 1 / n)
    return math.exp(mean - half), math.exp(mean + half)


def _student_t_quantile(p: float, dof: int) -> float:
    """Quantile of Student's t for p > 0.5 (bisection on the CDF; the density integrated numerically)."""
    c = math.exp(math.lgamma((dof + 1) / 2) - math.lgamma(dof / 2)) / math.sqrt(dof * math.pi)

    def cdf(x: float) -> float:
        xs = np.linspace(0.0, x, 4001)
        f = c * (1 + xs * xs / dof) ** (-(dof + 1) / 2)
        return 0.5 + float(np.sum((f[1:] + f[:-1]) * np.diff(xs)) / 2)

    lo, hi = 0.0, 1.0
    while cdf(hi) < p:
        hi *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2


# ---- the shipped table -----------------------------------------------------------------------
@lru_cache(maxsize=8)
def _table(path: str) -> dict[str, Any]:
    p = Path(path)
    return yaml.safe_load(p.read_text()) if p.is_file() else {}


def lookup(hw_name: str, kernel_class: str, path: "str | Path" = DATA,
           prior_error: float | None = None) -> LatencyUncertainty:
    """The interval for a kernel of ``kernel_class`` on ``hw_name`` from the shipped table.

    ``prior_error`` is the hardware's ``model_error`` (read from its preset when not given); see
    :func:`bar` for the rule.
    """
    if prior_error is None:
        prior_error = _preset_model_error(hw_name)
    return bar(_table(str(path)), hw_name, kernel_class, prior_error)


def bar(table: Mapping[str, Any], hw_name: str, kernel_class: str, prior_error: float = 0.0) -> LatencyUncertainty:
    """The interval for ``kernel_class`` on ``hw_name`` from an uncertainty table (the YAML's content).

    * ``held-out``: the class has at least MIN_CLASS_RESIDUALS residuals of its own on this hardware.
    * ``pooled``: it has 1 to MIN_CLASS_RESIDUALS - 1: the hardware's pooled interval, widened to cover
      the class's own residuals and never narrower than the class's prior — too few residuals of its
      own to claim the class is better known than an unmeasured one.
    * ``prior``: it has none on this hardware (:func:`prior`).
    """
    hw = (table.get("hardware") or {}).get(hw_name) or {}
    coverage = float(table.get("coverage", COVERAGE))
    entry = (hw.get("classes") or {}).get(kernel_class) or {}
    pooled = hw.get("pooled")
    n_own = int(entry.get("n", 0))
    if n_own >= MIN_CLASS_RESIDUALS:
        return LatencyUncertainty(kernel_class, float(entry["low"]), float(entry["high"]), coverage, n_own,
                                  tuple(entry.get("sources", ())), "held-out")
    low, high = prior(table, hw_name, kernel_class, prior_error)
    if n_own > 0 and pooled:
        low = min(low, float(pooled["low"]), float(entry.get("min_ratio", pooled["low"])))
        high = max(high, float(pooled["high"]), float(entry.get("max_ratio", pooled["high"])))
        return LatencyUncertainty(kernel_class, low, high, coverage, int(pooled["n"]), tuple(pooled.get("sources", ())),
                                  "pooled")
    return LatencyUncertainty(kernel_class, low, high, coverage, 0, (), "prior")


def prior(table: Mapping[str, Any], hw_name: str, kernel_class: str, model_error: float = 0.0) -> tuple[float, float]:
    """(low, high) for a class with no held-out residual of its own on ``hw_name``.

    The union of [min(PRIOR_LOW, 1/(1+e)), max(PRIOR_HIGH, 1+e)] and, for every other hardware
    where the class has a held-out interval of its own, that interval widened by 1+e on both
    sides, with e the hardware's ``model_error`` (trn2's 0.35 is the model's measured error on the
    trn1 -> trn2 step per kernel, docs/perf_model.md §9-§10). A pooled interval of a few DMA-bound kernels
    says nothing about a matmul, so it is never used here.
    """
    e = max(float(model_error or 0.0), 0.0)
    low, high = min(PRIOR_LOW, 1 / (1 + e)), max(PRIOR_HIGH, 1 + e)
    for name, hw in sorted((table.get("hardware") or {}).items()):
        entry = (hw.get("classes") or {}).get(kernel_class) or {}
        if name != hw_name and int(entry.get("n", 0)) >= MIN_CLASS_RESIDUALS:
            low, high = min(low, float(entry["low"]) / (1 + e)), max(high, float(entry["high"]) * (1 + e))
    return round(low, 3), round(high, 3)


def _preset_model_error(hw_name: str) -> float:
    """The shipped hardware config's ``model_error`` (0 for a name that is not a preset)."""
    from accelopt_nb.hwfiles import presets
    if hw_name not in presets():
        return 0.0
    from accelopt_nb.perf.hardware import load_hw
    return float(load_hw(hw_name).model_error)


def table_entry(ratios: Sequence[float], sources: Sequence[str], coverage: float = COVERAGE) -> dict[str, Any]:
    """One entry of uncertainty.yaml from held-out residuals (measured / model) and their sources.

    A class with a single residual gets its count and range only (no interval: :func:`bar` pools it).
    """
    logs = np.log(np.asarray(ratios, dtype=float))
    spread = {"min_ratio": round(float(np.exp(logs.min())), 3), "max_ratio": round(float(np.exp(logs.max())), 3)}
    if len(ratios) < 2:
        return {"n": len(ratios), **spread, "geomean": round(float(np.exp(logs.mean())), 3),
                "sources": sorted(set(sources))}
    lo, hi = interval_from_residuals(ratios, coverage)
    return {"n": len(ratios), "low": round(lo, 3), "high": round(hi, 3), **spread,
            "geomean": round(float(np.exp(logs.mean())), 3), "log_sd": round(float(logs.std(ddof=1)), 3),
            "sources": sorted(set(sources))}


# ---- the residuals behind the table -----------------------------------------------------------
@dataclass(frozen=True)
class Residual:
    """One held-out kernel behind ``uncertainty.yaml``: what the hardware measured and the model said."""

    source: str                      # corpus source (docs/perf_model.md §7)
    family: str                      # variants of one problem (e.g. "autocomp/attention")
    variant: str
    hw: str
    kernel_class: str                # the shipped model's class of the kernel (:func:`classify`)
    measured_ms: float
    model_ms: float
    basis: str                       # "held-out" (a source never fitted) or "leave-one-out (MODEL)" (the fit source)

    @property
    def ratio(self) -> float:
        """measured / model (the residual the intervals are taken over)."""
        return self.measured_ms / self.model_ms

    @property
    def error_factor(self) -> float:
        """max(r, 1/r): how far off the model is, either way."""
        return max(self.ratio, 1 / self.ratio)


def heldout_residuals(hw: str | None = None, kernel_class: str | None = None,
                      path: "str | Path" = RESIDUALS) -> list[Residual]:
    """The held-out residuals shipped with the library (written with ``uncertainty.yaml`` by
    ``benchmarks/perf_fidelity.py --write-uncertainty``), optionally of one hardware or class."""
    import csv
    p = Path(path)
    if not p.is_file():
        return []
    with p.open(newline="") as f:
        rows = [Residual(r["source"], r["family"], r["variant"], r["hw"], r["kernel_class"], float(r["measured_ms"]),
                         float(r["model_ms"]), r["basis"]) for r in csv.DictReader(f)]
    return [r for r in rows if (hw is None or r.hw == hw) and (kernel_class is None or r.kernel_class == kernel_class)]


__all__ = ["CLASS_LABEL", "RESIDUALS", "Residual", "heldout_residuals", "COVERAGE", "ClassInputs", "KERNEL_CLASSES", "LatencyUncertainty", "classify",
           "bar", "interval_from_residuals", "lookup", "prior", "table_entry"]
