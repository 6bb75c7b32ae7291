"""Today's standalone ``nki`` style (issue 32): what must run, each checked against NumPy.

One small kernel per case of issue 32, written here in the style the Neuron docs describe: the
false rejections (rules the simulator enforces that the compiler and hardware do not), the front-end
features production kernels use, and the errors for what is still missing. Cases that fail today are
strict xfails: the implementer removes each mark as the case starts to pass.
"""
import numpy as np
import pytest

from accelopt_nb.errors import AccelOptError
from accelopt_nb.sim import load_kernel, simulate

HEADER = "import nki\nimport nki.isa as nisa\nimport nki.language as nl\nimport numpy as np\n\n"
HEADER01 = ("import numpy as np\nimport neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\n"
            "import neuronxcc.nki.isa as nisa\n\n")
FALSE_REJECTION = "issue 32: a rule the simulator enforces that the compiler and hardware do not"
MISSING = "issue 32: not in the simulator's nki front end yet"


def run(body: str, *inputs, **kwargs):
    return simulate(load_kernel(source=HEADER + body), *inputs, **kwargs)


# ---- false rejections: each compiles and runs on trn1/trn2 -----------------------------------------------
def test_activation_with_copy_is_the_identity(rng):
    # the docs' activation table lists nl.copy as Identity, valid on [-inf, inf]
    x = rng.standard_normal((128, 64)).astype(np.float32)
    res = run('''
@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    y = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.activation(dst=y, op=nl.copy, data=t, scale=2.0)
    nisa.dma_copy(dst=out, src=y)
    return out
''', x)
    np.testing.assert_allclose(res.output, 2.0 * x, rtol=1e-6)


def test_scalar_engine_accumulates_across_activations_with_reduce_cmd(rng):
    # reset_reduce starts the 128 accumulator registers, reduce adds onto them, reduce_res reads them out
    a, b = (rng.standard_normal((128, 256)).astype(np.float32) for _ in range(2))
    res = run('''
@nki.jit
def kernel(a, b):
    out = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    ta = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    tb = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=ta, src=a)
    nisa.dma_copy(dst=tb, src=b)
    ea = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    eb = nl.ndarray(b.shape, dtype=nl.float32, buffer=nl.sbuf)
    acc = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=ea, op=nl.exp, data=ta, reduce_op=nl.add, reduce_cmd=nisa.reduce_cmd.reset_reduce)
    nisa.activation(dst=eb, op=nl.exp, data=tb, reduce_op=nl.add, reduce_res=acc,
                    reduce_cmd=nisa.reduce_cmd.reduce)
    nisa.dma_copy(dst=out, src=acc)
    return out
''', a, b)
    want = np.exp(a).sum(1, keepdims=True) + np.exp(b).sum(1, keepdims=True)
    np.testing.assert_allclose(res.output, want, rtol=1e-5)


# The next cases are written in the NKI 0.1 style (neuronxcc.nki) of the kernels they come from: candidates of
# autocomp's published trn1 optimization traces, each compiled, checked and timed on hardware (see the notes of
# issue 32), that the simulator stops today.
def test_matmul_stationary_from_a_transpose_left_in_psum(rng):
    # the pattern of autocomp's attention candidates (0.29-0.41 ms on trn1): the PSUM result of a TensorE
    # transpose feeds the next matmul directly; the compiler moves it to SBUF
    p, v = rng.standard_normal((128, 128)).astype(np.float32), rng.standard_normal((128, 64)).astype(np.float32)
    res = simulate(load_kernel(source=HEADER01 + '''
@nki.jit
def kernel(p, v):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    tp = nl.load(p)
    tv = nl.load(v)
    p_t = nisa.nc_transpose(tp)                          # PSUM
    acc = nl.zeros((128, 64), dtype=nl.float32, buffer=nl.psum)
    acc += nisa.nc_matmul(stationary=p_t, moving=tv)
    nl.store(out, value=nl.copy(acc))
    return out
'''), p, v)
    np.testing.assert_allclose(res.output, p @ v, rtol=1e-4, atol=1e-4)


def test_vector_engine_transpose_of_128_by_64(rng):
    # autocomp's SD-attention candidates (0.40-0.42 ms on trn1, output checked) transpose a (128, 64) tile on VectorE
    x = rng.standard_normal((128, 64)).astype(np.float32)
    res = simulate(load_kernel(source=HEADER01 + '''
@nki.jit
def kernel(x):
    out = nl.ndarray((64, 128), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    y = nisa.nc_transpose(t, engine=nisa.vector_engine)
    nl.store(out, value=y)
    return out
'''), x)
    np.testing.assert_array_equal(res.output, x.T)


def test_dma_copy_oob_mode_skip_skips_static_out_of_range_rows(rng):
    # autocomp's conv1d candidates (5.6-7.9 ms on trn1): a channel tile reaching past the last channel copies
    # only the rows that exist
    img = rng.standard_normal((100, 16)).astype(np.float32)
    res = simulate(load_kernel(source=HEADER01 + '''
@nki.jit
def kernel(img):
    out = nl.ndarray((128, 16), dtype=img.dtype, buffer=nl.shared_hbm)
    t = nl.zeros((nl.par_dim(128), 16), dtype=img.dtype, buffer=nl.sbuf)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(16)[None, :]
    nisa.dma_copy(dst=t[i_p, i_f], src=img[i_p, i_f], oob_mode=nisa.oob_mode.skip)
    nl.store(out, value=t)
    return out
'''), img)
    want = np.zeros((128, 16), np.float32)
    want[:100] = img
    np.testing.assert_array_equal(res.output, want)


def test_reduce_cmd_accumulates_across_activations_in_nki_0_1(rng):
    # autocomp's attention candidates (0.58-0.68 ms on trn1): a running row sum of exp over KV tiles
    s = rng.standard_normal((128, 3, 512)).astype(np.float32)
    res = simulate(load_kernel(source=HEADER01 + '''
@nki.jit
def kernel(s):
    out = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    total = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    t0 = nl.load(s[:, 0, :])
    nisa.activation(op=nl.exp, data=t0, reduce_op=nl.add, reduce_cmd=nisa.reduce_cmd.reset_reduce, reduce_res=total)
    for j in nl.sequential_range(2):
        tj = nl.load(s[:, j + 1, :])
        nisa.activation(op=nl.exp, data=tj, reduce_op=nl.add, reduce_cmd=nisa.reduce_cmd.reduce, reduce_res=total)
    nl.store(out, value=total)
    return out
'''), s)
    np.testing.assert_allclose(res.output, np.exp(s).sum(axis=(1, 2))[:, None], rtol=1e-5)


def test_dma_copy_oob_mode_skip_skips_out_of_bounds_rows(rng):
    # vector-indirect gather: rows whose index is out of bounds are skipped (dst keeps its value)
    data = rng.standard_normal((16, 32)).astype(np.float32)
    idx = np.array([[3], [15], [99], [0]] * 32, np.uint32)       # 99 is out of bounds
    res = run('''
@nki.jit
def kernel(data, indices):
    P, F = indices.shape[0], data.shape[1]
    out = nl.ndarray((P, F), dtype=data.dtype, buffer=nl.shared_hbm)
    idx = nl.ndarray((P, 1), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=indices)
    dst = nl.ndarray((P, F), dtype=data.dtype, buffer=nl.sbuf)
    nisa.memset(dst=dst, value=-1.0)
    nisa.dma_copy(dst=dst, src=data.ap(pattern=[[F, P], [1, F]], vector_offset=idx, indirect_dim=0),
                  oob_mode=nisa.oob_mode.skip)
    nisa.dma_copy(dst=out, src=dst)
    return out
''', data, idx)
    want = np.where(idx < 16, data[np.minimum(idx[:, 0], 15)], -1.0)
    np.testing.assert_array_equal(res.output, want)


def test_psum_tile_larger_than_one_bank(rng):
    # a [128, 1024] fp32 PSUM tile spans two 2 KiB banks; each matmul writes within one bank
    a, b = rng.standard_normal((128, 128)).astype(np.float32), rng.standard_normal((128, 1024)).astype(np.float32)
    res = run('''
@nki.jit
def kernel(a, b):
    out = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.shared_hbm)
    ta = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
    tb = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=ta, src=a)
    nisa.dma_copy(dst=tb, src=b)
    p = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.psum)
    for j in nl.affine_range(2):
        nisa.nc_matmul(dst=p[:, j * 512:(j + 1) * 512], stationary=ta, moving=tb[:, j * 512:(j + 1) * 512])
    y = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=y, src=p)
    nisa.dma_copy(dst=out, src=y)
    return out
''', a, b)
    np.testing.assert_allclose(res.output, a.T @ b, rtol=1e-4, atol=1e-4)


# ---- front-end features of today's production kernels -----------------------------------------------------
def test_access_pattern_with_static_offset(rng):
    # .ap([[stride, count], ...], offset): the partition row of 128 elements starting at element 128*i + 5
    x = rng.standard_normal((4, 256)).astype(np.float32)
    res = run('''
@nki.jit
def kernel(x):
    out = nl.ndarray((128, 2), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 2), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x.ap(pattern=[[2, 128], [1, 2]], offset=5))
    nisa.dma_copy(dst=out, src=t)
    return out
''', x)
    np.testing.assert_array_equal(res.output, x.ravel()[5:5 + 256].reshape(128, 2))


def test_access_pattern_with_runtime_scalar_offset(rng):
    # scalar_offset: a runtime row index read from a [1, 1] SBUF tile, scaled by the stride of indirect_dim
    x = rng.standard_normal((8, 64)).astype(np.float32)
    row = np.array([[5]], np.int32)
    res = run('''
@nki.jit
def kernel(x, row):
    out = nl.ndarray((1, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    r = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=r, src=row)
    t = nl.ndarray((1, 64), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x.ap(pattern=[[64, 1], [1, 64]], scalar_offset=r, indirect_dim=0))
    nisa.dma_copy(dst=out, src=t)
    return out
''', x, row)
    np.testing.assert_array_equal(res.output, x[5:6])


def test_kernel_in_a_package_imports_its_helpers_relatively(tmp_path, rng):
    pkg = tmp_path / "mylib"
    (pkg / "utils").mkdir(parents=True)
    (pkg / "ops").mkdir()
    for d in (pkg, pkg / "utils", pkg / "ops"):
        (d / "__init__.py").write_text("")
    (pkg / "utils" / "helpers.py").write_text(HEADER + '''
SCALE = 3.0

def scaled_copy(dst, src):
    nisa.tensor_scalar(dst=dst, data=src, op0=nl.multiply, operand0=SCALE)
''')
    (pkg / "ops" / "scale.py").write_text(HEADER + '''
from ..utils.helpers import scaled_copy
from mylib.utils import helpers


@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    y = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    scaled_copy(y, t)
    assert helpers.SCALE == 3.0
    nisa.dma_copy(dst=out, src=y)
    return out
''')
    x = rng.standard_normal((128, 32)).astype(np.float32)
    res = simulate(load_kernel(pkg / "ops" / "scale.py"), x)
    np.testing.assert_allclose(res.output, 3.0 * x, rtol=1e-6)


def test_float8_e4m3fn_can_be_named_in_a_module_level_table():
    # the NKI library's helpers name every dtype in a dict at import time
    kern = load_kernel(source=HEADER + '''
SIZES = {nl.float8_e4m3fn: 1, nl.float8_e4m3: 1, nl.bfloat16: 2}


@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=x)
    return out
''')
    x = np.ones((4, 4), np.float32)
    np.testing.assert_array_equal(simulate(kern, x).output, x)


def test_float8_e4m3_tops_out_at_240():
    x = np.array([[200.0, 240.0, 250.0, 448.0]], np.float32)
    res = run('''
@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    q = nl.ndarray(x.shape, dtype=nl.float8_e4m3, buffer=nl.sbuf)
    nisa.dma_copy(dst=q, src=x)
    nisa.dma_copy(dst=out, src=q)
    return out
''', x)
    import ml_dtypes
    want = x.astype(ml_dtypes.float8_e4m3).astype(np.float32)      # IEEE-style e4m3: 448 does not fit
    np.testing.assert_array_equal(res.output, want)
    assert res.output[0, 1] == 240.0 and not np.isfinite(res.output[0, 3])


def test_nkiobject_helper_class(rng):
    x = rng.standard_normal((128, 16)).astype(np.float32)
    res = run('''
class Config(nl.NKIObject):
    def __init__(self, factor):
        self.factor = factor

    def apply(self, dst, src):
        nisa.tensor_scalar(dst=dst, data=src, op0=nl.multiply, operand0=self.factor)


@nki.jit
def kernel(x):
    cfg = Config(0.5)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    y = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    cfg.apply(y, t)
    nisa.dma_copy(dst=out, src=y)
    return out
''', x)
    np.testing.assert_allclose(res.output, 0.5 * x, rtol=1e-6)


def test_nc_stream_shuffle_broadcasts_a_partition_within_each_quadrant(rng):
    x = rng.standard_normal((128, 8)).astype(np.float32)
    mask = [31 - i for i in range(32)]            # reverse each 32-partition quadrant
    res = run(f'''
@nki.jit
def kernel(x):
    out = nl.ndarray((128, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 8), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    y = nl.ndarray((128, 8), dtype=x.dtype, buffer=nl.sbuf)
    nisa.nc_stream_shuffle(dst=y, src=t, shuffle_mask={mask})
    nisa.dma_copy(dst=out, src=y)
    return out
''', x)
    want = x.reshape(4, 32, 8)[:, ::-1].reshape(128, 8)
    np.testing.assert_array_equal(res.output, want)


def test_max8_and_find_index8_give_the_top_eight_and_where_they_are(rng):
    x = rng.permutation(128 * 64).reshape(128, 64).astype(np.float32)    # distinct values
    res = run('''
@nki.jit
def kernel(x):
    vals_out = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
    idx_out = nl.ndarray((128, 8), dtype=nl.uint32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    top = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.max8(dst=top, src=t)
    idx = nl.ndarray((128, 8), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.nc_find_index8(dst=idx, data=t, vals=top)
    nisa.dma_copy(dst=vals_out, src=top)
    nisa.dma_copy(dst=idx_out, src=idx)
    return vals_out, idx_out
''', x)
    order = np.argsort(-x, axis=1)[:, :8]
    np.testing.assert_array_equal(res.outputs[0], np.take_along_axis(x, order, 1))
    np.testing.assert_array_equal(res.outputs[1], order.astype(np.uint32))


def test_iota_with_pattern_offset_and_channel_multiplier():
    res = run('''
@nki.jit
def kernel():
    out = nl.ndarray((128, 6), dtype=nl.int32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 6), dtype=nl.int32, buffer=nl.sbuf)
    nisa.iota(dst=t, pattern=[[10, 2], [1, 3]], offset=7, channel_multiplier=100)
    nisa.dma_copy(dst=out, src=t)
    return out
''')
    p, w, x = np.ogrid[:128, :2, :3]
    np.testing.assert_array_equal(res.output, (7 + 100 * p + 10 * w + x).reshape(128, 6))


def test_affine_select_with_pattern_builds_a_causal_mask(rng):
    x = rng.standard_normal((128, 128)).astype(np.float32)
    res = run('''
@nki.jit
def kernel(x):
    out = nl.ndarray((128, 128), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 128), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    y = nl.ndarray((128, 128), dtype=x.dtype, buffer=nl.sbuf)
    # keep column j of row p where p - j >= 0
    nisa.affine_select(dst=y, pattern=[[-1, 128]], channel_multiplier=1, on_true_tile=t,
                       on_false_value=-9984.0, cmp_op=nl.greater_equal)
    nisa.dma_copy(dst=out, src=y)
    return out
''', x)
    np.testing.assert_array_equal(res.output, np.where(np.tril(np.ones((128, 128), bool)), x, -9984.0))


def test_isa_constants_submodule_and_tile_size_of_the_sbuf():
    kern = load_kernel(source=HEADER + '''
from nki.isa.constants import oob_mode, dge_mode

BUDGET = nl.tile_size.total_available_sbuf_size


@nki.jit
def kernel(x):
    assert BUDGET > 0 and oob_mode.skip != oob_mode.error and dge_mode.hwdge is not None
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=x)
    return out
''')
    x = np.ones((2, 2), np.float32)
    np.testing.assert_array_equal(simulate(kern, x).output, x)


# ---- what is still missing is named as the API of the front end, never as an internal class -------------
def _error_of(body: str, *inputs) -> AccelOptError:
    with pytest.raises(AccelOptError) as info:
        run(body, *inputs)
    return info.value


def test_a_refused_isa_call_names_the_api_of_the_nki_front_end():
    err = _error_of('''
@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.rng(dst=t)
    return out
''', np.ones((4, 4), np.float32))
    assert "nki.isa.rng" in str(err) and "Tensor" not in str(err)


def test_a_missing_tensor_method_names_the_method_and_the_front_end():
    err = _error_of('''
@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=x.no_such_method(pattern=[[1, 4]]))
    return out
''', np.ones((4, 4), np.float32))
    msg = str(err)
    assert "no_such_method" in msg and "nki" in msg
    assert "'Tensor'" not in msg and "_Alias" not in msg
