"""Hardware configurations of the performance model (trn1 = NeuronCore-v2, trn2 = NeuronCore-v3).

The numbers live in YAML files shipped with the package (``accelopt_nb/perf/hw/*.yaml``), each
one commented with its source in ``nki_hw_facts.md``. :func:`load_hw` turns a preset name, a
YAML file or an existing :class:`HWConfig` into a typed config, with optional overrides for
what-if studies::

    hw = load_hw("trn1", overrides={"hbm_bandwidth": 820e9})
    hw = load_hw("my_chip.yaml")            # a full config, or {"base": "trn1", ...overrides}
    hw = load_hw("trn2", overrides="faster_dma.yaml")
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from accelopt_nb.errors import ConfigError
from accelopt_nb.hwfiles import HW_DIR, preset_file, presets
from accelopt_nb.hwfiles import read_yaml as _read_yaml



# rename_full_overwrites (schedule.py, perf_model.md §3d): no renaming; whole-tile overwrites; those and the first
# whole write of a sequential-loop tile
RENAME_MODES = ("none", "tiles", "all")


@dataclass(frozen=True)
class HWConfig:
    """Per-NeuronCore hardware numbers used by the timing model and the profile metrics."""

    name: str
    nc_version: int
    # clocks (Hz)
    tensor_clock_hz: float
    vector_clock_hz: float
    scalar_clock_hz: float
    gpsimd_clock_hz: float
    base_clock_hz: float
    # TensorE
    pe_rows: int
    pe_cols: int
    matmul_min_cycles: float
    matmul_fp32_factor: float
    matmul_fp32_onezero_factor: float
    transpose_fp32_factor: float
    # Vector / Scalar / GpSimd
    min_ii_cycles: float
    tiny_free_elems: int
    tiny_overhead_cycles: float
    dependent_overhead_cycles: float
    gpsimd_fixed_cycles: float
    dynamic_copy_cycles: float
    tensor_tensor_cycles_per_elem: float
    reciprocal_cycles_per_elem: float
    vector_bf16_copy_speedup: float
    vector_bf16_copy_psum_speedup: float
    vector_bf16_tensor_tensor_speedup: float
    # on-chip memory (bytes per partition)
    sbuf_partitions: int
    sbuf_bytes_per_partition: int
    sbuf_usable_bytes_per_partition: int
    psum_bytes_per_partition: int
    psum_banks: int
    psum_bank_bytes: int
    # DMA
    dma_engines: int
    dma_queues: int
    dma_partitions_per_engine: int
    dma_engine_bandwidth: float
    dma_fixed_latency_s: float
    dma_efficiency: tuple[tuple[float, float], ...]
    dma_transpose_efficiency: float | None
    # v3: per-packet (descriptor) engine time; > 0 replaces the dma_efficiency curve as the queue's
    # throughput (the curve then only documents one transfer in isolation, latency included)
    dma_packet_overhead_s: float
    hbm_bandwidth: float
    elide_redundant_work: bool      # toolchain keeps reloaded / recomputed values on chip (reuse.py)
    compiler_engine_placement: bool  # toolchain puts engine-unspecified copies / affine ops on Vector or Scalar
    sequential_hbm_order: bool       # in sequential loops an HBM read waits for the earlier HBM writes (schedule.py)
    sequential_rules_need_middle_end: bool  # the sequential_range rules (single-buffered tiles, sequential_hbm_order) are
                                     # the middle end's: a skip_middle_end_transformations kernel has none (schedule.py)
    rename_full_overwrites: str      # "none" | "tiles" | "all": a write that overwrites a whole on-chip tile takes a
                                     # new address instead of waiting for the old value's readers (schedule.py)
    # fixed costs at small granularity (v3, perf_model.md §2b)
    launch_overhead_s: float         # per kernel launch: start to first instruction plus the end notification
    dma_issue_s: float               # the DMA engines start a new transfer at most this often (all queues together)
    dma_issue_dge_s: float           # the same for a DMA instruction the hardware DGE expands (NC-v3; 0: no DGE)
    dge: bool                        # the kernel is built with descriptor generation on the DGE (trn2's default
                                     # flags), not with --disable-dge as AccelOpt builds (perf_model.md §2b)
    # engine conflicts
    vector_gpsimd_share_sbuf_port: bool
    vector_scalar_share_psum: bool
    # profiler conventions
    profiler_peak_flops: float
    profiler_hbm_bandwidth: float
    fp32_matmul_flops_factor: float
    # the model's expected latency error on this hardware (a fraction: 0.15 = ±15%), from the
    # held-out validation of benchmarks/perf_fidelity.py (or a calibration's leave-one-out)
    model_error: float
    # derived lookup tables (not YAML keys)
    _eff_x: np.ndarray = field(init=False, repr=False, compare=False)
    _eff_y: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        curve = sorted((float(b), float(e)) for b, e in self.dma_efficiency)
        if len(curve) < 2 or any(b <= 0 or not 0 < e <= 1 for b, e in curve):
            raise ConfigError(f"hardware config {self.name!r}: dma_efficiency must be >= 2 pairs "
                              "[bytes_per_partition > 0, efficiency in (0, 1]]")
        object.__setattr__(self, "dma_efficiency", tuple(curve))
        object.__setattr__(self, "_eff_x", np.log2([b for b, _ in curve]))
        object.__setattr__(self, "_eff_y", np.log2([e for _, e in curve]))
        for f in ("tensor_clock_hz", "vector_clock_hz", "scalar_clock_hz", "gpsimd_clock_hz", "base_clock_hz",
                  "dma_engine_bandwidth", "hbm_bandwidth", "profiler_peak_flops",
                  "profiler_hbm_bandwidth"):
            if not getattr(self, f) > 0:
                raise ConfigError(f"hardware config {self.name!r}: {f} must be positive, got {getattr(self, f)!r}")
        if self.rename_full_overwrites not in RENAME_MODES:
            raise ConfigError(f"hardware config {self.name!r}: rename_full_overwrites must be one of "
                              f"{', '.join(RENAME_MODES)}, got {self.rename_full_overwrites!r}")
        if self.dge and self.nc_version < 3:
            raise ConfigError(f"hardware config {self.name!r}: dge is true, but NeuronCore-v{self.nc_version} has no "
                              "hardware DGE to build for (NeuronCore-v3 and later)")

    # ---- derived quantities ------------------------------------------------------------
    @property
    def dma_bandwidth(self) -> float:
        """Achievable bandwidth of all DMA engines together (272 GB/s on trn1), shared by all queues."""
        return self.dma_engines * self.dma_engine_bandwidth

    @property
    def dma_issue_interval(self) -> float:
        """Seconds between DMA transfer starts for this build: the DGE's per-instruction cost when built for it."""
        return self.dma_issue_dge_s if self.dge else self.dma_issue_s

    def dma_packet_efficiency(self, run_bytes: float) -> float:
        """Share of an engine's time moving data when each packet of ``run_bytes`` costs a fixed
        ``dma_packet_overhead_s`` besides its data time (v3; perf_model.md §3)."""
        data = max(float(run_bytes), 1.0) / self.dma_engine_bandwidth
        return data / (data + self.dma_packet_overhead_s)

    def dma_efficiency_at(self, bytes_per_partition: float) -> float:
        """DMAOV curve, interpolated in log-log space; linear (fixed time per transfer) below the first point."""
        b = max(float(bytes_per_partition), 1.0)
        x0, y0 = self.dma_efficiency[0]
        if b <= x0:
            return y0 * b / x0
        return float(min(1.0, 2.0 ** np.interp(np.log2(b), self._eff_x, self._eff_y)))

    def clock(self, engine: str) -> float:
        return {"tensor": self.tensor_clock_hz, "vector": self.vector_clock_hz, "scalar": self.scalar_clock_hz,
                "gpsimd": self.gpsimd_clock_hz}[engine]

    def replace(self, **overrides: Any) -> "HWConfig":
        """A copy with some fields changed (validated like :func:`load_hw` overrides)."""
        return _build({**self.to_dict(), **_check_keys(overrides, f"overrides of {self.name!r}")})

    def to_dict(self) -> dict[str, Any]:
        out = {}
        for f in fields(self):
            if f.name.startswith("_"):
                continue
            v = getattr(self, f.name)
            out[f.name] = [list(p) for p in v] if f.name == "dma_efficiency" else v
        return out


def _field_types() -> dict[str, Any]:
    return {f.name: f.type for f in fields(HWConfig) if not f.name.startswith("_")}


def _check_keys(data: Mapping[str, Any], what: str) -> dict[str, Any]:
    known = _field_types()
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ConfigError(f"{what}: unknown hardware key(s) {', '.join(unknown)}; valid keys: {', '.join(sorted(known))}")
    return dict(data)


def _coerce(name: str, typ: str, value: Any) -> Any:
    try:
        if typ == "float":
            return float(value)
        if typ == "int":
            if float(value) != int(float(value)):
                raise ValueError
            return int(float(value))
        if typ == "bool":
            if not isinstance(value, bool):
                raise ValueError
            return value
        if typ == "float | None":
            return None if value is None else float(value)
        if typ == "str":
            return str(value)
    except (TypeError, ValueError):
        raise ConfigError(f"hardware key {name}: expected {typ}, got {value!r}") from None
    return value


def _build(data: Mapping[str, Any]) -> HWConfig:
    types = _field_types()
    missing = sorted(set(types) - set(data))
    if missing:
        raise ConfigError(f"hardware config {data.get('name', '?')!r} is missing key(s): {', '.join(missing)}")
    kwargs = {k: _coerce(k, str(types[k]), v) for k, v in data.items() if k != "dma_efficiency"}
    try:
        kwargs["dma_efficiency"] = tuple((float(b), float(e)) for b, e in data["dma_efficiency"])
    except (TypeError, ValueError):
        raise ConfigError("hardware key dma_efficiency: expected a list of [bytes_per_partition, efficiency] pairs")
    return HWConfig(**kwargs)


def _load_source(source: str | Path) -> dict[str, Any]:
    path = Path(source)
    if isinstance(source, str) and not source.endswith((".yaml", ".yml")) and preset_file(source).is_file():
        return _read_yaml(preset_file(source))
    if path.is_file():
        data = _read_yaml(path)
        base = data.pop("base", None)
        if base is not None:
            merged = _load_source(str(base))
            merged.update(_check_keys(data, str(path)))
            return merged
        return data
    raise ConfigError(f"unknown hardware {str(source)!r}: use one of {', '.join(presets())} or a YAML file path")


def load_hw(hw: "str | Path | HWConfig" = "trn1",
            overrides: "Mapping[str, Any] | str | Path | None" = None) -> HWConfig:
    """Load a hardware config: a preset name (``trn1``, ``trn2``), a YAML path, or a config.

    ``overrides`` is a mapping of keys to new values, or a YAML file of them. A YAML config
    file may start from a preset with ``base: trn1`` and list only the keys it changes.
    """
    if isinstance(hw, HWConfig):
        data = hw.to_dict()
    else:
        data = _load_source(hw)
    if overrides is not None:
        if isinstance(overrides, (str, Path)):
            extra = _read_yaml(Path(overrides))
            extra.pop("base", None)
        else:
            extra = dict(overrides)
        data.update(_check_keys(extra, "hardware overrides"))
    return _build(data)


__all__ = ["HWConfig", "load_hw", "presets", "HW_DIR"]
