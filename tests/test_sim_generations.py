"""The simulated target's NeuronCore generation (SimOptions.hw, issue 32): semantics that differ by generation
(nc_matmul's transpose mode) and calls documented for one generation only, against NumPy."""
import ml_dtypes
import numpy as np
import pytest

from accelopt_nb.errors import ConfigError, TargetError
from accelopt_nb.hwfiles import target
from accelopt_nb.sim import SimOptions, load_kernel, simulate

OLD = ("import numpy as np\nimport neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\n"
       "import neuronxcc.nki.isa as nisa\n\n")
NEW = "import nki\nimport nki.isa as nisa\nimport nki.language as nl\nimport numpy as np\n\n"
BF16 = ml_dtypes.bfloat16

# autocomp's trn1 attention candidates: QK^T as nc_matmul(q, k, is_transpose=True) with neither operand an identity
QK = '''
@nki.jit
def kernel(q, k):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    qk = nisa.nc_matmul(stationary=nl.load(q), moving=nl.load(k), is_transpose=True)
    nl.store(out, value=nl.copy(qk, dtype=nl.float32))
    return out
'''


def run(source, *inputs, **opts):
    return simulate(load_kernel(source=source), *inputs, options=SimOptions(**opts))


def qk_inputs(rng):
    return (rng.standard_normal((64, 128)).astype(BF16), rng.standard_normal((64, 512)).astype(BF16))


def test_trn1_has_no_transpose_mode_so_is_transpose_is_the_plain_fp32_matmul(rng):
    q, k = qk_inputs(rng)
    exact = q.astype(np.float32).T @ k.astype(np.float32)
    res = run(OLD + QK, q, k, hw="trn1")
    np.testing.assert_allclose(res.output, exact, rtol=1e-5, atol=1e-5)
    mm = next(i for i in res.trace.instructions if i.op == "nc_matmul")
    assert mm.out_dtype == "float32" and mm.attrs["is_transpose"]     # still a transpose to the profiler


@pytest.mark.parametrize("hw", ["trn2", None])
def test_trn2_transpose_mode_returns_the_two_byte_input_type(rng, hw):
    q, k = qk_inputs(rng)
    exact = q.astype(np.float32).T @ k.astype(np.float32)
    res = run(OLD + QK, q, k, hw=hw)      # an unknown target keeps the NC-v3 reading (docs/nki_coverage.md)
    np.testing.assert_array_equal(res.output, exact.astype(BF16).astype(np.float32))
    assert next(i for i in res.trace.instructions if i.op == "nc_matmul").out_dtype == "bfloat16"


def test_a_transpose_against_an_identity_is_exact_on_both_generations(rng):
    body = '''
@nki.jit
def kernel(x):
    out = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    eye = nl.shared_constant(np.identity(128, dtype=np.float32), dtype=nl.bfloat16)
    t = nisa.nc_matmul(stationary=nl.load(x), moving=nl.load(eye), is_transpose=True)
    nl.store(out, value=nl.copy(t, dtype=nl.float32))
    return out
'''
    x = rng.standard_normal((128, 64)).astype(BF16)
    for hw in ("trn1", "trn2"):
        np.testing.assert_array_equal(run(OLD + body, x, hw=hw).output, x.astype(np.float32).T)


GET_VERSION = '''
@nki.jit
def kernel(x):
    out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.full((1, 1), float(int(nisa.get_nc_version())), dtype=nl.float32)
    nl.store(out, value=t)
    return out
'''


@pytest.mark.parametrize("hw, version", [("trn1", 2), ("trn2", 3), (None, 2)])
def test_get_nc_version_is_the_targets(hw, version):
    assert run(OLD + GET_VERSION, np.zeros((1, 1), np.float32), hw=hw).output[0, 0] == version


RANGE_SELECT = '''
@nki.jit
def kernel(x, b0, b1):
    o = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    tb0 = nl.ndarray((64, 1), dtype=nl.float32, buffer=nl.sbuf)
    tb1 = nl.ndarray((64, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=tb0, src=b0)
    nisa.dma_copy(dst=tb1, src=b1)
    r = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.sbuf)
    mx = nl.ndarray((64, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.range_select(dst=r, on_true_tile=t, comp_op0=nl.greater_equal, comp_op1=nl.less, bound0=tb0, bound1=tb1,
                      reduce_res=mx, on_false_value=-1e30)
    nisa.dma_copy(dst=o, src=r)
    return o
'''


def test_a_call_documented_for_nc_v3_only_is_refused_on_trn1_naming_api_front_end_and_target(rng):
    x = rng.standard_normal((64, 32)).astype(np.float32)
    b0 = np.full((64, 1), 4.0, np.float32)
    b1 = np.full((64, 1), 20.0, np.float32)
    with pytest.raises(TargetError) as err:
        run(NEW + RANGE_SELECT, x, b0, b1, hw="trn1")
    text = str(err.value)
    assert err.value.api == "nki.isa.range_select"
    assert "NeuronCore-v3" in text and "trn1 (NeuronCore-v2)" in text and err.value.line is not None
    cols = np.arange(32)
    want = np.where((cols >= 4) & (cols < 20), x, -1e30)
    for hw in ("trn2", None):     # the target that has it, and an unknown target (permissive)
        np.testing.assert_array_equal(run(NEW + RANGE_SELECT, x, b0, b1, hw=hw).output, want)


def test_a_mode_documented_for_nc_v3_only_is_refused_on_trn1(rng):
    body = '''
@nki.jit
def kernel(a, b):
    out = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.shared_hbm)
    at = nl.load(a, dtype=nl.float8_e4m3)
    bt = nl.load(b, dtype=nl.float8_e4m3)
    acc = nisa.nc_matmul(at, bt, perf_mode=nisa.matmul_perf_mode.double_row)
    nl.store(out, value=nl.copy(acc))
    return out
'''
    a = rng.standard_normal((128, 128)).astype(np.float32)
    b = rng.standard_normal((128, 256)).astype(np.float32)
    with pytest.raises(TargetError, match=r"double_row.*trn1 \(NeuronCore-v2\)") as err:
        run(OLD + body, a, b, hw="trn1")
    assert err.value.api == "neuronxcc.nki.isa.nc_matmul"
    assert run(OLD + body, a, b, hw="trn2").output.shape == (128, 256)


def test_the_target_comes_from_the_hardware_registry(tmp_path):
    assert target("trn1").nc_version == 2 and target("trn2").nc_version == 3 and target(None) is None
    what_if = tmp_path / "faster_trn2.yaml"
    what_if.write_text("base: trn2\nname: faster_trn2\nhbm_bandwidth: 4.0e12\n")
    assert target(str(what_if)) == ("faster_trn2", 3)
    with pytest.raises(ConfigError, match="unknown hardware 'trn9'"):
        SimOptions(hw="trn9")


def test_the_evaluation_backend_simulates_for_its_hardware(tmp_path, rng):
    from accelopt_nb.evaluation.backends.simulator import SimulatorBackend

    path = tmp_path / "k.py"
    path.write_text(OLD + QK)
    q, k = qk_inputs(rng)
    exact = q.astype(np.float32).T @ k.astype(np.float32)
    outputs = {}
    for hw in ("trn1", "trn2"):
        backend = SimulatorBackend(hw=hw)
        backend.load(path, "kernel")
        outputs[hw] = backend.run([q, k]).outputs[0]
    np.testing.assert_allclose(outputs["trn1"], exact, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(outputs["trn2"], exact.astype(BF16).astype(np.float32))


NAN_TRANSPOSE = '''
@nki.jit
def kernel(x):
    out = nl.ndarray((2, 64, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    a = nisa.nc_transpose(t, engine=nisa.tensor_engine)
    eye = nl.load(nl.shared_constant(np.identity(128, dtype=np.float32), dtype=nl.float32))
    b = nisa.nc_matmul(stationary=t, moving=eye, is_transpose=True)
    nl.store(out[0], value=nl.copy(a, dtype=nl.float32))
    nl.store(out[1], value=nl.copy(b, dtype=nl.float32))
    return out
'''


def test_nc_v2_transposes_spread_nan_and_inf_and_nc_v3_transposes_bit_accurately(rng):
    x = rng.standard_normal((128, 64)).astype(np.float32)
    x[5, 7] = np.nan
    x[9, 20] = np.inf
    for hw in ("trn2", None):     # transpose mode: every element where it belongs
        out = run(OLD + NAN_TRANSPOSE, x, hw=hw).output
        np.testing.assert_array_equal(out[0], x.T)
        np.testing.assert_array_equal(out[1], x.T)
    out = run(OLD + NAN_TRANSPOSE, x, hw="trn1").output    # a matmul against an identity: 0 x NaN, 0 x Inf = NaN
    for o in out:
        finite_rows = np.ones(64, bool)
        finite_rows[[7, 20]] = False
        np.testing.assert_array_equal(o[finite_rows], x.T[finite_rows])
        assert np.isnan(o[7]).all()
        assert np.isnan(np.delete(o[20], 9)).all() and o[20, 9] == np.inf


def test_generation_transposes_in_a_replayed_loop_equal_running_every_iteration(rng):
    body = '''
@nki.jit
def kernel(x):
    out = nl.ndarray((6, 2, 64, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    eye = nl.load(nl.shared_constant(np.identity(128, dtype=np.float32), dtype=nl.float32))
    for i in nl.affine_range(6):
        t = nl.load(x[i])
        a = nisa.nc_transpose(t, engine=nisa.tensor_engine)
        b = nisa.nc_matmul(stationary=t, moving=eye, is_transpose=True)
        nl.store(out[i, 0], value=nl.copy(a, dtype=nl.float32))
        nl.store(out[i, 1], value=nl.copy(b, dtype=nl.float32))
    return out
'''
    x = rng.standard_normal((6, 128, 64)).astype(np.float32)
    x[4, 3, 2] = np.nan
    for hw in ("trn1", "trn2"):
        replayed = run(OLD + body, x, hw=hw).output
        np.testing.assert_array_equal(replayed, run(OLD + body, x, hw=hw, loop_replay=False).output)
        np.testing.assert_array_equal(replayed[:4], np.stack([x[:4].transpose(0, 2, 1)] * 2, axis=1))
        assert np.isnan(replayed[4, :, 2]).all() == (hw == "trn1")


def test_accelopt_simulate_hw_reaches_the_simulator(tmp_path):
    from accelopt_nb.commands.simulate import run_simulation

    (tmp_path / "task.py").write_text(
        "import numpy as np\n\n"
        "def get_inputs():\n    return [np.random.normal(0, 1, (64, 32)).astype(np.float32)]\n\n"
        "def forward(x):\n    return np.where((np.arange(32) >= 4) & (np.arange(32) < 20), x, -1e30)\n\n"
        "def transform_to_nki_inputs(inputs):\n"
        "    return [inputs[0], np.full((64, 1), 4.0, np.float32), np.full((64, 1), 20.0, np.float32)]\n\n"
        "def transform_nki_outputs(k_res, ref):\n    return (np.asarray(k_res),)\n")
    (tmp_path / "kernel.py").write_text(NEW + RANGE_SELECT)
    paths = str(tmp_path / "kernel.py"), str(tmp_path / "task.py")
    refused = run_simulation(*paths, hw="trn1")
    assert refused["status"] == "error" and refused["error"]["type"] == "TargetError"
    assert refused["error"]["api"] == "nki.isa.range_select" and "trn1" in refused["error"]["message"]
    assert run_simulation(*paths, hw="trn2")["status"] == "correct"
    assert run_simulation(*paths)["status"] == "correct"      # no --hw: unknown target, permissive
