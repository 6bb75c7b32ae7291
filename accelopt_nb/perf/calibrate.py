"""Fit the model's few free hardware parameters to measured latencies.

The free parameters are the numbers the documents give least precisely (FREE_PARAMETERS: the
VectorE fp32 tensor_tensor and reciprocal costs, the fp32 matmul factor, the dependent-instruction
overhead). The DMA bandwidth is not free: DMABW measured it (17 B/ns per engine), and a fit that
freed it chased silu's read/write-mixed stream and broke the DMA-bound kernels (perf_model.md §7). Everything else stays as documented. The fit minimizes the
mean squared log error of latency over the kernels given, by coordinate descent on a
geometric grid inside each parameter's plausible range, so one kernel can never get a factor
of its own. The result is a ``base: trn1`` YAML that ``load_hw`` / ``--hw FILE`` reads.

Measured latencies are neuron-profile ``total_time`` (or ``nki.benchmark`` / neuron-bench NCL): they span
the kernel's start and stop, so the model's time compared with them is its kernel time plus
``launch_overhead_s`` (``Profile.end_to_end_ms``; docs/perf_model.md §2b), as the held-out corpus does.

    cal = fit([trace, ...], [measured_s, ...], base="trn1")
    cal.overrides, cal.error_before, cal.error_after; write_hw_yaml(cal, "my_trn1.yaml")
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import yaml

from accelopt_nb.errors import ConfigError
from accelopt_nb.perf.costs import compute_cost, placement_choices
from accelopt_nb.perf.hardware import HWConfig, load_hw
from accelopt_nb.pyutil import gc_paused
from accelopt_nb.perf.schedule import DEPENDENT_OVERHEAD_ENGINES, TraceAnalysis, analyse, schedule
from accelopt_nb.sim.trace import Trace


@dataclass(frozen=True)
class FreeParameter:
    key: str            # HWConfig field
    documented: float   # the value the documents give (nki_hw_facts.md)
    lo: float           # plausible range (the fit never leaves it)
    hi: float
    why: str            # what the documents say, and why the number is free


FREE_PARAMETERS: tuple[FreeParameter, ...] = (
    FreeParameter("tensor_tensor_cycles_per_elem", 2.0, 0.75, 3.0,
                  "ISA26 gives 2N for fp32 tensor_tensor; SBUF read ports (MEMH) allow 1-2 cycles per element"),
    FreeParameter("reciprocal_cycles_per_elem", 8.0, 1.0, 10.0,
                  "SHARED gives 8N for VectorE reciprocal, not measured in the 2.26 docs"),
    FreeParameter("matmul_fp32_factor", 4.0, 3.0, 6.0,
                  "ISA26 gives 4x for fp32 matmuls ('23 TF'); the 4 passes may not pipeline perfectly"),
    FreeParameter("dependent_overhead_cycles", 100.0, 25.0, 300.0,
                  "ARCH1 'about 100 cycles' for a dependent instruction"),
)


@dataclass
class Calibration:
    """Result of :func:`fit`: overrides of ``base`` and the log errors before and after."""

    base: str
    overrides: dict[str, float]
    error_before: float                 # RMS of ln(model / measured) with the base numbers
    error_after: float
    ratios_before: list[float] = field(default_factory=list)
    ratios_after: list[float] = field(default_factory=list)
    base_config: HWConfig | None = field(default=None, repr=False)

    def hw(self) -> HWConfig:
        return load_hw(self.base_config or self.base, self.overrides)


class LatencyCache:
    """Model latency per (trace, the free parameters it depends on), for fits over many parameter values.

    ``latency`` is what a measurement that spans the kernel's start and stop is compared with: the
    schedule's time plus ``hw.launch_overhead_s`` (``launch_included=False``: the schedule's time alone).

    Each trace is analysed once (liveness, spills, elided work: nothing a free parameter changes,
    schedule.analyse) and only scheduled inside the optimiser. A trace whose instructions no
    parameter touches (no reciprocal, say) shares its latency across that parameter's grid, and
    leave-one-out fits, which walk mostly the same grid, share all of it.
    """

    def __init__(self, params: Sequence[FreeParameter] = FREE_PARAMETERS, launch_included: bool = True) -> None:
        self._params = tuple(params)
        self.launch_included = launch_included
        self._seen: dict[tuple, float] = {}
        self._traces: dict[int, tuple[Trace, TraceAnalysis, tuple[str, ...]]] = {}

    def latency(self, trace: Trace, hw: HWConfig) -> float:
        entry = self._traces.get(id(trace))
        if entry is None:           # the entry keeps the trace alive, so its id stays unique
            keys = tuple(p.key for p in self._params if depends_on(trace, hw, p.key))
            entry = self._traces[id(trace)] = (trace, analyse(trace, hw), keys)
        _, analysis, keys = entry
        key = (id(trace), tuple(getattr(hw, k) for k in keys))
        t = self._seen.get(key)
        if t is None:
            with gc_paused():
                t = self._seen[key] = schedule(trace, hw, analysis).total_time
        return t + (hw.launch_overhead_s if self.launch_included else 0.0)


def depends_on(trace: Trace, hw: HWConfig, key: str) -> bool:
    """Whether the model's latency of ``trace`` can change with the free parameter ``key``.

    True when some compute instruction's cost changes with it on an engine it may run on, or,
    for the dependent-issue overhead, when some instruction runs on an engine that pays it.
    """
    other = hw.replace(**{key: getattr(hw, key) * 1.5})
    for ins in trace.instructions:
        if ins.engine == "dma":
            continue
        for engine in (placement_choices(ins) if hw.compiler_engine_placement else (ins.engine,)):
            if key == "dependent_overhead_cycles":
                if engine in DEPENDENT_OVERHEAD_ENGINES:
                    return True
            elif compute_cost(ins, hw, engine) != compute_cost(ins, other, engine):
                return True
    return False


def documented_overrides(params: Sequence[FreeParameter] = FREE_PARAMETERS) -> dict[str, float]:
    """The free parameters at their documented values (the model before any fit)."""
    return {p.key: p.documented for p in params}


def _ratios(traces: Sequence[Trace], measured_s: Sequence[float], hw: HWConfig, cache: LatencyCache) -> np.ndarray:
    return np.array([cache.latency(t, hw) / m for t, m in zip(traces, measured_s)])


def rms_log_error(ratios: Sequence[float]) -> float:
    r = np.asarray(ratios, dtype=float)
    return float(np.sqrt(np.mean(np.log(r) ** 2))) if len(r) else 0.0


def grid(p: FreeParameter, steps: int, center: float | None = None) -> np.ndarray:
    """The values a fit tries for ``p`` (log-spaced inside its range).

    The first pass: ``steps`` points over the range. Later passes: around ``center``, the points
    within one first-pass step on a grid ``(steps - 1) // 2`` times finer. Both grids are fixed,
    so fits that walk different paths (leave-one-out) try the same values and share latencies.
    """
    lo, hi = math.log(p.lo), math.log(p.hi)
    m = max((steps - 1) // 2, 1)
    fine = (hi - lo) / ((steps - 1) * m)
    if center is None:
        j = m * np.arange(steps)
    else:
        k = round((math.log(center) - lo) / fine)
        j = np.arange(max(k - m, 0), min(k + m, (steps - 1) * m) + 1)
    return np.exp(lo + fine * j)


def fit(traces: Sequence[Trace], measured_s: Sequence[float], *, base: "str | Path | HWConfig" = "trn1",
        params: Sequence[FreeParameter] = FREE_PARAMETERS, passes: int = 3, steps: int = 9,
        progress: Callable[[str], None] | None = None, cache: LatencyCache | None = None) -> Calibration:
    """Fit ``params`` so that the model's latency of each trace matches ``measured_s`` (seconds)."""
    if len(traces) != len(measured_s) or not traces:
        raise ConfigError(f"calibrate: need one measured latency per kernel (got {len(traces)} kernels, "
                          f"{len(measured_s)} latencies)")
    if any(not m > 0 for m in measured_s):
        raise ConfigError("calibrate: measured latencies must be positive")
    if steps < 3 or passes < 1:
        raise ConfigError(f"calibrate: need steps >= 3 and passes >= 1 (got steps={steps}, passes={passes})")
    base_hw = load_hw(base)
    current = {p.key: float(getattr(base_hw, p.key)) for p in params}
    cache = cache if cache is not None else LatencyCache(params)

    def error(values: Mapping[str, float]) -> tuple[float, np.ndarray]:
        r = _ratios(traces, measured_s, base_hw.replace(**values), cache)
        return rms_log_error(r), r

    before, r_before = error(current)
    best = before
    r_best = r_before
    for sweep in range(passes):
        for p in params:
            for x in grid(p, steps, current[p.key] if sweep else None):
                trial = dict(current, **{p.key: float(x)})
                e, r = error(trial)
                if e < best - 1e-12:
                    best, r_best, current = e, r, trial
            if progress:
                progress(f"pass {sweep + 1} {p.key} = {current[p.key]:.4g}: RMS log error {best:.4f}")
    changed = {k: v for k, v in current.items() if v != getattr(base_hw, k)}
    name = base.name if isinstance(base, HWConfig) else str(base)
    return Calibration(name, changed, before, best, r_before.tolist(), r_best.tolist(), base_hw)


@dataclass(frozen=True)
class HeldOut:
    """Leave-one-out: each kernel's model / measured latency with the model fitted on all the others."""

    names: tuple[str, ...]
    ratios: tuple[float, ...]
    measured_s: tuple[float, ...]

    @property
    def errors(self) -> np.ndarray:
        r = np.asarray(self.ratios, dtype=float)
        return np.maximum(r, 1 / r)

    @property
    def median_error(self) -> float:
        return expected_error_factor(self.ratios)

    @property
    def worst_error(self) -> float:
        return float(self.errors.max())

    @property
    def spearman(self) -> float | None:
        """Rank correlation of the held-out model latencies with the measured ones (None below 3 kernels)."""
        if len(self.ratios) < 3:
            return None
        return spearman([r * m for r, m in zip(self.ratios, self.measured_s)], list(self.measured_s))

    def format(self) -> str:
        lines = [f"{'left out':32s} {'measured ms':>12s} {'held-out model/measured':>24s}"]
        lines += [f"{n[-32:]:32s} {m * 1e3:12.4f} {r:23.3f}x" for n, m, r in zip(self.names, self.measured_s, self.ratios)]
        rho = f"{self.spearman:.3f}" if self.spearman is not None else "-"
        lines.append(f"leave-one-out over {len(self.ratios)}: median error x{self.median_error:.3f}, "
                     f"worst x{self.worst_error:.3f}, Spearman rho {rho}")
        return "\n".join(lines)


def leave_one_out(traces: Sequence[Trace], measured_s: Sequence[float], *, names: Sequence[str] | None = None,
                  base: "str | Path | HWConfig" = "trn1", progress: Callable[[str], None] | None = None,
                  folds: Sequence[int] | None = None, cache: "LatencyCache | None" = None, **fit_kw: Any) -> HeldOut:
    """Fit on all kernels but one and time the one left out, for each kernel (one shared latency cache).

    ``folds``: only these kernels are left out, in this order (indices; each still fitted on all the others);
    the result holds those kernels only. ``cache``: a :class:`LatencyCache` shared with earlier calls (one
    leave-one-out run fold by fold, keeping each result as it comes).
    """
    names = tuple(names) if names is not None else tuple(f"kernel {k + 1}" for k in range(len(traces)))
    if len(names) != len(traces):
        raise ConfigError(f"leave_one_out: {len(names)} names for {len(traces)} kernels")
    ks = list(range(len(traces))) if folds is None else list(folds)
    if any(not 0 <= k < len(traces) for k in ks):
        raise ConfigError(f"leave_one_out: folds {ks} outside 0..{len(traces) - 1}")
    cache = cache if cache is not None else LatencyCache(fit_kw.get("params", FREE_PARAMETERS))
    out = []
    for k in ks:
        rest = [i for i in range(len(traces)) if i != k]
        cal = fit([traces[i] for i in rest], [measured_s[i] for i in rest], base=base, cache=cache, **fit_kw)
        out.append(cache.latency(traces[k], cal.hw()) / measured_s[k])
        if progress:
            progress(f"left out {names[k]} ({k + 1}/{len(traces)}): model/measured {out[-1]:.3f}")
    return HeldOut(tuple(names[k] for k in ks), tuple(out), tuple(float(measured_s[k]) for k in ks))


def leave_one_source_out(traces: Sequence[Trace], measured_s: Sequence[float], sources: Sequence[str], *,
                         base: "str | Path | HWConfig" = "trn1", progress: Callable[[str], None] | None = None,
                         **fit_kw: Any) -> dict[str, HeldOut]:
    """Per source: its kernels timed with the parameters fitted on every OTHER source's kernels.

    What a user of a calibrated file should expect on kernels from somewhere else (another project,
    another measurement setup); needs at least two sources.
    """
    if len(sources) != len(traces):
        raise ConfigError(f"leave_one_source_out: {len(sources)} source labels for {len(traces)} kernels")
    labels = sorted(set(sources))
    if len(labels) < 2:
        raise ConfigError("leave_one_source_out needs kernels from at least two sources")
    cache = LatencyCache(fit_kw.get("params", FREE_PARAMETERS))
    out: dict[str, HeldOut] = {}
    for label in labels:
        inside = [i for i, s in enumerate(sources) if s == label]
        rest = [i for i, s in enumerate(sources) if s != label]
        cal = fit([traces[i] for i in rest], [measured_s[i] for i in rest], base=base, cache=cache, **fit_kw)
        hw = cal.hw()
        out[label] = HeldOut(tuple(f"{label} #{k + 1}" for k in range(len(inside))),
                             tuple(cache.latency(traces[i], hw) / measured_s[i] for i in inside),
                             tuple(float(measured_s[i]) for i in inside))
        if progress:
            progress(f"held out source {label} ({len(inside)} kernels): median error x{out[label].median_error:.3f}")
    return out


def expected_error_factor(ratios: Sequence[float]) -> float:
    """The error bar quoted with estimates: the median of max(r, 1/r) over held-out kernels."""
    r = np.asarray(ratios, dtype=float)
    return float(np.median(np.maximum(r, 1 / r)))


@dataclass(frozen=True)
class ErrorStats:
    """How far model latencies are from measured ones (ratio r = model / measured)."""

    n: int
    spearman: float | None          # rank correlation of model and measured latencies (None below 3)
    median_error: float             # median of max(r, 1/r)
    p90_error: float                # 90th percentile of max(r, 1/r)
    worst_error: float
    geomean_ratio: float            # exp(mean ln r): > 1 means the model is slow on average

    def row(self) -> str:
        rho = f"{self.spearman:6.3f}" if self.spearman is not None else f"{'-':>6s}"
        return (f"n {self.n:3d}  rho {rho}  median x{self.median_error:.2f}  p90 x{self.p90_error:.2f}  "
                f"worst x{self.worst_error:.2f}  geomean {self.geomean_ratio:.2f}")


def error_stats(model: Sequence[float], measured: Sequence[float]) -> ErrorStats:
    """:class:`ErrorStats` of model vs measured latencies (same units)."""
    m, t = np.asarray(model, dtype=float), np.asarray(measured, dtype=float)
    if len(m) != len(t) or not len(m):
        raise ValueError("error_stats needs as many model as measured latencies, at least one")
    r = m / t
    e = np.maximum(r, 1 / r)
    rho = spearman(m, t) if len(m) >= 3 and len(set(t.tolist())) > 1 else None
    return ErrorStats(len(m), rho, float(np.median(e)), float(np.percentile(e, 90)), float(e.max()),
                      float(np.exp(np.mean(np.log(r)))))


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman rank correlation (ties get their average rank; measured variants do tie)."""
    rx, ry = _ranks(x), _ranks(y)
    if rx.std() == 0 or ry.std() == 0:
        return 0.0
    return float(np.corrcoef(rx, ry)[0, 1])


def _ranks(x: Sequence[float]) -> np.ndarray:
    a = np.asarray(x, dtype=float)
    order = np.argsort(a, kind="stable")
    ranks = np.empty(len(a))
    ranks[order] = np.arange(len(a), dtype=float)
    for v in np.unique(a):
        tie = a == v
        ranks[tie] = ranks[tie].mean()
    return ranks


def write_hw_yaml(cal: Calibration, path: "str | Path", note: str = "") -> Path:
    """A ``base: <preset>`` YAML with the fitted keys, loadable by ``load_hw(path)``."""
    path = Path(path)
    lines = [f"# Calibrated by `accelopt calibrate`{': ' + note if note else ''}",
             f"# RMS log latency error {cal.error_before:.3f} -> {cal.error_after:.3f} on the calibration kernels",
             yaml.safe_dump({"base": cal.base, **{k: float(v) for k, v in cal.overrides.items()}},
                            sort_keys=False).rstrip()]
    path.write_text("\n".join(lines) + "\n")
    load_hw(path)                              # fail here, not at first use
    return path


def read_profile_latency(path: "str | Path") -> float:
    """Seconds of one neuron-profile summary JSON (``total_time`` s, or ``latency`` ms).

    Accepts ``neuron-profile view --output-format summary-json`` output (metrics under one top
    key) or the flat metrics dict.
    """
    path = Path(path)
    try:
        data: Any = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"profile {path}: cannot read a JSON summary ({exc})") from exc
    if isinstance(data, dict) and len(data) == 1 and isinstance(next(iter(data.values())), dict):
        data = next(iter(data.values()))
    if not isinstance(data, dict):
        raise ConfigError(f"profile {path}: expected a JSON object of neuron-profile metrics")
    if isinstance(data.get("total_time"), (int, float)) and data["total_time"] > 0:
        return float(data["total_time"])
    if isinstance(data.get("latency"), (int, float)) and data["latency"] > 0:
        return float(data["latency"]) / 1e3
    raise ConfigError(f"profile {path}: no positive 'total_time' (s) or 'latency' (ms) field")


__all__ = ["Calibration", "ErrorStats", "error_stats", "FREE_PARAMETERS", "FreeParameter", "HeldOut", "LatencyCache", "depends_on",
           "documented_overrides", "expected_error_factor", "fit", "grid", "leave_one_out", "leave_one_source_out", "read_profile_latency",
           "rms_log_error", "spearman", "write_hw_yaml"]
