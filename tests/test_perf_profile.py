"""Profile metric definitions (neuron-profile summary-json conventions), bottleneck, timeline."""
import json

import matplotlib
import pytest

from accelopt_nb.perf.calibrate import documented_overrides
from accelopt_nb.perf import estimate, format_profile, load_hw, plot_timeline
from perf_builders import TraceBuilder

matplotlib.use("Agg")
TRN1 = load_hw("trn1", documented_overrides())   # the ISA26/ARCH1 formulas as documented, before the fit


def _matmul_kernel(dtype="bfloat16", n_mm=8, transposes=0):
    b = TraceBuilder("mm")
    a_h, b_h = b.hbm("a", (128, 128), dtype), b.hbm("b", (128, 512), dtype)
    out_h = b.hbm("out", (128, 512), "float32", kind="output")
    st, mv = b.tensor("st", (128, 128), dtype), b.tensor("mv", (128, 512), dtype)
    b.line = 1
    b.dma(b.region(st), b.region(a_h))
    b.line = 2
    b.dma(b.region(mv), b.region(b_h))
    ps = b.tensor("acc", (128, 512), "float32", "psum")
    for _ in range(n_mm):
        b.matmul(b.region(ps), b.region(st), b.region(mv), 128, 128, 512, dtype=dtype)
    for _ in range(transposes):
        tp = b.tensor("tp", (128, 128), "float32", "psum")
        b.matmul(b.region(tp), b.region(st), b.region(st), 128, 128, 128, dtype=dtype, is_transpose=True,
                 accumulate=False)
    sb = b.tensor("res", (128, 512))
    b.vector("tensor_copy", [b.region(ps)], [b.region(sb)], 512)
    b.line = 3
    b.dma(b.region(out_h), b.region(sb))
    return b.trace


def test_flop_counts_follow_the_profiler():
    bf = estimate(_matmul_kernel("bfloat16", n_mm=8))
    assert bf.hardware_flops == 8 * 2 * 128 * 128 * 512
    assert bf.transpose_flops == 0 and bf.model_flops == bf.hardware_flops
    fp = estimate(_matmul_kernel("float32", n_mm=8))
    assert fp.hardware_flops == 2 * 8 * 2 * 128 * 128 * 512        # fp32 matmuls count twice [obs]
    assert fp.model_flops == 8 * 2 * 128 * 128 * 512
    # three transposes of the same tile: keep them all (the toolchain would do the work once, reuse.py)
    tr = estimate(_matmul_kernel("bfloat16", n_mm=2, transposes=3), overrides={"elide_redundant_work": False})
    assert tr.transpose_flops == 3 * 2 * 128 * 128 * 128
    assert tr.matmul_instruction_count == 5


def test_ratios_and_utilizations():
    p = estimate(_matmul_kernel("bfloat16", n_mm=64))
    hbm = p.hbm_read_bytes + p.hbm_write_bytes
    assert p.hbm_read_bytes == 2 * (128 * 128 + 128 * 512) and p.hbm_write_bytes == 128 * 512 * 4
    assert p.peak_flops_bandwidth_ratio == pytest.approx(91.7504e12 / 410e9)
    assert p.mm_arithmetic_intensity == pytest.approx((p.hardware_flops - p.transpose_flops) / hbm)
    assert p.hfu_estimated_percent == pytest.approx(p.hardware_flops / (91.7504e12 * p.total_time))
    assert p.mbu_estimated_percent == pytest.approx(hbm / p.total_time / 410e9)
    assert p.latency == pytest.approx(p.total_time * 1e3)
    assert p.neuroncore_cycle_count == pytest.approx(p.total_time * 1.4e9)
    for name, value in p.to_dict().items():
        if name.endswith("_percent"):
            assert 0.0 <= value <= 1.0, name
    assert p.tensor_engine_active_time_percent == pytest.approx(64 * 512 / 2.8e9 / p.total_time)
    # SBUF/PSUM traffic: DMA writes into SBUF, matmul operand reads, PSUM accumulation writes
    assert p.psum_write_bytes == 64 * 128 * 512 * 4
    assert p.psum_read_bytes == 128 * 512 * 4 == p.psum_read_sbuf_write_bytes
    assert p.sbuf_write_bytes == 2 * (128 * 128 + 128 * 512) + 128 * 512 * 4


def test_to_dict_is_summary_json_like():
    p = estimate(_matmul_kernel())
    d = json.loads(json.dumps(p.to_dict()))
    for key in ("latency", "total_time", "hbm_read_bytes", "hbm_write_bytes", "psum_read_bytes", "psum_write_bytes",
                "sbuf_read_bytes", "sbuf_write_bytes", "spill_reload_bytes", "spill_save_bytes", "hardware_flops",
                "transpose_flops", "peak_flops_bandwidth_ratio", "mm_arithmetic_intensity", "hfu_estimated_percent",
                "mbu_estimated_percent", "tensor_engine_active_time_percent", "vector_engine_active_time_percent",
                "scalar_engine_active_time_percent", "gpsimd_engine_active_time_percent", "dma_active_time_percent",
                "matmul_instruction_count", "bound", "bottleneck"):
        assert key in d, key
    assert "schedule" not in d and "trace" not in d
    nested = json.loads(p.summary_json())
    assert list(nested) == ["mm"] and nested["mm"]["latency"] == d["latency"]


def test_bound_names_the_bottleneck():
    tensor_bound = estimate(_matmul_kernel("float32", n_mm=400))
    assert tensor_bound.bound == "tensor"
    assert any("fp32 matmuls" in w for w in tensor_bound.bottleneck)
    b = TraceBuilder()
    x, y = b.tensor("x", (128, 64)), b.tensor("y", (128, 64))
    for _ in range(200):
        b.vector("tensor_scalar", [b.region(x)], [b.region(y)], 64)
        b.vector("tensor_scalar", [b.region(y)], [b.region(x)], 64)
    vec = estimate(b.trace, TRN1)
    assert vec.bound == "vector"
    assert any("fixed overhead" in w for w in vec.bottleneck)
    small = estimate(_matmul_kernel(n_mm=1))
    assert small.bound in ("latency", "dma")


def test_format_profile_lists_the_fields():
    text = format_profile(estimate(_matmul_kernel()))
    for key in ("latency", "hbm_read_bytes", "hfu_estimated_percent", "vector_engine_active_time_percent", "bottleneck"):
        assert key in text


def test_timeline_has_a_row_per_busy_engine_and_queue():
    p = estimate(_matmul_kernel())
    fig = plot_timeline(p)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels[:4] == ["tensor", "vector", "scalar", "gpsimd"]
    assert sum(lbl.startswith("dma q") for lbl in labels) == 3      # three DMA statements, three queues
    fig2 = p.timeline(show_empty_queues=True, t0_us=0, t1_us=1)
    assert len(fig2.axes[0].get_yticklabels()) == 4 + TRN1.dma_queues + 1
    import matplotlib.pyplot as plt
    plt.close(fig)
    plt.close(fig2)
