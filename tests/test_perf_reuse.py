"""Model v2: redundant work kept on chip, compiler engine placement, error bars on every profile."""
import pytest

from accelopt_nb.perf import estimate, format_profile, load_hw
from perf_builders import TraceBuilder

TRN1 = load_hw("trn1")


def _reloading_kernel(weight_cols: int, iterations: int = 8) -> TraceBuilder:
    """Each iteration reloads the same weight tile and loads a fresh activation tile."""
    b = TraceBuilder()
    w_hbm, x_hbm = b.hbm("w", (128, weight_cols)), b.hbm("x", (128, 512 * iterations))
    out = b.hbm("out", (128, 512 * iterations), kind="output")
    for i in range(iterations):
        b.line = 10
        w = b.tensor(f"w{i}", (128, weight_cols))
        b.dma(b.region(w), b.region(w_hbm))
        b.line = 11
        x = b.tensor(f"x{i}", (128, 512))
        b.dma(b.region(x), b.region(x_hbm, (0, 512 * i), (128, 512 * (i + 1))))
        b.line = 12
        y = b.tensor(f"y{i}", (128, 512))
        b.vector("tensor_tensor", [b.region(x), b.region(w, (0, 0), (128, 512))], [b.region(y)], 512,
                 alu="multiply")
        b.line = 13
        b.dma(b.region(out, (0, 512 * i), (128, 512 * (i + 1))), b.region(y))
    return b


def test_a_reloaded_tile_that_fits_is_loaded_once():
    b = _reloading_kernel(weight_cols=1024)         # 4 KiB per partition: fits next to everything else
    p = estimate(b.trace)
    w_bytes = 128 * 1024 * 4
    x_bytes = 8 * 128 * 512 * 4
    assert p.hbm_read_bytes == w_bytes + x_bytes
    assert p.hbm_reload_elided_bytes == 7 * w_bytes
    off = estimate(b.trace, overrides={"elide_redundant_work": False})
    assert off.hbm_read_bytes == 8 * w_bytes + x_bytes and off.hbm_reload_elided_bytes == 0
    assert p.latency < off.latency


def test_a_reloaded_tile_too_large_to_keep_is_reloaded():
    # 160 KiB per partition of weight plus the per-iteration tiles: the kept copy would not fit
    b = _reloading_kernel(weight_cols=40960, iterations=3)
    p = estimate(b.trace)
    assert p.hbm_reload_elided_bytes == 0
    assert p.hbm_read_bytes == 3 * 128 * 40960 * 4 + 3 * 128 * 512 * 4


def test_recomputing_the_same_values_is_elided_but_immediates_are_not_compared():
    b = TraceBuilder()
    x, y = b.tensor("x", (128, 2048)), b.tensor("y", (128, 2048))
    outs = []
    for i in range(4):
        b.line = 20
        o = b.tensor(f"o{i}", (128, 2048))
        b.vector("tensor_tensor", [b.region(x), b.region(y)], [b.region(o)], 2048, alu="multiply")
        b.line = 21      # an immediate operand the trace does not record: never treated as the same
        s = b.tensor(f"s{i}", (128, 2048))
        b.vector("tensor_scalar", [b.region(o)], [b.region(s)], 2048, alu="max")
        outs.append(s)
    p = estimate(b.trace)
    tt, ts = TRN1.tensor_tensor_cycles_per_elem * 2048 / 1.12e9, 2048 / 1.12e9
    first_waits = TRN1.dependent_overhead_cycles / 1.12e9      # s0 issues right after the product it reads
    assert p.vector_engine_instruction_time == pytest.approx(tt + 4 * ts + first_waits)


def test_compiler_placed_tensor_scalar_moves_to_a_free_scalar_engine():
    b = TraceBuilder()
    a, c = b.tensor("a", (128, 4096)), b.tensor("c", (128, 4096))
    outs = [b.tensor(f"o{i}", (128, 4096)) for i in range(4)]
    b.vector("tensor_tensor", [b.region(a), b.region(c)], [b.region(outs[0])], 4096, alu="add")
    b.vector("tensor_scalar", [b.region(a)], [b.region(outs[1])], 4096, alu="multiply", compiler_engine=True)
    b.vector("tensor_scalar", [b.region(c)], [b.region(outs[2])], 4096, alu="max", compiler_engine=True)
    b.vector("tensor_scalar", [b.region(c)], [b.region(outs[3])], 4096, alu="multiply", compiler_engine=False)
    p = estimate(b.trace)
    # the multiply the compiler may place runs on ScalarE; max (not a ScalarE op) and the pinned one do not
    assert p.scalar_engine_instruction_time == pytest.approx(4096 / 1.4e9)
    assert p.vector_engine_instruction_time == pytest.approx((TRN1.tensor_tensor_cycles_per_elem + 2) * 4096 / 1.12e9)
    pinned = estimate(b.trace, overrides={"compiler_engine_placement": False})
    assert pinned.scalar_engine_instruction_time == 0


def test_every_profile_carries_the_model_error():
    b = _reloading_kernel(weight_cols=512, iterations=2)
    p = estimate(b.trace)
    assert p.model_error == pytest.approx(p.uncertainty.error_factor - 1) and p.model_error > 0
    assert p.estimate_note == f"estimated (trn1 model; {p.uncertainty.describe()})"
    d = p.to_dict()
    assert d["estimate_note"] == p.estimate_note and d["latency"] == p.latency
    text = format_profile(p)
    assert p.estimate_note in text.splitlines()[2]          # the latency line


def test_bench_table_and_agent_profile_text_say_estimated():
    from accelopt_nb.agents import format_profile as agent_profile
    from accelopt_nb.bench import format_table, run_bench

    df = run_bench(["silu"], preset="small", trace_only=True, progress=False)
    note = df.iloc[0]["estimate_note"]
    assert note.startswith("estimated (trn1 model; ") and "±" not in note
    assert format_table(df).splitlines()[-1] == f"latency and %peak are {note}"
    b = _reloading_kernel(weight_cols=512, iterations=2)
    p = estimate(b.trace)
    lines = agent_profile(p.to_dict())
    assert lines[-1] == f"note: latency and utilizations are {p.estimate_note}"
    assert not any("estimated" in line for line in agent_profile({"latency": 1.0, "hbm_read_bytes": 10}))


def test_nki_style_dma_copy_reloads_are_elided_like_nl_load():
    """The same matmul in both front ends (0.1 ``nl.load``, today's ``nisa.dma_copy``): same time, same HBM reads."""
    import numpy as np
    from accelopt_nb.kernels import KERNELS_DIR
    from accelopt_nb.sim import SimOptions, load_kernel, simulate

    aT, b = np.zeros((512, 256), np.float32), np.zeros((512, 1024), np.float32)
    profiles = {}
    for style in ("tensor_engine", "tensor_engine_nki"):
        kernel = load_kernel(KERNELS_DIR / f"{style}.py", name="matmul_lhsT")
        profiles[style] = estimate(simulate(kernel, aT, b, options=SimOptions(trace_only=True)).trace)
    old, new = profiles["tensor_engine"], profiles["tensor_engine_nki"]
    assert old.hbm_reload_elided_bytes > 0       # the stationary tiles are reloaded for every column block
    assert new.hbm_reload_elided_bytes == old.hbm_reload_elided_bytes
    assert new.hbm_read_bytes == old.hbm_read_bytes
    assert new.latency == pytest.approx(old.latency, rel=0.02)
