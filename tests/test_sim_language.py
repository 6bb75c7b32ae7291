"""nl APIs against NumPy references on small shapes."""
import math

import ml_dtypes
import numpy as np
import pytest

BINARY = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
    "maximum": np.maximum, "minimum": np.minimum, "power": lambda a, b: np.power(np.abs(a), b),
    "fmod": np.fmod, "mod": np.mod,
    "equal": np.equal, "not_equal": np.not_equal, "greater": np.greater, "greater_equal": np.greater_equal,
    "less": np.less, "less_equal": np.less_equal,
    "logical_and": np.logical_and, "logical_or": np.logical_or, "logical_xor": np.logical_xor,
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_tile_tile(run_kernel, rng, name):
    body = f"""
@nki.jit
def kernel(a, b):
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a)
    y = nl.load(b)
    {'x = nl.abs(x)' if name == 'power' else ''}
    nl.store(out, value=nl.{name}(x, y, dtype=nl.float32))
    return out
"""
    a = rng.standard_normal((16, 32)).astype(np.float32)
    b = rng.standard_normal((16, 32)).astype(np.float32) + (2.0 if name in ("fmod", "mod", "divide") else 0)
    b = np.round(b) if name == "power" else b
    expected = BINARY[name](a, b).astype(np.float32)
    got = run_kernel(body, a, b).output
    np.testing.assert_allclose(got, expected, rtol=2e-6, atol=1e-6)


def test_scalar_and_column_broadcast_operands(run_kernel, rng):
    body = """
@nki.jit
def kernel(a, c):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a)
    col = nl.load(c)
    y = nl.multiply(x, col)          # [P, F] * [P, 1]
    z = (y + 1.5) * 2 - x / 4.0      # operator overloads with scalars
    nl.store(out, value=z)
    return out
"""
    a = rng.standard_normal((8, 64)).astype(np.float32)
    c = rng.standard_normal((8, 1)).astype(np.float32)
    res = run_kernel(body, a, c)
    np.testing.assert_allclose(res.output, (a * c + 1.5) * 2 - a / 4.0, rtol=1e-6, atol=1e-6)
    ops = [i.op for i in res.trace.instructions if i.engine == "vector"]
    assert ops[0] == "tensor_scalar"  # the [P,1] operand lowers to tensor_scalar


UNARY = {
    "abs": np.abs, "negative": np.negative, "sign": np.sign, "trunc": np.trunc, "floor": np.floor,
    "ceil": np.ceil, "exp": np.exp, "log": lambda x: np.log(np.abs(x) + 0.1), "sqrt": lambda x: np.sqrt(np.abs(x)),
    "rsqrt": lambda x: 1 / np.sqrt(np.abs(x) + 0.1), "reciprocal": lambda x: 1 / (x + 3.0), "square": np.square,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "tanh": np.tanh, "arctan": np.arctan,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "relu": lambda x: np.maximum(x, 0),
    "gelu": lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2))),
    "gelu_apprx_tanh": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))),
    "gelu_apprx_sigmoid": lambda x: x / (1 + np.exp(-1.702 * x)),
    "silu": lambda x: x / (1 + np.exp(-x)), "erf": np.vectorize(math.erf),
    "erf_dx": lambda x: 2 / math.sqrt(math.pi) * np.exp(-x * x), "softplus": lambda x: np.log1p(np.exp(x)),
    "mish": lambda x: x * np.tanh(np.log1p(np.exp(x))),
    "silu_dx": lambda x: (1 / (1 + np.exp(-x))) * (1 + x * (1 - 1 / (1 + np.exp(-x)))),
    "gelu_dx": lambda x: 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2))) + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi),
}
PREP = {"log": "nl.abs(x) + 0.1", "sqrt": "nl.abs(x)", "rsqrt": "nl.abs(x) + 0.1", "reciprocal": "x + 3.0"}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(run_kernel, rng, name):
    body = f"""
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a)
    x = {PREP.get(name, 'x')}
    nl.store(out, value=nl.{name}(x))
    return out
"""
    a = rng.standard_normal((4, 50)).astype(np.float32)
    np.testing.assert_allclose(run_kernel(body, a).output, UNARY[name](a.astype(np.float64)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name,ref", [("sum", np.sum), ("max", np.max), ("min", np.min), ("mean", np.mean),
                                      ("prod", np.prod), ("var", np.var)])
def test_reductions_keepdims(run_kernel, rng, name, ref):
    body = f"""
@nki.jit
def kernel(a):
    out = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, value=nl.{name}(nl.load(a), axis=1, keepdims=True))
    return out
"""
    a = (rng.standard_normal((8, 16)) * 0.5 + 1).astype(np.float32)
    np.testing.assert_allclose(run_kernel(body, a).output, ref(a, axis=1, keepdims=True), rtol=1e-5)


def test_reduction_over_multiple_free_axes_and_all(run_kernel, rng):
    body = """
@nki.jit
def kernel(a):
    out = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(a)
    s = nl.sum(t, axis=[1, 2], keepdims=True)
    nl.store(out, value=s.reshape((a.shape[0], 1)))
    return out
"""
    a = rng.standard_normal((4, 3, 5)).astype(np.float32)
    np.testing.assert_allclose(run_kernel(body, a).output, a.sum(axis=(1, 2))[:, None], rtol=1e-5)


def test_reduce_over_partition_axis_is_an_error(run_kernel, rng):
    from accelopt_nb.errors import NKIRuleError
    body = """
@nki.jit
def kernel(a):
    out = nl.ndarray((1, a.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, value=nl.sum(nl.load(a), axis=0, keepdims=True))
    return out
"""
    with pytest.raises(NKIRuleError, match="partition axis"):
        run_kernel(body, rng.standard_normal((4, 4)).astype(np.float32))


def test_softmax_rms_norm_where(run_kernel, rng):
    body = """
@nki.jit
def kernel(a, w):
    o1 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    o2 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    o3 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a)
    nl.store(o1, value=nl.softmax(x, axis=1))
    nl.store(o2, value=nl.rms_norm(x, nl.load(w), axis=1, epsilon=1e-6))
    nl.store(o3, value=nl.where(nl.greater(x, 0.0), x, 0.5))
    return o1, o2, o3
"""
    a = (rng.standard_normal((8, 32)) * 3).astype(np.float32)
    w = rng.standard_normal((8, 32)).astype(np.float32)
    o1, o2, o3 = run_kernel(body, a, w).outputs
    e = np.exp(a - a.max(axis=1, keepdims=True))
    np.testing.assert_allclose(o1, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(o2, a / np.sqrt((a * a).mean(axis=1, keepdims=True) + 1e-6) * w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(o3, np.where(a > 0, a, 0.5))


def test_matmul_and_transpose(run_kernel, rng):
    body = """
@nki.jit
def kernel(x, y):
    o1 = nl.ndarray((x.shape[0], y.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    o2 = nl.ndarray((x.shape[1], x.shape[0]), dtype=nl.float32, buffer=nl.shared_hbm)
    xt = nl.load(x)
    yt = nl.load(y)
    nl.store(o1, value=nl.copy(nl.matmul(xt, yt)))           # compiler-inserted transpose of x
    nl.store(o2, value=nl.transpose(xt))
    return o1, o2
"""
    x = rng.standard_normal((64, 96)).astype(np.float32)
    y = rng.standard_normal((96, 200)).astype(np.float32)
    res = run_kernel(body, x, y)
    np.testing.assert_allclose(res.outputs[0], x @ y, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(res.outputs[1], x.T)
    mm = [i for i in res.trace.instructions if i.op == "nc_matmul"]
    assert [i.attrs["is_transpose"] for i in mm] == [True, False, True]


def test_matmul_transpose_x(run_kernel, rng):
    body = """
@nki.jit
def kernel(xT, y):
    out = nl.ndarray((xT.shape[1], y.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    p = nl.matmul(nl.load(xT), nl.load(y), transpose_x=True)
    nl.store(out, value=p)
    return out
"""
    xT = rng.standard_normal((128, 128)).astype(np.float32)
    y = rng.standard_normal((128, 512)).astype(np.float32)
    res = run_kernel(body, xT, y)
    np.testing.assert_allclose(res.output, xT.T @ y, rtol=1e-4, atol=1e-3)
    # a PSUM value stored to HBM is evacuated to SBUF first
    assert [i.op for i in res.trace.instructions][-2:] == ["tensor_copy", "dma_store"]


def test_creation_apis(run_kernel, rng):
    body = """
@nki.jit
def kernel(a):
    o = nl.ndarray((6, a.shape[0], a.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a)
    nl.store(o[0], value=nl.zeros(a.shape, dtype=nl.float32))
    nl.store(o[1], value=nl.ones(a.shape, dtype=nl.float32))
    nl.store(o[2], value=nl.full(a.shape, 3.5, dtype=nl.float32))
    nl.store(o[3], value=nl.zeros_like(x))
    e = nl.empty_like(x)
    e[...] = nl.exp(x)
    nl.store(o[4], value=e)
    ident = nl.load(nl.shared_identity_matrix(a.shape[0], dtype=nl.float32))
    nl.store(o[5], value=ident[:, 0:a.shape[1]])
    return o
"""
    a = rng.standard_normal((8, 8)).astype(np.float32)
    o = run_kernel(body, a).output
    np.testing.assert_array_equal(o[0], 0)
    np.testing.assert_array_equal(o[1], 1)
    np.testing.assert_array_equal(o[2], 3.5)
    np.testing.assert_array_equal(o[3], 0)
    np.testing.assert_allclose(o[4], np.exp(a), rtol=1e-6)
    np.testing.assert_array_equal(o[5], np.eye(8))


def test_load_transpose2d_and_broadcast(run_kernel, rng):
    body = """
@nki.jit
def kernel(a, r):
    o1 = nl.ndarray((a.shape[1], a.shape[0]), dtype=a.dtype, buffer=nl.shared_hbm)
    o2 = nl.ndarray((16, r.shape[1]), dtype=r.dtype, buffer=nl.shared_hbm)
    o3 = nl.ndarray((16, 8), dtype=r.dtype, buffer=nl.shared_hbm)
    nl.store(o1, value=nl.load_transpose2d(a))
    row = nl.load(r)
    nl.store(o2, value=nl.broadcast_to(row, shape=(16, r.shape[1])))
    col = nl.load(a[0:16, 0:1])
    nl.store(o3, value=col.broadcast_to((16, 8)))
    return o1, o2, o3
"""
    a = rng.standard_normal((32, 16)).astype(np.float32)
    r = rng.standard_normal((1, 24)).astype(np.float32)
    res = run_kernel(body, a, r)
    np.testing.assert_array_equal(res.outputs[0], a.T)
    np.testing.assert_array_equal(res.outputs[1], np.broadcast_to(r, (16, 24)))
    np.testing.assert_array_equal(res.outputs[2], np.broadcast_to(a[0:16, 0:1], (16, 8)))
    ops = res.trace.op_counts()
    assert ops["dma_transpose"] == 1 and ops["nc_matmul"] == 1  # partition broadcast runs on TensorE


def test_tile_methods_astype_reshape(run_kernel, rng):
    body = """
@nki.jit
def kernel(a):
    out = nl.ndarray((a.shape[0], a.shape[1] * a.shape[2]), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(a)
    assert t.shape == a.shape and t.dtype == nl.float32
    b = t.astype(nl.bfloat16)
    nl.store(out, value=b.astype(nl.float32).reshape((a.shape[0], a.shape[1] * a.shape[2])))
    return out
"""
    a = rng.standard_normal((4, 3, 5)).astype(np.float32)
    expected = a.astype(ml_dtypes.bfloat16).astype(np.float32).reshape(4, 15)
    np.testing.assert_array_equal(run_kernel(body, a).output, expected)


def test_device_print_and_copy(run_kernel):
    body = """
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    nl.device_print("tile=", t)
    nl.store(out, value=nl.copy(t))
    return out
"""
    res = run_kernel(body, np.arange(4, dtype=np.float32).reshape(2, 2))
    assert res.log and res.log[0].startswith("tile=")


@pytest.mark.parametrize("name,ref", [("bitwise_and", np.bitwise_and), ("bitwise_or", np.bitwise_or),
                                      ("bitwise_xor", np.bitwise_xor), ("left_shift", np.left_shift),
                                      ("right_shift", np.right_shift)])
def test_bitwise_ops_on_int_tiles(run_kernel, rng, name, ref):
    body = f"""
@nki.jit
def kernel(a, b):
    out = nl.ndarray(a.shape, dtype=nl.int32, buffer=nl.shared_hbm)
    nl.store(out, value=nl.{name}(nl.load(a), nl.load(b)))
    return out
"""
    a = rng.integers(0, 1 << 12, (4, 8)).astype(np.int32)
    b = rng.integers(0, 8, (4, 8)).astype(np.int32)
    np.testing.assert_array_equal(run_kernel(body, a, b).output, ref(a, b))


def test_invert_and_logical_not(run_kernel):
    body = """
@nki.jit
def kernel(a):
    o1 = nl.ndarray(a.shape, dtype=nl.int32, buffer=nl.shared_hbm)
    o2 = nl.ndarray(a.shape, dtype=nl.uint8, buffer=nl.shared_hbm)
    x = nl.load(a)
    nl.store(o1, value=nl.invert(x))
    nl.store(o2, value=nl.logical_not(x))
    return o1, o2
"""
    a = np.array([[0, 1, 5, -3]], dtype=np.int32)
    o1, o2 = run_kernel(body, a).outputs
    np.testing.assert_array_equal(o1, np.invert(a))
    np.testing.assert_array_equal(o2, (a == 0).astype(np.uint8))


def test_partition_broadcast_in_nl_ops_is_costed_on_tensor_engine(run_kernel, rng):
    body = """
@nki.jit
def kernel(x, row):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.multiply(nl.load(x), nl.load(row)))
    return out
"""
    x = rng.standard_normal((16, 8)).astype(np.float32)
    row = rng.standard_normal((1, 8)).astype(np.float32)
    res = run_kernel(body, x, row)
    np.testing.assert_allclose(res.output, x * row, rtol=1e-6)
    assert res.trace.op_counts()["nc_matmul"] == 1   # the ones-vector broadcast on TensorE


def test_operators_do_not_broadcast_over_partitions(run_kernel, rng):
    from accelopt_nb.errors import NKIRuleError
    body = """
@nki.jit
def kernel(x, row):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(x) * nl.load(row))
    return out
"""
    with pytest.raises(NKIRuleError, match="partition axis") as exc:
        run_kernel(body, np.ones((16, 8), np.float32), np.ones((1, 8), np.float32))
    assert exc.value.line == 12


RAND_KERNEL = """
@nki.jit
def kernel(a):
    out = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a)
    r = nl.rand((128, 4))
    nl.store(out, value=nl.add(nl.dropout(x, 0.5), r))
    return out
"""


def test_rand_and_dropout_depend_on_the_launch_alone(tmp_path):
    """nl.rand / nl.dropout draw from a generator seeded per launch: the same kernel on the same input gives one
    answer however many launches ran before it (a generator kept per id(runtime) continued an earlier launch's
    whenever a new runtime took a freed one's address), and nl.random_seed reseeds the launch's own."""
    from conftest import HEADER

    from accelopt_nb.sim import load_kernel, simulate
    path = tmp_path / "rand.py"
    path.write_text(HEADER + RAND_KERNEL)
    kern = load_kernel(path)
    a = np.ones((128, 4), np.float32)
    first = simulate(kern, a).output
    assert len(np.unique(first)) > 8                      # random values, not a constant
    differ = sum(not np.array_equal(simulate(kern, a).output, first) for _ in range(300))
    assert differ == 0
    seeded = tmp_path / "seeded.py"
    seeded.write_text(HEADER + RAND_KERNEL.replace("    x = nl.load(a)", "    nl.random_seed(7)\n    x = nl.load(a)"))
    runs = [simulate(load_kernel(seeded), a).output for _ in range(2)]
    assert np.array_equal(runs[0], runs[1]) and not np.array_equal(runs[0], first)
