"""Launching kernels as real NKI code does: host functions, SPMD grids over NeuronCores, kernel files
as real modules (classes, dataclasses, sibling NKI files), nki.compiler allocation and decorators,
and nki.baremetal / benchmark / profile used as decorators with arguments."""
import json
import sys

import numpy as np
import pytest

from accelopt_nb.errors import KernelError, KernelLoadError, UnsupportedAPIError
from accelopt_nb.perf import estimate
from accelopt_nb.perf.memory import plan_memory
from accelopt_nb.perf.hardware import load_hw
from accelopt_nb.sim import SimOptions, load_kernel, simulate
from accelopt_nb.sim.api.launch import nc

HEADER = "import numpy as np\nimport neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\n" \
         "import neuronxcc.nki.isa as nisa\n"

# one program scales its own 128 x 64 tile by (1 + its flat program id)
TILE_KERNEL = HEADER + """
@nki.jit
def scale_tiles(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i, j = nl.program_id(0), nl.program_id(1)
    t = nl.load(a[i * 128:(i + 1) * 128, j * 64:(j + 1) * 64])
    k = i * nl.num_programs(1) + j
    nl.store(out[i * 128:(i + 1) * 128, j * 64:(j + 1) * 64], value=nl.multiply(t, 1.0 + k))
    return out
"""


def _expected_scaled(a, rows, cols):
    k = np.arange(rows)[:, None] * cols + np.arange(cols)[None, :]
    return a * (1.0 + k).astype(np.float32).repeat(128, axis=0).repeat(64, axis=1)


def test_host_function_launches_the_whole_grid(tmp_path, rng):
    (tmp_path / "k.py").write_text(TILE_KERNEL + """
def kernel(a):
    return scale_tiles[2, 3](a)
""")
    a = rng.standard_normal((256, 192)).astype(np.float32)
    res = simulate(load_kernel(tmp_path / "k.py"), a)
    np.testing.assert_array_equal(res.output, _expected_scaled(a, 2, 3))
    assert res.trace.grid == (2, 3)
    assert {i.loops[0][2] for i in res.trace.instructions if i.op == "dma_store"} == set(range(6))


def test_host_function_chains_two_launches(tmp_path, rng):
    (tmp_path / "k.py").write_text(TILE_KERNEL + """
@nki.jit
def add_one(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        nl.store(out[i * 128:(i + 1) * 128, :], value=nl.add(nl.load(a[i * 128:(i + 1) * 128, :]), 1.0))
    return out

def kernel(a):
    first = scale_tiles[2, 3](a)
    return add_one(first)
""")
    a = rng.standard_normal((256, 192)).astype(np.float32)
    np.testing.assert_allclose(simulate(load_kernel(tmp_path / "k.py"), a).output,
                               _expected_scaled(a, 2, 3) + 1.0, rtol=1e-6)


def test_spmd_dim_over_neuron_cores(tmp_path, rng):
    (tmp_path / "k.py").write_text(TILE_KERNEL + """
def kernel(a):
    return scale_tiles[nl.spmd_dim(nl.nc(2), 2), 3](a)
""")
    a = rng.standard_normal((512, 192)).astype(np.float32)
    res = simulate(load_kernel(tmp_path / "k.py"), a)
    np.testing.assert_array_equal(res.output, _expected_scaled(a, 4, 3))
    assert res.trace.num_cores == 2
    # programs (0..1, *) on core 0 and (2..3, *) on core 1; flat id = row * 3 + col
    assert res.trace.program_cores == {p: (p // 3) // 2 for p in range(12)}


def test_nc_grid_dimension_and_direct_launch(tmp_path, rng):
    (tmp_path / "k.py").write_text(TILE_KERNEL)
    kern = load_kernel(tmp_path / "k.py", name="scale_tiles")
    a = rng.standard_normal((256, 128)).astype(np.float32)
    np.testing.assert_array_equal(kern[nc(2), 2](a), _expected_scaled(a, 2, 2))
    res = simulate(kern, a, grid=(nc(2), 2))
    assert res.trace.program_cores == {0: 0, 1: 0, 2: 1, 3: 1}


def test_bad_grid_entry_is_a_clear_error(tmp_path):
    (tmp_path / "k.py").write_text(TILE_KERNEL)
    kern = load_kernel(tmp_path / "k.py", name="scale_tiles")
    with pytest.raises(KernelError, match="positive int"):
        kern[0, 2]


MODULE_WITH_CLASSES = HEADER + """
from dataclasses import dataclass
from tile_helpers import double_tile

@dataclass
class Config:
    rows: int = 128
    offset: float = 0.5

class Tiler:
    def __init__(self, cfg: Config):
        self.cfg = cfg

    def tiles(self, n):
        return n // self.cfg.rows

@nki.jit
def kernel(a):
    cfg = Config()
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(Tiler(cfg).tiles(a.shape[0])):
        t = nl.load(a[i * 128:(i + 1) * 128, :])
        nl.store(out[i * 128:(i + 1) * 128, :], value=nl.add(double_tile(t), cfg.offset))
    return out
"""

SIBLING = """import neuronxcc.nki.language as nl

def double_tile(t):
    return nl.multiply(t, 2.0)

def broken(t):
    return nl.multiply(t, undefined_name)
"""


def test_kernel_module_with_dataclass_class_and_sibling_import(tmp_path, rng):
    (tmp_path / "k.py").write_text(MODULE_WITH_CLASSES)
    (tmp_path / "tile_helpers.py").write_text(SIBLING)
    a = rng.standard_normal((256, 32)).astype(np.float32)
    np.testing.assert_allclose(simulate(load_kernel(tmp_path / "k.py"), a).output, 2 * a + 0.5, rtol=1e-6)
    # nothing leaks into the interpreter's modules, and neuronxcc stays unimported
    assert not any(m.startswith("accelopt_kernel_") or m == "tile_helpers" for m in sys.modules)
    assert "neuronxcc" not in sys.modules or not hasattr(sys.modules["neuronxcc"], "__accelopt_fake__")


def test_errors_inside_a_sibling_point_at_the_sibling(tmp_path, rng):
    (tmp_path / "k.py").write_text(MODULE_WITH_CLASSES.replace("double_tile", "broken"))
    (tmp_path / "tile_helpers.py").write_text(SIBLING)
    a = rng.standard_normal((128, 32)).astype(np.float32)
    with pytest.raises(KernelError) as exc:
        simulate(load_kernel(tmp_path / "k.py"), a)
    assert exc.value.file.endswith("tile_helpers.py") and exc.value.line == 7


def test_missing_sibling_is_a_load_error(tmp_path):
    (tmp_path / "k.py").write_text(MODULE_WITH_CLASSES)
    with pytest.raises(KernelLoadError, match="tile_helpers"):
        load_kernel(tmp_path / "k.py")


# ---- nki.compiler -------------------------------------------------------------------------------
ALLOCATED = HEADER + """
import neuronxcc.nki.compiler as ncc

def by_block(idx, pdim_size, fdim_size):
    return 0, 2048 + idx[0] * 512

@nki.compiler.skip_middle_end_transformations
@ncc.enable_stack_allocator
@nki.jit(additional_compile_opt="--internal-skip-backend-allocation-opt-nki")
def kernel(a, b):
    out = nl.ndarray((a.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    at = nl.ndarray((2, nl.par_dim(128), 128), dtype=a.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,)))
    bt = nl.ndarray((2, nl.par_dim(128), 128), dtype=b.dtype, buffer=ncc.sbuf.alloc(by_block))
    acc = nl.ndarray((nl.par_dim(128), 128), dtype=nl.float32, buffer=ncc.psum.mod_alloc(base_bank=0, num_bank_tiles=(1,)))
    res = nl.ndarray((nl.par_dim(128), 128), dtype=nl.float32, buffer=ncc.sbuf.auto_alloc())
    with ncc.no_reorder():
        for k in nl.affine_range(2):
            at[k] = nl.load(a[k * 128:(k + 1) * 128, :])
            bt[k] = nl.load(b[k * 128:(k + 1) * 128, :])
            acc += nisa.nc_matmul(at[k], bt[k])
    res[...] = nl.copy(acc)
    nl.store(out, value=res)
    return out
"""


def test_compiler_allocators_and_decorators(tmp_path, rng):
    (tmp_path / "k.py").write_text(ALLOCATED)
    a = rng.standard_normal((256, 128)).astype(np.float32)
    b = rng.standard_normal((256, 128)).astype(np.float32)
    res = simulate(load_kernel(tmp_path / "k.py"), a, b)
    np.testing.assert_allclose(res.output, a.T @ b, rtol=1e-4, atol=1e-4)
    placed = sorted((t.buffer, t.allocation["kind"]) for t in res.trace.tensors.values() if t.allocation is not None)
    assert placed == [("psum", "mod_alloc"), ("sbuf", "alloc"), ("sbuf", "mod_alloc")]
    psum = next(t for t in res.trace.tensors.values() if t.buffer == "psum" and t.allocation)
    assert psum.allocation == {"kind": "mod_alloc", "buffer": "psum", "base_bank": 0, "base_addr": 0,
                               "base_partition": 0, "num_bank_tiles": (1,), "num_par_tiles": (), "num_free_tiles": ()}
    # auto_alloc leaves placement to the compiler: not pinned
    assert not any(t.allocation for t in res.trace.tensors.values() if t.shape == (128, 128) and t.buffer == "sbuf")


def test_force_auto_alloc_drops_explicit_placements(tmp_path, rng):
    (tmp_path / "k.py").write_text(ALLOCATED.replace("@ncc.enable_stack_allocator", "@ncc.force_auto_alloc"))
    a = rng.standard_normal((256, 128)).astype(np.float32)
    res = simulate(load_kernel(tmp_path / "k.py"), a, a)
    np.testing.assert_allclose(res.output, a.T @ a, rtol=1e-4, atol=1e-4)
    assert not any(t.allocation for t in res.trace.tensors.values())


def test_psum_mod_alloc_beyond_the_banks_is_refused(tmp_path, rng):
    (tmp_path / "k.py").write_text(ALLOCATED.replace("base_bank=0, num_bank_tiles=(1,)", "base_bank=7, num_bank_tiles=(2,)"))
    a = rng.standard_normal((256, 128)).astype(np.float32)
    with pytest.raises(UnsupportedAPIError, match="PSUM has 8 banks"):
        simulate(load_kernel(tmp_path / "k.py"), a, a)


PRESSURE = HEADER + """
import neuronxcc.nki.compiler as ncc

@nki.jit
def kernel(a):
    # 8 blocks of 32 KiB per partition, all live at once: more than SBUF holds
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    buf = nl.ndarray((8, nl.par_dim(128), 8192), dtype=a.dtype, buffer=BUFFER)
    for i in nl.affine_range(8):
        buf[i] = nl.load(a[i * 128:(i + 1) * 128, :])
    for i in nl.affine_range(8):
        nl.store(out[i * 128:(i + 1) * 128, :], value=buf[i])
    return out
"""


def test_pinned_buffers_are_never_spilled(tmp_path):
    a = np.zeros((1024, 8192), np.float32)
    traces = {}
    for label, buffer in (("auto", "nl.sbuf"), ("pinned", "ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(8,))")):
        (tmp_path / f"{label}.py").write_text(PRESSURE.replace("BUFFER", buffer))
        traces[label] = simulate(load_kernel(tmp_path / f"{label}.py"), a, options=SimOptions(trace_only=True)).trace
    hw = load_hw("trn1")
    assert plan_memory(traces["auto"], hw).spills
    assert not plan_memory(traces["pinned"], hw).spills
    assert estimate(traces["pinned"]).spill_save_bytes == 0


# ---- nki.baremetal / benchmark / profile -------------------------------------------------------------
LAUNCHERS = HEADER + """
def body(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.exp(nl.load(a)))
    return out

bare = nki.baremetal(artifacts_dir="debug", additional_compile_opt="--disable-internal-io-dge")(body)

@nki.benchmark(warmup=5, iters=10, save_neff_name="file.neff")
def bench(a):
    return body(a)

@nki.profile(working_directory=WORKDIR, save_neff_name="file.neff", save_trace_name="k.ntff", profile_nth=2)
def prof(a):
    return body(a)

def kernel(a):
    return bare(a)
"""


def test_launcher_decorators_with_arguments(tmp_path, rng):
    (tmp_path / "k.py").write_text(LAUNCHERS.replace("WORKDIR", repr(str(tmp_path / "profiles"))))
    a = rng.standard_normal((128, 64)).astype(np.float32)
    for name in ("bare", "bench", "prof"):
        kern = load_kernel(tmp_path / "k.py", name=name)
        np.testing.assert_allclose(kern(a), np.exp(a), rtol=1e-6)
    bench = load_kernel(tmp_path / "k.py", name="bench")
    bench(a)
    assert bench.benchmark_result.nc_latency.get_latency_percentile(99) > 0
    report = json.loads((tmp_path / "profiles" / "k.profile.json").read_text())
    assert report["latency"] > 0


def test_a_kernels_own_assertion_is_a_kernel_error(tmp_path, rng):
    (tmp_path / "k.py").write_text(HEADER + """
@nki.jit
def kernel(a):
    assert a.shape[0] == 128, "needs 128 rows"
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(a))
    return out
""")
    with pytest.raises(KernelError, match="needs 128 rows") as exc:
        simulate(load_kernel(tmp_path / "k.py"), rng.standard_normal((64, 4)).astype(np.float32))
    assert exc.value.line == 8
