"""Reference answers of the teaching course, by exercise id: the code that replaces each exercise cell.

``accelopt reproduce`` and the tests run the notebooks with these filled in; every check must say
RIGHT. Kernel answers are this project's own kernels (:mod:`accelopt_nb.kernels`), read from file
so each kernel exists once.
"""
from __future__ import annotations

REFERENCE_ANSWERS: dict[str, str] = {
    "1.1": "partitions = 128\n",
    "1.2": '''add_source = """
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def kernel(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        rows = slice(i * 128, (i + 1) * 128)
        ta = nl.load(a[rows, :])
        tb = nl.load(b[rows, :])
        nl.store(out[rows, :], value=nl.add(ta, tb))
    return out
"""
''',
    "1.3": "psum_free_fp32 = 512\n",
    "2.1": "my_peak_ms = 1e3 * max(vec_flops / hw_peaks.vec_flops, mm_flops / hw_peaks.mm_flops,\n"
           "                      hbm_bytes / hw_peaks.hbm_bandwidth)\n",
    "2.2": 'memory_s = hbm_bytes / hw_peaks.hbm_bandwidth\n'
           'my_bound = "memory" if memory_s >= max(vec_flops / hw_peaks.vec_flops, mm_flops / hw_peaks.mm_flops) '
           'else "compute"\n',
    "2.3": 'best = sweep["GB_per_s"].max()\n'
           'knee_bytes = int(sweep.loc[sweep["GB_per_s"] >= 0.9 * best, "bytes_per_partition"].min())\n',
    "3.1": 'from accelopt_nb.kernels import kernel_path\n'
           'my_matmul = load_kernel(kernel_path("matmul_tutorial"), name="matmul_blocked_free")\n',
    "3.2": 'rhs_loads_per_tile = M // 128\n',
    "3.3": 'fastest = moving["ns_per_column"].min()\n'
           'full_rate_columns = int(moving.loc[moving["ns_per_column"] <= 1.02 * fastest, "moving_columns"].min())\n',
    "4.1": 'from accelopt_nb.kernels import kernel_path\n'
           'my_gelu = load_kernel(kernel_path("fusion"), name="gelu_fused")\n',
    "4.2": 'engines = ["tensor", "vector", "scalar", "gpsimd"]\n'
           'busiest_engine_v3 = steps.set_index("kernel").loc["mamba_v3", engines].astype(float).idxmax()\n',
    "4.3": 'loop_kind = "sequential_range"\n',
    "5.1": 'from accelopt_nb.kernels import kernel_path\n'
           'get_ipython().run_cell_magic("accelopt", f"kernel {plan_id} --only", kernel_path("silu_fused").read_text())\n',
    "6.1": 'from accelopt_nb.kernels import kernel_path\n'
           'my_exp = load_kernel(kernel_path("spills"), name="exp_tile_by_tile")\n',
    "7.1": 'faster_for_fp32_matmul = min(fp32_matmul_ms, key=fp32_matmul_ms.get)\n',
    "8.1": 'own = held_out[(held_out["hw"] == hw) & (held_out["basis"] == "held-out")]\n'
           'widest = own.loc[(own["high"] / own["low"]).idxmax(), "class"]\n',
}
