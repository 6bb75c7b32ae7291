"""The profile: neuron-profile summary-json fields computed from a :class:`Schedule`.

Field names and conventions follow neuron-profile (nki_hw_facts.md §4): ``latency`` in ms,
``total_time`` in seconds, byte and FLOP counts as numbers, and every ``*_percent`` field a
fraction in [0, 1] as summary-json writes them (the GUI shows them multiplied by 100).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Mapping, Any

import numpy as np

from accelopt_nb.perf.costs import matmul_flops
from accelopt_nb.perf.schedule import COMPUTE_ENGINES, Schedule
from accelopt_nb.perf.uncertainty import ClassInputs, LatencyUncertainty, classify, lookup
from accelopt_nb.sim.trace import Trace

ENGINE_LABEL = {"tensor": "TensorE", "vector": "VectorE", "scalar": "ScalarE", "gpsimd": "GpSimdE", "dma": "DMA"}


@dataclass
class Profile:
    """Estimated profile of one kernel launch (see module docstring for conventions)."""

    kernel_name: str
    hw: str
    latency: float                          # ms
    total_time: float                       # s
    neuroncore_cycle_count: float
    hbm_read_bytes: int
    hbm_write_bytes: int
    sbuf_read_bytes: int
    sbuf_write_bytes: int
    psum_read_bytes: int
    psum_write_bytes: int
    psum_read_sbuf_write_bytes: int
    spill_save_bytes: int
    spill_reload_bytes: int
    hardware_flops: float
    transpose_flops: float
    model_flops: float
    peak_flops_bandwidth_ratio: float
    mm_arithmetic_intensity: float
    hfu_estimated_percent: float
    mfu_estimated_percent: float
    mbu_estimated_percent: float
    tensor_engine_active_time_percent: float
    vector_engine_active_time_percent: float
    scalar_engine_active_time_percent: float
    gpsimd_engine_active_time_percent: float
    dma_active_time_percent: float
    total_active_time_percent: float
    tensor_engine_instruction_time: float   # s, summed durations
    vector_engine_instruction_time: float
    scalar_engine_instruction_time: float
    gpsimd_engine_instruction_time: float
    matmul_instruction_count: int
    instruction_count: int
    dma_transfer_count: int
    dma_transfer_average_bytes: float
    bound: str
    bottleneck: list[str]
    sbuf_peak_demand_bytes_per_partition: int
    psum_peak_demand_bytes_per_partition: int
    hbm_reload_elided_bytes: int            # redundant loads the toolchain keeps on chip (reuse.py)
    model_error: float                      # the interval's larger side as a fraction: uncertainty.error_factor - 1
    estimate_note: str                      # "estimated (trn1 model; matmul-bound: x0.85-x1.20 (80% of 9 held-out))"
    # the error bar: kernel class, multiplicative interval on latency, coverage, basis (perf/uncertainty.py)
    uncertainty: LatencyUncertainty
    schedule: Schedule | None = field(default=None, repr=False, compare=False)
    trace: Trace | None = field(default=None, repr=False, compare=False)

    def __repr__(self) -> str:
        return (f"Profile(kernel={self.kernel_name!r}, hw={self.hw!r}, latency={self.latency:.4g} ms, "
                f"bound={self.bound!r}, hfu={self.hfu_estimated_percent:.3f}, mbu={self.mbu_estimated_percent:.3f})")

    def to_dict(self) -> dict[str, Any]:
        """Flat summary-json-like dict (JSON-serializable; no schedule or trace)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name in ("schedule", "trace"):
                continue
            v = getattr(self, f.name)
            out[f.name] = list(v) if isinstance(v, list) else v.to_dict() if isinstance(v, LatencyUncertainty) else v
        return out

    def summary_json(self) -> str:
        """The shape ``neuron-profile view --output-format summary-json`` prints: metrics under one key."""
        return json.dumps({self.kernel_name: self.to_dict()}, indent=2)

    def timeline(self, **kwargs: Any):
        """Matplotlib timeline (one row per engine and DMA queue); see :func:`plot_timeline`."""
        from accelopt_nb.perf.timeline import plot_timeline
        return plot_timeline(self, **kwargs)

    @property
    def kernel_class(self) -> str:
        """What bounds the kernel in the model (matmul, fused, elementwise, dma, overhead)."""
        return self.uncertainty.kernel_class

    @property
    def end_to_end_ms(self) -> float:
        """What a timer of the whole kernel reports (neuron-profile total_time, nki.benchmark / neuron-bench NCL):
        ``latency`` (the kernel's time, first instruction to last completion) plus its start/stop cost
        (perf_model.md §2b)."""
        launch = self.schedule.hw.launch_overhead_s if self.schedule is not None else 0.0
        return self.latency + 1e3 * launch if self.latency > 0 else 0.0

    @property
    def latency_interval(self) -> tuple[float, float]:
        """(low, high) latency in ms that held-out measurements of this kernel's class support."""
        return self.uncertainty.interval_ms(self.latency)

    @property
    def engine_active(self) -> dict[str, float]:
        return {"tensor": self.tensor_engine_active_time_percent, "vector": self.vector_engine_active_time_percent,
                "scalar": self.scalar_engine_active_time_percent, "gpsimd": self.gpsimd_engine_active_time_percent,
                "dma": self.dma_active_time_percent}


def _union_length(starts: np.ndarray, ends: np.ndarray) -> float:
    if len(starts) == 0:
        return 0.0
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    run_end = np.maximum.accumulate(e)
    # a new merged interval begins where the start exceeds every earlier end
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    block_end = np.append(run_end[idx[1:] - 1], run_end[-1])
    return float(np.sum(block_end - s[idx]))


def estimate_note(hw_name: str, uncertainty: LatencyUncertainty, build: str = "") -> str:
    """How every figure derived from a model latency is labelled for people and agents."""
    return f"estimated ({hw_name} model{', ' + build if build else ''}; {uncertainty.describe()})"


def note_of(profile: "Profile | Mapping[str, Any] | None") -> str | None:
    """The estimate label of a profile or its dict; None for a measured (neuron-profile) one."""
    if profile is None:
        return None
    p = profile.to_dict() if isinstance(profile, Profile) else profile
    note = p.get("estimate_note")
    return str(note) if note else None


def _fmt_bytes(n: float) -> str:
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= div:
            return f"{n / div:.2f} {unit}"
    return f"{n:.0f} B"


def build_profile(trace: Trace, sched: Schedule) -> Profile:
    hw = sched.hw
    instrs = trace.instructions
    total = sched.total_time   # the kernel's time (neuron-profile's total_time adds the start/stop: end_to_end_ms)
    hbm_r = hbm_w = sb_r = sb_w = ps_r = ps_w = ps_to_sb = 0
    hw_flops = tr_flops = model_flops = 0.0
    mm_count = 0
    tensor_tr_time = 0.0
    fp32_mm_time = 0.0
    elided_rows = sched.row < 0
    for ins in instrs:
        if elided_rows[ins.index]:       # redundant work the toolchain keeps on chip (reuse.py)
            continue
        for r in ins.reads:
            nb = r.nbytes
            if r.buffer == "sbuf":
                sb_r += nb
            elif r.buffer == "psum":
                ps_r += nb
        for w in ins.writes:
            nb = w.nbytes
            if w.buffer == "sbuf":
                sb_w += nb
            elif w.buffer == "psum":
                ps_w += nb
        if ins.engine == "dma":
            shape = sched.transfer[ins.index]
            hbm_r += shape.hbm_read
            hbm_w += shape.hbm_write
        elif ins.engine == "tensor":
            mm_count += 1
            f = matmul_flops(ins)
            dtype = str(ins.attrs.get("dtype") or (ins.in_dtypes[0] if ins.in_dtypes else ""))
            dur = float(sched.end[ins.index] - sched.start[ins.index])
            if dtype == "float32":
                f *= hw.fp32_matmul_flops_factor
                fp32_mm_time += dur
            hw_flops += f
            if ins.attrs.get("is_transpose") or ins.op in ("nc_transpose", "transpose"):
                tr_flops += f
                tensor_tr_time += dur
            else:
                model_flops += matmul_flops(ins)
        elif any(r.buffer == "psum" for r in ins.reads) and any(w.buffer == "sbuf" for w in ins.writes):
            ps_to_sb += sum(r.nbytes for r in ins.reads if r.buffer == "psum")

    elided = 0
    for i in np.flatnonzero(sched.row < 0):
        ins = instrs[int(i)]
        if ins.engine == "dma":
            elided += sum(r.nbytes for r in ins.reads if r.buffer == "hbm")
    save = sum(ev.nbytes for ev in sched.spill_events if ev.kind == "spill_save")
    reload = sum(ev.nbytes for ev in sched.spill_events if ev.kind == "spill_reload")
    hbm_r += reload
    hbm_w += save
    sb_r += save
    sb_w += reload

    durations = sched.busy_end - sched.start
    engine_time = {}
    active = {}
    for k, e in enumerate(COMPUTE_ENGINES):
        m = sched.row == k
        engine_time[e] = float(durations[m].sum())
        active[e] = engine_time[e] / total if total > 0 else 0.0   # in-order: intervals never overlap
    dma_mask = sched.row >= 4
    ds = [sched.start[dma_mask]] + [np.array([ev.start for ev in sched.spill_events])]
    de = [sched.busy_end[dma_mask]] + [np.array([ev.end for ev in sched.spill_events])]
    dma_starts, dma_ends = np.concatenate(ds), np.concatenate(de)
    dma_active = _union_length(dma_starts, dma_ends) / total if total > 0 else 0.0
    all_active = _union_length(np.concatenate([sched.start, dma_starts]),
                               np.concatenate([sched.busy_end, dma_ends])) / total if total > 0 else 0.0
    n_dma = int(dma_mask.sum()) + len(sched.spill_events)
    dma_bytes = sum(s.nbytes for s in sched.transfer.values()) + save + reload

    hbm_total = hbm_r + hbm_w
    ratio = hw.profiler_peak_flops / hw.profiler_hbm_bandwidth
    mm_ai = (hw_flops - tr_flops) / hbm_total if hbm_total else 0.0
    hfu = hw_flops / (hw.profiler_peak_flops * total) if total > 0 else 0.0
    mfu = model_flops / (hw.profiler_peak_flops * total) if total > 0 else 0.0
    mbu = hbm_total / total / hw.profiler_hbm_bandwidth if total > 0 else 0.0

    unc = lookup(hw.name, classify(_class_inputs(trace, sched, total, engine_time, dma_active)), prior_error=hw.model_error)
    plan = sched.memory
    bound, why = _diagnose(trace, sched, total, active, dma_active, mbu, engine_time, tensor_tr_time, fp32_mm_time,
                           save + reload, sb_r + sb_w)
    if unc.kernel_class == "overhead":
        why.append(_fixed_cost_note(trace, sched, total))
    return Profile(
        kernel_name=trace.kernel_name, hw=hw.name, latency=total * 1e3, total_time=total,
        neuroncore_cycle_count=total * hw.base_clock_hz,
        hbm_read_bytes=int(hbm_r), hbm_write_bytes=int(hbm_w), sbuf_read_bytes=int(sb_r), sbuf_write_bytes=int(sb_w),
        psum_read_bytes=int(ps_r), psum_write_bytes=int(ps_w), psum_read_sbuf_write_bytes=int(ps_to_sb),
        spill_save_bytes=int(save), spill_reload_bytes=int(reload),
        hardware_flops=hw_flops, transpose_flops=tr_flops, model_flops=model_flops,
        peak_flops_bandwidth_ratio=ratio, mm_arithmetic_intensity=mm_ai,
        hfu_estimated_percent=hfu, mfu_estimated_percent=mfu, mbu_estimated_percent=mbu,
        tensor_engine_active_time_percent=active["tensor"], vector_engine_active_time_percent=active["vector"],
        scalar_engine_active_time_percent=active["scalar"], gpsimd_engine_active_time_percent=active["gpsimd"],
        dma_active_time_percent=dma_active, total_active_time_percent=all_active,
        tensor_engine_instruction_time=engine_time["tensor"], vector_engine_instruction_time=engine_time["vector"],
        scalar_engine_instruction_time=engine_time["scalar"], gpsimd_engine_instruction_time=engine_time["gpsimd"],
        matmul_instruction_count=mm_count, instruction_count=len(instrs), dma_transfer_count=n_dma,
        dma_transfer_average_bytes=dma_bytes / n_dma if n_dma else 0.0,
        bound=bound, bottleneck=why,
        sbuf_peak_demand_bytes_per_partition=plan.peak_demand["sbuf"],
        psum_peak_demand_bytes_per_partition=plan.peak_demand["psum"],
        hbm_reload_elided_bytes=int(elided), model_error=unc.error_factor - 1,
        # on hardware with a DGE the build decides the DMA issue cost (perf_model.md §2b): say which one was modelled
        estimate_note=estimate_note(hw.name, unc, "" if hw.nc_version < 3 else
                                    f"{'DGE' if hw.dge else '--disable-dge'} build"), uncertainty=unc,
        schedule=sched, trace=trace)


def _class_inputs(trace: Trace, sched: Schedule, total: float, engine_time: dict[str, float],
                  dma_active: float) -> ClassInputs:
    """What the kernel-class rule reads from a schedule (uncertainty.classify)."""
    vec_engine = max(("vector", "scalar", "gpsimd"), key=lambda e: engine_time[e])
    on_engine = sched.row == COMPUTE_ENGINES.index(vec_engine)
    over = float(sched.overhead[on_engine].sum())
    small = np.array([ins.free_elems < sched.hw.tiny_free_elems for ins in trace.instructions], dtype=bool) \
        if len(trace.instructions) else np.zeros(0, dtype=bool)
    tiny = float((sched.busy_end - sched.start - sched.overhead)[on_engine & small].sum())
    shapes = list(sched.transfer.values())
    nbytes = sum(s.nbytes for s in shapes)
    small_bytes = sum(s.nbytes for s in shapes if s.run_bytes < 512)
    return ClassInputs(total=total, tensor_busy=engine_time["tensor"],
                       vector_busy=engine_time[vec_engine], vector_overhead=over,
                       dma_active=dma_active * total, dma_transfers=len(shapes) + len(sched.spill_events),
                       dma_issue=sched.hw.dma_issue_interval,
                       dma_small_share=small_bytes / nbytes if nbytes else 0.0, vector_tiny=tiny)


def _fixed_cost_note(trace: Trace, sched: Schedule, total: float) -> str:
    """Why a fixed-cost-bound estimate is a poor guide: the compiler merges and interleaves small work."""
    hw = sched.hw
    tiny = sum(1 for ins in trace.instructions if ins.engine != "dma" and ins.free_elems < hw.tiny_free_elems)
    dmas = len(sched.transfer)
    issue = dmas * hw.dma_issue_interval
    return (f"fixed-cost-bound: {tiny} compute instructions under {hw.tiny_free_elems} elements per partition and "
            f"{dmas} DMA transfers ({issue * 1e3:.3g} ms of DMA issue slots) decide the latency; the compiler may fuse, "
            "interleave or merge such small work, so the code as written is a poor guide to what runs (see the "
            "error bar); batch the work into fewer, larger instructions and transfers")


def _diagnose(trace: Trace, sched: Schedule, total: float, active: dict[str, float], dma_active: float, mbu: float,
              engine_time: dict[str, float], transpose_time: float, fp32_mm_time: float, spill_bytes: int,
              sbuf_bytes: int) -> tuple[str, list[str]]:
    """Name the bottleneck and list the facts a planner can act on."""
    hw = sched.hw
    why: list[str] = []
    if total <= 0:
        return "empty", ["the kernel issued no instructions"]
    busiest = max(active, key=active.get)
    candidates = dict(active, dma=dma_active)
    top = max(candidates, key=candidates.get)
    if mbu >= 0.6:
        bound = "memory"
        why.append(f"memory-bound: HBM traffic uses {mbu:.0%} of the {hw.profiler_hbm_bandwidth / 1e9:.0f} GB/s "
                   "bandwidth (MBU >= 60%)")
    elif candidates[top] >= 0.6:
        bound = top
        what = "DMA queues move data" if top == "dma" else f"{ENGINE_LABEL[top]} runs"
        why.append(f"{top}-bound: {what} {candidates[top]:.0%} of the time")
    else:
        bound = "latency"
        why.append(f"latency-bound: no engine is busy more than {candidates[top]:.0%} of the time (busiest: "
                   f"{ENGINE_LABEL[top]}); time goes to dependency chains, DMA latency and pipeline fill; "
                   "overlap independent work (more, larger tiles in flight)")
    # engine overhead: many small or dependent instructions
    for e in ("vector", "scalar", "gpsimd"):
        t = engine_time[e]
        if t > 0.2 * total:
            over = float(sched.overhead[sched.row == COMPUTE_ENGINES.index(e)].sum())
            if over > 0.1 * t:
                why.append(f"{ENGINE_LABEL[e]}: {over / t:.0%} of its time is fixed overhead (instructions with fewer "
                           f"than {hw.tiny_free_elems} elements per partition, or waiting on the previous result); "
                           "use larger free sizes and interleave independent work")
    if engine_time["tensor"] > 0.2 * total:
        if transpose_time > 0.1 * engine_time["tensor"]:
            why.append(f"TensorE: {transpose_time / engine_time['tensor']:.0%} of its time is transposes; choose "
                       "layouts (or swap stationary/moving) so fewer are needed")
        if fp32_mm_time > 0.5 * engine_time["tensor"]:
            why.append("TensorE: fp32 matmuls run at 1/4 of the bf16 rate")
    # DMA efficiency
    if sched.transfer:
        shapes = list(sched.transfer.values())
        nb = np.array([s.nbytes for s in shapes], dtype=float)
        run = np.array([s.run_bytes for s in shapes], dtype=float)
        small = nb[run < 2048].sum()
        if dma_active > 0.3 and small > 0.25 * nb.sum():
            why.append(f"DMA: {small / nb.sum():.0%} of the bytes move in transfers under 2 KiB per partition (or in "
                       "short contiguous HBM runs), where DMA efficiency is low; load >= 2-4 KiB per partition "
                       "on 128 partitions")
        parts = np.array([s.partitions for s in shapes], dtype=float)
        if dma_active > 0.3 and nb[parts < 128].sum() > 0.25 * nb.sum():
            why.append("DMA: many transfers use fewer than 128 partitions, so fewer of the 16 DMA engines work")
    if spill_bytes:
        share = spill_bytes / max(sbuf_bytes, 1)
        plan = sched.memory
        why.append(f"spills: {_fmt_bytes(spill_bytes)} of spill traffic ({share:.0%} of SBUF traffic); live data "
                   f"peaks at {plan.peak_demand['sbuf'] / 1024:.0f} KiB/partition vs {plan.capacity['sbuf'] / 1024:.0f}"
                   " KiB usable; shrink or re-tile long-lived buffers (declare tiles inside the loop)")
    if bound not in ("latency", "memory") and busiest != bound and active[busiest] > 0.5:
        why.append(f"next: {ENGINE_LABEL[busiest]} is busy {active[busiest]:.0%} of the time")
    return bound, why


_BYTES = ("hbm_read_bytes", "hbm_write_bytes", "sbuf_read_bytes", "sbuf_write_bytes", "psum_read_bytes",
          "psum_write_bytes", "spill_save_bytes", "spill_reload_bytes", "dma_transfer_average_bytes")
_FRACTIONS = ("hfu_estimated_percent", "mbu_estimated_percent", "tensor_engine_active_time_percent",
              "vector_engine_active_time_percent", "scalar_engine_active_time_percent",
              "gpsimd_engine_active_time_percent", "dma_active_time_percent")
_ORDER = ("kernel_name", "hw", "latency", "bound") + _BYTES[:8] + (
    "hardware_flops", "transpose_flops", "mm_arithmetic_intensity") + _FRACTIONS + (
    "matmul_instruction_count", "instruction_count", "dma_transfer_count", "dma_transfer_average_bytes")


def format_profile(profile: "Profile | Mapping[str, Any]") -> str:
    """A human-readable table of a profile: an estimated :class:`Profile`, or the metrics dict of an
    evaluation (simulator estimate or a real neuron-profile summary; missing fields are skipped)."""
    p = profile.to_dict() if isinstance(profile, Profile) else dict(profile)
    rows = []
    for key in _ORDER:
        v = p.get(key)
        if v is None:
            continue
        if key == "latency":
            text = f"{v:.4f} ms" + (f"  {p['estimate_note']}" if p.get("estimate_note") else "")
        elif key in _BYTES:
            text = _fmt_bytes(v)
        elif key in _FRACTIONS:
            text = f"{v:.4f}"
        elif key == "mm_arithmetic_intensity":
            ridge = p.get("peak_flops_bandwidth_ratio")
            text = f"{v:.2f}" + (f" (ridge {ridge:.2f})" if ridge is not None else "")
        elif key in ("hardware_flops", "transpose_flops"):
            text = f"{v:.4g}"
        else:
            text = str(v)
        rows.append((key.replace("kernel_name", "kernel").replace("hw", "hardware") if key in ("kernel_name", "hw")
                     else key, text))
    width = max((len(k) for k, _ in rows), default=0)
    lines = [f"{k:<{width}}  {v}" for k, v in rows]
    if p.get("estimate_note"):
        lines.append(f"latency, utilizations and speedups are {p['estimate_note']}")
    if p.get("bottleneck"):
        lines.append("bottleneck:")
        lines.extend(f"  - {w}" for w in p["bottleneck"])
    return "\n".join(lines)


__all__ = ["Profile", "build_profile", "estimate_note", "format_profile", "note_of"]
