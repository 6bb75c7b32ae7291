"""The standalone ``nki`` front end beyond single calls: kernels that are modules of a package, access patterns
(``tensor.ap``), the ``nki.language`` types of today's NKI, and errors that name what is missing (issue 32)."""
import ml_dtypes
import numpy as np
import pytest

from accelopt_nb.errors import AccelOptError, KernelError, KernelLoadError, UnsupportedAPIError
from accelopt_nb.sim import SimOptions, load_kernel, simulate
from accelopt_nb.sim.trace import trace_fields

HEADER = "import nki\nimport nki.isa as nisa\nimport nki.language as nl\nimport numpy as np\n\n"


def run(body: str, *inputs, **kwargs):
    return simulate(load_kernel(source=HEADER + body), *inputs, **kwargs)


def error_of(body: str, *inputs) -> AccelOptError:
    with pytest.raises(AccelOptError) as info:
        run(body, *inputs)
    return info.value


def replay_agrees(body: str, *inputs):
    """Values and trace with loop replay equal running every iteration (both modes); the replayed result."""
    kern = load_kernel(source=HEADER + body)
    fast, full = (simulate(kern, *inputs, options=SimOptions(loop_replay=r)) for r in (True, False))
    for a, b in zip(fast.outputs, full.outputs):
        assert np.array_equal(a, b, equal_nan=True)
    assert trace_fields(fast.trace) == trace_fields(full.trace)
    tfast, tfull = (simulate(kern, *inputs, options=SimOptions(trace_only=True, loop_replay=r)) for r in (True, False))
    assert trace_fields(tfast.trace) == trace_fields(tfull.trace)
    return fast, tfast


# ---- kernels that are modules of a package ------------------------------------------------------------------
def _package(tmp_path, top_init: str = "", kernel_imports: str = "from ..utils.helpers import scaled_copy\n"):
    top = tmp_path / "outer" / "mylib"
    (top / "utils").mkdir(parents=True)
    (top / "ops").mkdir()
    (tmp_path / "outer" / "__init__.py").write_text("raise RuntimeError('the outer package is never initialised')\n")
    (top / "__init__.py").write_text(top_init)
    (top / "utils" / "__init__.py").write_text("from .helpers import SCALE as DEFAULT_SCALE\n")
    (top / "ops" / "__init__.py").write_text("")
    (top / "utils" / "helpers.py").write_text(HEADER + '''
SCALE = 3.0
LOADS = []
LOADS.append(1)


def scaled_copy(dst, src, scale=SCALE):
    nisa.tensor_scalar(dst=dst, data=src, op0=nl.multiply, operand0=scale)
''')
    (top / "ops" / "scale.py").write_text(HEADER + kernel_imports + '''

@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    y = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    scaled_copy(y, t, SCALE)
    nisa.dma_copy(dst=out, src=y)
    return out
''')
    return top / "ops" / "scale.py"


def test_a_module_reached_by_two_import_paths_is_one_module(tmp_path, rng):
    # relative, absolute by the package's own name, and through the package __init__: one helpers module
    path = _package(tmp_path, kernel_imports=(
        "from ..utils.helpers import scaled_copy, LOADS\nfrom mylib.utils import helpers\n"
        "import outer.mylib.utils.helpers as again\nfrom ..utils import DEFAULT_SCALE as SCALE\n"
        "assert helpers is again and LOADS == [1] and SCALE == 3.0\n"))
    x = rng.standard_normal((128, 8)).astype(np.float32)
    np.testing.assert_allclose(simulate(load_kernel(path), x).output, 3.0 * x, rtol=1e-6)


def test_the_packages_containing_a_kernel_initialise_only_when_asked_for_their_names(tmp_path, rng):
    # outer/__init__.py raises and is never run; mylib/__init__.py runs when the kernel imports a name from it
    path = _package(tmp_path, top_init="SCALE = 0.5\n", kernel_imports=(
        "from ..utils.helpers import scaled_copy\nfrom .. import SCALE\n"))
    x = rng.standard_normal((128, 8)).astype(np.float32)
    np.testing.assert_allclose(simulate(load_kernel(path), x).output, 0.5 * x, rtol=1e-6)


def test_a_missing_package_module_is_a_load_error_at_the_import(tmp_path):
    path = _package(tmp_path, kernel_imports="from ..utils.nothing_here import f\n")
    with pytest.raises(KernelLoadError, match="nothing_here") as info:
        load_kernel(path)
    assert info.value.file == str(path.resolve()) and info.value.line == 6


def test_a_relative_import_outside_a_package_says_so():
    with pytest.raises(KernelLoadError, match="no known parent package"):
        load_kernel(source=HEADER + "from .helpers import f\n")


# ---- nki.language names of today's NKI ------------------------------------------------------------------------
def test_float8_e4m3fn_is_its_own_format_up_to_448():
    x = np.array([[200.0, 240.0, 448.0, 500.0]], np.float32)
    res = run('''
@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    q = nl.ndarray(x.shape, dtype=nl.float8_e4m3fn, buffer=nl.sbuf)
    nisa.dma_copy(dst=q, src=x)
    nisa.dma_copy(dst=out, src=q)
    return out
''', x)
    np.testing.assert_array_equal(res.output, x.astype(ml_dtypes.float8_e4m3fn).astype(np.float32))
    assert res.output[0, 2] == 448.0


def test_nki_classes_are_data_classes_with_or_without_the_decorator(rng):
    # the NKI language guide: the compiler gives an NKI class without its own __init__ one taking its fields
    x = rng.standard_normal((128, 8)).astype(np.float32)
    res = run('''
from dataclasses import dataclass, field


class Plain(nl.NKIObject):
    factor: float
    bias = 1.0


@dataclass
class Unannotated(nl.NKIObject):      # the NKI library's style: fields without annotations
    factor = None
    seen = None


@dataclass(frozen=True)
class Frozen(nl.NKIObject):
    factor: float = 2.0
    extra: list = field(default_factory=list)

    def __post_init__(self):
        object.__setattr__(self, "factor", self.factor * 2)


@nki.jit
def kernel(x):
    p = Plain(3.0)
    u = Unannotated(factor=0.5)
    f = Frozen()
    assert (p.factor, p.bias, u.factor, u.seen, f.factor, f.extra) == (3.0, 1.0, 0.5, None, 4.0, [])
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=p.factor * u.factor * f.factor)
    nisa.dma_copy(dst=out, src=t)
    return out
''', x)
    np.testing.assert_allclose(res.output, 6.0 * x, rtol=1e-6)


def test_a_neuroncore_v4_dtype_is_nameable_but_no_tensor_can_have_it():
    body = '''
TABLE = {nl.float8_e8m0fnu: 1, nl.float4_e2m1fn_x4: 2}


@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    s = nl.ndarray((128, 4), dtype=nl.float8_e8m0fnu, buffer=nl.sbuf)
    return out
'''
    err = error_of(body, np.ones((4, 4), np.float32))
    assert isinstance(err, UnsupportedAPIError) and "float8_e8m0fnu" in str(err) and "NeuronCore-v4" in str(err)
    assert err.line == 13


def test_tile_size_of_today_and_what_the_docs_leave_out():
    res = run('''
@nki.jit
def kernel(x):
    ts = nl.tile_size
    assert ts.psum_bank_fmax_bytes == 2048 and ts.psum_num_banks == 8 and ts.pmax == 128
    assert ts.total_available_sbuf_size == 176 * 1024 and ts.sbuf_size_bytes == 128 * ts.sbuf_fmax_bytes
    assert not hasattr(ts, "psum_min_align")
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=x)
    return out
''', np.ones((2, 2), np.float32))
    assert res.output.shape == (2, 2)
    err = error_of('''
@nki.jit
def kernel(x):
    a = nl.tile_size.sbuf_min_align
    return x
''', np.ones((2, 2), np.float32))
    assert "nl.tile_size.sbuf_min_align" in str(err) and "no value" in str(err)


def test_nki_tensor_type_and_buffer_predicates():
    res = run('''
@nki.jit
def kernel(x):
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    assert isinstance(x, nl.NkiTensor) and isinstance(t[0:2, :], nl.NkiTensor) and not isinstance(3, nl.NkiTensor)
    assert nl.is_sbuf(nl.sbuf) and nl.is_hbm(nl.shared_hbm) and nl.is_on_chip(nl.psum) and not nl.is_psum(nl.sbuf)
    assert nl.is_sbuf(t.buffer) and nl.is_hbm(x.buffer) and nl.bool == nl.bool_
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=x)
    return out
''', np.ones((2, 2), np.float32))
    assert res.output.shape == (2, 2)


def test_isa_constants_are_the_isa_enums_and_collectives_are_refused_by_name():
    kern = load_kernel(source=HEADER + '''
import nki.collectives as ncc
from nki.isa import constants


@nki.jit
def kernel(x):
    assert constants.oob_mode is nisa.oob_mode and nisa.constants.reduce_cmd is nisa.reduce_cmd
    ncc.all_reduce(x)
    return x
''')
    with pytest.raises(UnsupportedAPIError, match="nki.collectives.all_reduce") as info:
        simulate(kern, np.ones((2, 2), np.float32))
    assert info.value.line == 14 and "not simulated" in str(info.value)


def test_placing_a_tensor_by_address_keeps_the_placement_and_checks_its_bounds(rng):
    x = rng.standard_normal((64, 32)).astype(np.float32)
    body = '''
@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf, address=(PART, 1024))
    nisa.dma_copy(dst=t, src=x)
    nisa.dma_copy(dst=out, src=t)
    return out
'''
    res = run(body.replace("PART", "64"), x)
    np.testing.assert_array_equal(res.output, x)
    placed = [t.allocation for t in res.trace.tensors.values() if t.allocation]
    assert placed == [{"kind": "address", "buffer": "sbuf", "partition": 64, "address": 1024}]
    err = error_of(body.replace("PART", "96"), x)
    assert "partitions 96..159" in str(err) and err.line == 10


def test_shared_identity_matrix_is_an_sbuf_tile_or_fills_dst(rng):
    x = rng.standard_normal((128, 64)).astype(np.float32)
    res = run('''
@nki.jit
def kernel(x):
    out = nl.ndarray((64, 128), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    eye = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
    nl.shared_identity_matrix(128, dtype=nl.float32, dst=eye)
    assert nl.shared_identity_matrix(128).buffer == "sbuf"
    p = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=p, stationary=t, moving=eye)         # t.T @ I: a transpose through TensorE
    y = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=y, src=p)
    nisa.dma_copy(dst=out, src=y)
    return out
''', x)
    np.testing.assert_allclose(res.output, x.T, rtol=1e-6)


# ---- access patterns --------------------------------------------------------------------------------------------
def test_access_pattern_writes_a_transposed_hbm_region(rng):
    # the destination is an access pattern too: tile column j lands in row j of out (a transposed store)
    x = rng.standard_normal((128, 16)).astype(np.float32)
    res = run('''
@nki.jit
def kernel(x):
    out = nl.ndarray((16, 128), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 16), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.dma_copy(dst=out.ap(pattern=[[1, 128], [128, 16]]), src=t)
    return out
''', x)
    np.testing.assert_array_equal(res.output, x.T)


def test_access_pattern_on_a_reshaped_tensor_and_on_a_view(rng):
    x = rng.standard_normal((4, 8, 32)).astype(np.float32)
    res = run('''
@nki.jit
def kernel(x):
    out = nl.ndarray((8, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    flat = x.reshape((32, 32))
    t = nl.ndarray((8, 64), dtype=x.dtype, buffer=nl.sbuf)
    # rows 2*k and 2*k+1 of the reshaped tensor side by side, from the view that starts at row 8
    nisa.dma_copy(dst=t, src=flat[8:32, :].ap(pattern=[[64, 8], [1, 64]]))
    nisa.dma_copy(dst=out, src=t)
    return out
''', x)
    np.testing.assert_array_equal(res.output, x.reshape(32, 32)[8:24].reshape(8, 64))


def test_access_pattern_with_a_zero_stride_repeats_a_row_on_every_partition(rng):
    x = rng.standard_normal((1, 32)).astype(np.float32)
    res = run('''
@nki.jit
def kernel(x):
    out = nl.ndarray((128, 32), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 32), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x.ap(pattern=[[0, 128], [1, 32]]))
    nisa.dma_copy(dst=out, src=t)
    return out
''', x)
    np.testing.assert_array_equal(res.output, np.repeat(x, 128, axis=0))


def test_access_pattern_with_a_vector_offset_gathers_rows(rng):
    data = rng.standard_normal((16, 32)).astype(np.float32)
    idx = rng.integers(0, 16, (128, 1)).astype(np.int32)
    res = run('''
@nki.jit
def kernel(data, indices):
    out = nl.ndarray((128, 32), dtype=data.dtype, buffer=nl.shared_hbm)
    idx = nl.ndarray((128, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=indices)
    t = nl.ndarray((128, 32), dtype=data.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=data.ap(pattern=[[32, 128], [1, 32]], vector_offset=idx, indirect_dim=0))
    nisa.dma_copy(dst=out, src=t)
    return out
''', data, idx)
    np.testing.assert_array_equal(res.output, data[idx[:, 0]])
    dma = res.trace.instructions[-2]
    assert dma.attrs["indirect"] and len(dma.reads) == 2      # the index tile is read too


def test_access_pattern_past_the_end_of_a_tensor_is_an_error():
    err = error_of('''
@nki.jit
def kernel(x):
    out = nl.ndarray((4, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((4, 8), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x.ap(pattern=[[8, 4], [1, 8]], offset=8))
    nisa.dma_copy(dst=out, src=t)
    return out
''', np.ones((4, 8), np.float32))
    assert isinstance(err, KernelError) and "out of bounds" in str(err) and err.line == 11   # at the DMA


def test_access_pattern_refuses_what_it_does_not_model():
    # another element size on a tile with never-written elements: validity is per element of one size
    err = error_of('''
@nki.jit
def kernel(x):
    t = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t[:, 0:4], src=x[:, 0:4])
    v = t.ap(pattern=[[16, 4], [1, 16]], dtype=nl.bfloat16)
    return x
''', np.ones((4, 8), np.float32))
    assert isinstance(err, KernelError) and "never written" in str(err) and "NkiTensor.ap" in str(err)
    assert err.line == 11


LOOPED_AP = '''
@nki.jit
def kernel(x):
    n = x.shape[0] // 32
    out = nl.ndarray((n, 32, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(n):
        t = nl.ndarray((32, 64), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x.ap(pattern=[[64, 32], [1, 64]], offset=i * 32 * 64))
        y = nl.ndarray((32, 64), dtype=x.dtype, buffer=nl.sbuf)
        nisa.activation(dst=y, op=nl.exp, data=t)
        nisa.dma_copy(dst=out.ap(pattern=[[64, 32], [1, 64]], offset=i * 32 * 64), src=y)
    return out
'''


def test_a_loop_of_access_patterns_replays_exactly(rng):
    x = rng.standard_normal((32 * 12, 64)).astype(np.float32)
    fast, tfast = replay_agrees(LOOPED_AP, x)
    np.testing.assert_allclose(fast.output, np.exp(x).reshape(12, 32, 64), rtol=1e-6)
    assert fast.trace.replayed > 0 and tfast.trace.replayed > 0


def test_a_loop_whose_access_pattern_wraps_across_rows_replays_exactly(rng):
    # 48-element pieces of 64-element rows: the pattern's start wraps into the next row every few iterations
    x = rng.standard_normal((12, 64)).astype(np.float32)
    fast, _ = replay_agrees('''
@nki.jit
def kernel(x):
    out = nl.ndarray((16, 48), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(16):
        t = nl.ndarray((1, 48), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x.ap(pattern=[[48, 1], [1, 48]], offset=i * 48))
        nisa.dma_copy(dst=out[i:i + 1, :], src=t)
    return out
''', x)
    np.testing.assert_array_equal(fast.output, x.reshape(16, 48))


# ---- the NkiTensor view API ------------------------------------------------------------------------------------
def test_tensor_view_methods_make_views_of_the_same_storage(rng):
    x = rng.standard_normal((4, 128, 6)).astype(np.float32)
    res = run('''
@nki.jit
def kernel(x, idx):
    t = nl.ndarray((128, 4, 6), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x.permute((1, 0, 2)))
    outs = [nl.ndarray(shape, dtype=x.dtype, buffer=nl.shared_hbm)
            for shape in [(128, 24), (128, 3), (128, 6), (128, 2, 3), (128, 5, 6), (128, 6)]]
    i_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=i_sb, src=idx)
    nisa.dma_copy(dst=outs[0], src=t.flatten_dims(1, 2))
    nisa.dma_copy(dst=outs[1], src=t.select(1, 2).slice(1, 0, 6, 2))
    nisa.dma_copy(dst=outs[2], src=x.select(0, i_sb))                  # a runtime index
    nisa.dma_copy(dst=outs[3], src=t.select(1, 1).reshape_dim(1, (2, -1)))
    nisa.dma_copy(dst=outs[4], src=t.select(1, 3).expand_dim(1).broadcast(1, 5))
    nisa.dma_copy(dst=outs[5], src=t.slice(1, 1, 2).squeeze_dim(1))
    assert t.strides == (24, 6, 1) and t.offset == 0 and t.size == 128 * 24 and t.is_contiguous()
    p = x.permute((1, 0, 2))
    assert p.get_pattern() == [[6, 128], [768, 4], [1, 6]] and not p.is_contiguous()
    assert x.select(0, i_sb).is_indirect() and not t.is_indirect() and t.select(1, 2).offset == 12
    return tuple(outs)
''', x, np.array([[3]], np.int32))
    t = x.transpose(1, 0, 2)
    want = [t.reshape(128, 24), t[:, 2, 0:6:2], x[3], t[:, 1].reshape(128, 2, 3), np.repeat(t[:, 3:4], 5, axis=1),
            t[:, 1]]
    for got, expected in zip(res.outputs, want):
        np.testing.assert_array_equal(got, expected)


def test_a_view_of_the_view_api_indexes_again_like_numpy(rng):
    x = rng.standard_normal((4, 128, 8)).astype(np.float32)
    res = run('''
@nki.jit
def kernel(x):
    p = x.permute((1, 0, 2))                       # (128, 4, 8), not a slice of x
    t = nl.ndarray((128, 2, 3), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=p[:, 1:3, ::3])
    a = nl.ndarray((128, 2, 3), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=a, src=t)
    b = nl.ndarray((1, 2, 3), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=b, src=t.slice(1, 0, 2)[5])  # on chip an int keeps the partition dim, of size 1
    c = nl.ndarray((4, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=c, src=p[-1, ...])           # in HBM it goes
    return a, b, c
''', x)
    a, b, c = res.outputs
    p = x.transpose(1, 0, 2)
    np.testing.assert_array_equal(a, p[:, 1:3, ::3])
    np.testing.assert_array_equal(b, p[5:6, 1:3, ::3])
    np.testing.assert_array_equal(c, p[-1])


def test_vector_select_gathers_one_row_per_partition(rng):
    x = rng.standard_normal((16, 128, 4)).astype(np.float32)
    rows = rng.integers(0, 16, (128, 1)).astype(np.int32)
    res = run('''
@nki.jit
def kernel(x, rows):
    idx = nl.ndarray((128, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=rows)
    t = nl.ndarray((128, 128, 4), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x.vector_select(0, idx))
    out = nl.ndarray((128, 128, 4), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out
''', x, rows)
    np.testing.assert_array_equal(res.output, x[rows[:, 0]])


@pytest.mark.parametrize(("call", "message"), [
    ("t.permute((1, 0, 2))", "moves the partition dim"),
    ("t.permute((0, 1))", "no permutation"),
    ("t.broadcast(0, 4)", "partition dim"),
    ("t.broadcast(1, 4)", "broadcast repeats a dim of size 1"),
    ("t.squeeze_dim(1)", "not 1"),
    ("t.reshape_dim(1, (3, 5))", "do not split dim 1"),
    ("t.permute((0, 2, 1)).flatten_dims(1, 2)", "not contiguous in storage"),
    ("t.slice(1, 4, 4)", "0 <= start < end <= size"),
    ("t.select(1, 8)", "out of range"),
    ("x.vector_select(1, t)", "dim must be 0"),
    ("t.vector_select(0, t)", "reads HBM tensors"),
])
def test_tensor_view_methods_keep_the_documented_rules(call, message):
    err = error_of(f'''
@nki.jit
def kernel(x):
    t = nl.ndarray((128, 8, 2), dtype=nl.float32, buffer=nl.sbuf)
    v = {call}
    return x
''', np.ones((128, 8, 2), np.float32))
    assert message in str(err) and err.line == 10 and "nki.language.NkiTensor." in str(err), str(err)


def test_rearrange_splits_reorders_and_merges_dims(rng):
    x = rng.standard_normal((128, 24)).astype(np.float32)
    res = run('''
@nki.jit
def kernel(x):
    t = nl.ndarray((128, 24), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    a = nl.ndarray((128, 6, 4), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=a, src=t.rearrange(('b', ('h', 'w')), ('b', 'w', 'h'), {'h': 4}))
    b = nl.ndarray((128, 24), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=b, src=t.rearrange(('b', ('h', 'w')), ('b', ('h', 'w')), {'w': 6}))
    c = nl.ndarray((24, 128), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=c, src=x.rearrange(('p', 'f'), ('f', 'p')))
    return a, b, c
''', x)
    a, b, c = res.outputs
    np.testing.assert_array_equal(a, x.reshape(128, 4, 6).transpose(0, 2, 1))
    np.testing.assert_array_equal(b, x)
    np.testing.assert_array_equal(c, x.T)
    for call, message in [("t.rearrange(('b', ('h', 'w')), ('b', ('w', 'h')), {'h': 4})", "not contiguous"),
                          ("t.rearrange(('b', 'f'), ('f', 'b'))", "partition dim"),
                          ("t.rearrange(('b', ('h', 'w')), ('b', 'h', 'w'))", "cannot split"),
                          ("t.rearrange(('b', 'f'), ('b', 'g'))", "does not")]:
        err = error_of(f'''
@nki.jit
def kernel(x):
    t = nl.ndarray((128, 24), dtype=x.dtype, buffer=nl.sbuf)
    v = {call}
    return x
''', x)
        assert message in str(err) and "NkiTensor.rearrange" in str(err) and err.line == 10, str(err)


def test_view_reinterprets_the_bits_of_the_same_storage(rng):
    x = rng.standard_normal((128, 64)).astype(np.float32)
    res = run('''
@nki.jit
def kernel(x):
    t = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    bits = t.view(nl.int32)
    nisa.tensor_scalar(dst=bits, data=bits, op0=nl.bitwise_and, operand0=0x7FFFFFFF)   # |t|, through its bits
    raw = nl.ndarray((128, 64), dtype=nl.int32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=raw, src=x.reinterpret_cast(nl.int32))
    absolute = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=absolute, src=t)
    even = nl.ndarray((128, 32), dtype=nl.int32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=even, src=t.ap([[64, 128], [2, 32]], dtype=nl.int32))
    return raw, absolute, even
''', x)
    raw, absolute, even = res.outputs
    np.testing.assert_array_equal(raw, x.view(np.int32))
    np.testing.assert_array_equal(absolute, np.abs(x))
    np.testing.assert_array_equal(even, np.abs(x)[:, ::2].view(np.int32))
    err = error_of('''
@nki.jit
def kernel(x):
    v = x[:, 0:3].view(nl.bfloat16)          # 12 bytes a row: 6 bf16
    w = v[:, 0:3].view(nl.int32)             # 6 bytes: no whole int32
    return x
''', x)
    assert "6 bytes is no whole number of 4-byte" in str(err) and "NkiTensor.view" in str(err) and err.line == 10


def test_view_with_another_element_size_reads_the_same_bytes(rng):
    # the NKI library stores an fp32 scale per row as 4 fp8 bytes after the codes of the row
    x = rng.standard_normal((128, 8)).astype(np.float32)
    res = run('''
@nki.jit
def kernel(x):
    t = nl.ndarray((128, 8), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    out = nl.ndarray((128, 32), dtype=nl.float8_e4m3, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t.view(nl.float8_e4m3))
    half = nl.ndarray((128, 8), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=half, src=t[:, 2:6].ap([[16, 128], [1, 8]], dtype=nl.bfloat16))
    back = nl.ndarray((128, 2), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=back, src=t.view(nl.uint8).view(nl.float32)[:, 0:2])
    return out, half, back
''', x)
    out, half, back = res.outputs
    np.testing.assert_array_equal(out.view(np.uint8), x.view(np.uint8))
    np.testing.assert_array_equal(half.view(np.uint16), x[:, 2:6].copy().view(np.uint16))
    np.testing.assert_array_equal(back, x[:, 0:2])


# ---- virtual registers and the loops they bound ---------------------------------------------------------------
DYNAMIC_ROWS = '''
@nki.jit
def kernel(x, n):
    # copy the first n[0, 0] rows of x, n read at run time: a register bounds the loop, a tile moves the DMA
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    zeros = nl.zeros(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=out, src=zeros)
    n_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=n_sb, src=n)
    count = nisa.register_alloc()
    nisa.register_load(count, n_sb)
    row = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=row, value=0)
    for _ in nl.dynamic_range(count):
        t = nl.ndarray((1, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x.ap([[x.shape[1], 1], [1, x.shape[1]]], scalar_offset=row))
        nisa.dma_copy(dst=out.ap([[x.shape[1], 1], [1, x.shape[1]]], scalar_offset=row), src=t)
        nisa.tensor_scalar(dst=row, data=row, op0=nl.add, operand0=1)
    return out
'''


def test_a_loop_bounded_by_a_register_loaded_at_run_time(rng):
    x = rng.standard_normal((6, 16)).astype(np.float32)
    for n in (0, 3, 6):
        res = run(DYNAMIC_ROWS, x, np.array([[n]], np.int32))
        np.testing.assert_array_equal(res.output, np.where(np.arange(6)[:, None] < n, x, 0.0))
    loads = [i for i in res.trace.instructions if i.op == "register_load"]
    assert len(loads) == 1 and loads[0].reads and loads[0].api == "nisa.register_load"
    from accelopt_nb.perf import estimate
    assert estimate(res.trace, hw="trn1").latency > 0     # the model takes register instructions
    # trace-only, memory holds no values: the loop's bound is refused, naming the load
    err = None
    try:
        run(DYNAMIC_ROWS, x, np.array([[3]], np.int32), options=SimOptions(trace_only=True))
    except AccelOptError as exc:
        err = exc
    assert err is not None and err.api == "nl.dynamic_range" and err.line == 19
    assert ":16 has no value in trace-only mode" in str(err)


def test_fori_loop_and_while_loop_pass_registers_by_value(rng):
    x = rng.standard_normal((1, 8)).astype(np.float32)
    res = run('''
@nki.jit
def kernel(x):
    # out[0, i] = x[0, i] for i in 2..5 (fori_loop); out[1, 0] = how many times a countdown from 4 ran (while_loop)
    out = nl.ndarray((2, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[0:2, :], src=nl.zeros((2, 8), dtype=x.dtype, buffer=nl.sbuf))
    t = nl.ndarray((1, 1), dtype=x.dtype, buffer=nl.sbuf)
    hi = nisa.register_alloc(2)
    nisa.register_move(hi, 6)

    def body(i):
        nisa.dma_copy(dst=t, src=x.ap([[1, 1], [1, 1]], scalar_offset=i, indirect_dim=1))
        nisa.dma_copy(dst=out.ap([[1, 1], [1, 1]], scalar_offset=i, indirect_dim=1), src=t)
        nisa.register_move(i, 100)          # by value: the loop goes on from its own counter

    nl.fori_loop(2, hi, body)
    left = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=left, value=4)
    runs = nl.zeros((1, 1), dtype=nl.float32, buffer=nl.sbuf)
    flag = nisa.register_alloc()
    nisa.register_load(flag, left)

    def countdown(r):
        nisa.tensor_scalar(dst=runs, data=runs, op0=nl.add, operand0=1.0)
        nisa.tensor_scalar(dst=left, data=left, op0=nl.subtract, operand0=1)
        nisa.register_load(r, left)
        return r

    nl.while_loop(flag, countdown)
    stored = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.register_store(stored, hi)
    nisa.dma_copy(dst=out[1:2, 0:1], src=runs)
    nisa.dma_copy(dst=out[1:2, 1:2], src=stored)
    return out
''', x)
    want = np.zeros((2, 8), np.float32)
    want[0, 2:6] = x[0, 2:6]
    want[1, 0], want[1, 1] = 4.0, 6.0
    np.testing.assert_array_equal(res.output, want)


def test_a_loop_bounded_by_an_immediate_register_replays_exactly(rng):
    x = rng.standard_normal((128, 64)).astype(np.float32)
    fast, tfast = replay_agrees('''
@nki.jit
def kernel(x):
    out = nl.ndarray((4, 128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    n = nisa.register_alloc(4)
    for i in nl.dynamic_range(n):
        t = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=float(i + 1))
        nisa.dma_copy(dst=out[i], src=t)
    return out
''', x)
    np.testing.assert_allclose(fast.output, x * np.arange(1, 5, dtype=np.float32)[:, None, None], rtol=1e-6)


@pytest.mark.parametrize(("line", "message"), [
    ("nisa.register_load(r, nl.zeros((1, 2), dtype=nl.int32, buffer=nl.sbuf))", "one element"),
    ("nisa.register_move(r, 2 ** 40)", "does not fit a 32-bit register"),
    ("nisa.register_move(r, 1.5)", "takes an int"),
    ("nisa.register_move(nl.zeros((1, 1), dtype=nl.int32, buffer=nl.sbuf), 1)", "register from nisa.register_alloc"),
    ("for _ in nl.dynamic_range(r): pass", "read before any value was put in it"),
    ("for _ in nl.dynamic_range(0, 4, 0): pass", "step must be a positive"),
])
def test_register_misuse_names_the_api_and_the_rule(line, message):
    err = error_of(f'''
@nki.jit
def kernel(x):
    r = nisa.register_alloc()
    {line}
    return x
''', np.ones((1, 1), np.float32))
    assert message in str(err) and err.line == 10, str(err)


# ---- nki.language names of today ------------------------------------------------------------------------------
def test_gelu_apprx_sigmoid_dx_is_the_derivative_of_gelu_apprx_sigmoid_inside_no_reorder():
    x = np.linspace(-5, 5, 128 * 32).reshape(128, 32).astype(np.float32)
    res = run('''
@nki.jit
def kernel(x):
    out = nl.ndarray((2, 128, 32), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 32), dtype=x.dtype, buffer=nl.sbuf)
    with nl.no_reorder():
        nisa.dma_copy(dst=t, src=x)
        y = nl.ndarray((128, 32), dtype=x.dtype, buffer=nl.sbuf)
        nisa.activation(dst=y, op=nl.gelu_apprx_sigmoid_dx, data=t)
        nisa.dma_copy(dst=out[0], src=y)
    nisa.dma_copy(dst=out[1], src=nl.gelu_apprx_sigmoid_dx(t))
    return out
''', x)
    f = lambda v: v / (1.0 + np.exp(-1.702 * v))  # noqa: E731 - gelu_apprx_sigmoid, in float64
    h = 1e-5
    slope = (f(x.astype(np.float64) + h) - f(x.astype(np.float64) - h)) / (2 * h)
    np.testing.assert_allclose(res.output[0], slope, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(res.output[1], res.output[0])
    assert [i.engine for i in res.trace.instructions if i.op == "activation"] == ["scalar", "scalar"]


def test_shared_constant_from_a_npy_file(tmp_path, rng):
    table = rng.standard_normal((128, 16)).astype(np.float32)
    np.save(tmp_path / "table.npy", table)
    body = '''
@nki.jit
def kernel(x):
    c = nl.shared_constant(PATH)
    t = nl.ndarray((128, 16), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=c)
    out = nl.ndarray((128, 16), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out
'''
    res = run(body.replace("PATH", repr(str(tmp_path / "table.npy"))), table)
    np.testing.assert_array_equal(res.output, table)
    err = error_of(body.replace("PATH", repr(str(tmp_path / "missing.npy"))), table)
    assert "cannot read the constant file" in str(err) and err.line == 9


def test_broadcast_to_casts_and_rms_norm_computes_in_compute_dtype(rng):
    x = rng.standard_normal((128, 64)).astype(np.float32)
    w = rng.standard_normal((1, 64)).astype(np.float32)
    res = run('''
@nki.jit
def kernel(x, w):
    t = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    wt = nl.ndarray((1, 64), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=wt, src=w)
    wb = nl.broadcast_to(wt, shape=(128, 64), dtype=nl.bfloat16)
    out = nl.ndarray((3, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[0], src=nl.rms_norm(t, wb, axis=1, n=64, compute_dtype=nl.bfloat16))
    nisa.dma_copy(dst=out[1], src=nl.rms_norm(t, wb, axis=1, n=64))
    nisa.dma_copy(dst=out[2], src=nl.copy(wb, dtype=nl.float32))
    return out
''', x, w)
    wb = w.astype(ml_dtypes.bfloat16).astype(np.float32)
    want = x / np.sqrt((x * x).mean(1, keepdims=True) + 1e-6) * wb
    np.testing.assert_array_equal(res.output[2], np.broadcast_to(wb, (128, 64)))
    np.testing.assert_allclose(res.output[1], want, rtol=1e-5, atol=1e-5)
    bf16_err = np.abs(res.output[0] - want).max()      # intermediates rounded to bf16: close, not exact
    assert 1e-4 < bf16_err < 0.1, bf16_err
    kinds = {i.out_dtype for i in res.trace.instructions if i.op in ("activation", "tensor_reduce")}
    assert "bfloat16" in kinds


def test_no_reorder_refuses_a_register_bounded_loop_inside():
    err = error_of('''
@nki.jit
def kernel(x):
    n = nisa.register_alloc(2)
    with nl.no_reorder():
        for _ in nl.affine_range(2):       # static loops are allowed
            pass
        for _ in nl.dynamic_range(n):
            pass
    return x
''', np.ones((1, 1), np.float32))
    assert err.api == "nl.dynamic_range" and err.line == 13 and "no_reorder" in str(err)


# ---- errors that name the API --------------------------------------------------------------------------------
def test_a_documented_tensor_method_the_simulator_lacks_is_named_as_such():
    err = error_of('''
@nki.jit
def kernel(x):
    return x.indirect(x)
''', np.ones((4, 4), np.float32))
    assert isinstance(err, UnsupportedAPIError) and "nki.language.NkiTensor.indirect" in str(err)
    assert "documented" in str(err) and "'Tensor'" not in str(err) and err.line == 9


def test_an_unknown_tensor_attribute_is_named_and_hasattr_still_works():
    err = error_of('''
@nki.jit
def kernel(x):
    t = nl.ndarray((4, 4), dtype=x.dtype, buffer=nl.sbuf)
    assert not hasattr(t, "foo") and not hasattr(t[0:4, 0:2], "foo") and getattr(x, "foo", 3) == 3
    return t[0:4, 0:2].foo
''', np.ones((4, 4), np.float32))
    assert isinstance(err, UnsupportedAPIError) and isinstance(err, AttributeError) and err.line == 11
    assert err.api == "nki.language.NkiTensor.foo" and "NKI tensors have no attribute 'foo'" in str(err)
    # a private name is the kernel's own Python error (as before issue 32), not a simulator bug
    err = error_of('''
@nki.jit
def kernel(x):
    return x._foo
''', np.ones((4, 4), np.float32))
    assert type(err) is KernelError and "has no attribute '_foo'" in str(err) and err.line == 9


def test_tensors_and_views_have_no_getattr_hook():
    # the error above is made where the launch catches errors: a __getattr__ on these classes sends every attribute
    # read through a slower path (CPython 3.11 does not specialize them), 10% of the simulator's instructions
    from accelopt_nb.sim.core.tensor import Tensor
    from accelopt_nb.sim.core.views import View
    for cls in (Tensor, View):
        assert not any("__getattr__" in vars(c) for c in cls.__mro__ if c is not object), cls
