"""Real NKI kernels, unchanged, on the simulator: how many run and match NumPy, in both front-end styles.

The kernels are read from local checkouts of the public repositories (nothing of theirs is copied
here). The NKI 0.1 style (``neuronxcc.nki``): ``aws-neuron/nki-samples`` (tutorials and contributed
kernels) and, optionally, ``zhang677/AccelOpt`` (its hand-optimized samples, checked against its own
NKIBench reference files). Today's standalone ``nki`` style: ``aws-neuron/nki-library`` (the NKI
library's production kernels, modules of a Python package) and ``aws-neuron/neuronx-distributed-inference``
(model kernels); their cases are in ``real_kernels_nki.py``. Each kernel gets a small NumPy harness
written for this benchmark: inputs, the kernel's arguments, and the expected result.

Each kernel runs in two modes: with values (compared with NumPy: pass / FAIL = wrong values) and
trace-only (the instruction stream and the performance model's latency, as ``accelopt profile
--trace-only`` makes it: ok with the estimated latency). ERROR = the simulator stopped, with the error.
The closing lines count each outcome per style and mode.

    python benchmarks/real_kernels.py --nki-samples DIR [--nki-samples OLD_DIR ...] [--accelopt-repo DIR]
                                      [--nki-library DIR] [--nxdi DIR] [--mode values|trace|both] [--json OUT]

Several ``--nki-samples`` checkouts may be given (e.g. HEAD and a commit from before the reference
kernels were removed): each kernel is looked up in each. A kernel whose file is in none of them is
listed as absent. Without any checkout the benchmark skips.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from accelopt_nb.errors import AccelOptError
from accelopt_nb.sim import Kernel, SimOptions, load_kernel, simulate

# the import header the AccelOpt repository's own profiling scripts put in front of its bare samples
NKI_HEADER = ("import numpy as np\nimport neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\n"
              "import neuronxcc.nki.typing as nt\nimport neuronxcc.nki.isa as nisa\n"
              "from neuronxcc.nki import trace\nfrom neuronxcc.nki.language import par_dim\n\n")


STYLES = {"nki-samples": "neuronxcc.nki", "accelopt": "neuronxcc.nki", "nki-library": "nki", "nxdi": "nki"}


@dataclass
class Case:
    repo: str                      # "nki-samples" | "accelopt" | "nki-library" | "nxdi"
    path: str                      # inside the checkout
    name: str                      # the function to run
    harness: Callable[[np.random.Generator], tuple[list, dict, Any]]
    rtol: float = 1e-4
    atol: float = 1e-4
    label: str = ""
    task: str | None = None        # accelopt: a reference file whose inputs and forward() judge the kernel
    header: bool = False           # the file has no imports of its own
    grid: tuple = ()               # launch grid, as the repository's own tests launch the kernel
    needs_module: bool = False     # the harness builds arguments from the kernel module (e.g. a config class)
    jit: bool = False              # a sub-kernel without @nki.jit, launched as the library's tests do: nki.jit(fn)
    launch: Any = None             # host code reached as ``obj[launch]`` (a launcher object, e.g. topk[lnc])
    check: Callable[[tuple, Any], tuple[bool, str]] | None = None   # own comparison instead of allclose

    @property
    def title(self) -> str:
        return self.label or f"{Path(self.path).stem}:{self.name}"

    @property
    def style(self) -> str:
        return STYLES[self.repo]


# ---- NumPy harnesses (ours) ------------------------------------------------------------------------
def _f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def tensor_add(rng):
    a, b = _f32(rng, 256, 1024), _f32(rng, 256, 1024)
    return [a, b], {}, a + b


def tensor_add_nc2(rng):
    a, b = _f32(rng, 512, 1024), _f32(rng, 512, 1024)
    return [a, b], {}, a + b


def transpose2d(rng):
    rows, cols = 4, 6
    x = _f32(rng, 64, rows * cols)
    want = x.reshape(64, rows, cols).transpose(0, 2, 1).reshape(64, rows * cols)
    return [x], {"shape2D": (rows, cols)}, want


def avgpool(rng):
    x = _f32(rng, 32, 16, 24)
    return [x], {"pool_size": 2}, x.reshape(32, 8, 2, 12, 2).mean(axis=(2, 4))


def matmul_shapes(m, k, n):
    def harness(rng):
        lhs_t, rhs = _f32(rng, k, m), _f32(rng, k, n)
        return [lhs_t, rhs], {}, lhs_t.T @ rhs
    return harness


def attention(seqlen, dtype=np.float32):
    def harness(rng):
        import ml_dtypes
        dt = ml_dtypes.bfloat16 if dtype == "bf16" else np.float32
        q, k, v = (rng.standard_normal((128, seqlen)).astype(dt) for _ in range(3))
        s = q.astype(np.float32).T @ k.astype(np.float32)
        p = np.exp(s - s.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        return [q, k, v], {}, p @ v.astype(np.float32).T
    return harness


def mamba_batched(rng):
    b, c, s, n = 1, 256, 512, 16
    delta = (rng.random((b, c, s)) * 0.1).astype(np.float32)
    u, a = _f32(rng, b, c, s), -rng.random((c, n)).astype(np.float32)
    bb, cc = _f32(rng, b, n, s), _f32(rng, b, n, s)
    out = np.zeros((b, c, s), np.float32)
    for bi in range(b):
        for si in range(n):
            da = np.exp(delta[bi] * a[:, si:si + 1])
            dbu = delta[bi] * u[bi] * bb[bi, si][None, :]
            h = np.zeros(c, np.float32)
            for t in range(s):
                h = da[:, t] * h + dbu[:, t]
                out[bi, :, t] += h * cc[bi, si, t]
    return [delta, u, a, bb, cc], {}, out


def contributed_matmul(rng):
    k, m, n = 1024, 512, 2048
    a, b = rng.random((k, m)).astype(np.float32), rng.random((k, n)).astype(np.float32)
    return [a, b], {}, a.T @ b


def maxpool(rng):
    x = _f32(rng, 16, 12, 12)
    p = 3
    win = np.lib.stride_tricks.sliding_window_view(x, (p, p), axis=(1, 2))
    return [x], {"pool_size": p}, win.max(axis=(3, 4))


def bilinear_2x(rng):
    x = _f32(rng, 4, 8, 8)
    return [x], {}, _resize_2x(x, (1, 2))


def _resize_2x(x, axes):
    """Bilinear 2x upsampling, align_corners=False (half-pixel centres, edge clamped), along ``axes``."""
    out = x
    for ax in axes:
        n = out.shape[ax]
        pos = (np.arange(2 * n) + 0.5) / 2 - 0.5
        lo = np.clip(np.floor(pos).astype(int), 0, n - 1)
        hi = np.clip(lo + 1, 0, n - 1)
        w = np.clip(pos - np.floor(pos), 0, 1)
        w = np.where(pos < 0, 0.0, w).astype(np.float32)
        shape = [1] * out.ndim
        shape[ax] = 2 * n
        out = np.take(out, lo, axis=ax) * (1 - w.reshape(shape)) + np.take(out, hi, axis=ax) * w.reshape(shape)
    return out


def add_nx8(rng):
    a, b = _f32(rng, 2, 8, 128, 512), _f32(rng, 2, 8, 128, 512)
    n = a.size - 70000                      # the tail of the last block is masked off
    want = (a + b).ravel()
    want[n:] = np.nan                       # never written
    return [a, b], {"n_elements": n}, want.reshape(a.shape)


def resize_nearest(rng):
    x = _f32(rng, 2, 30, 20, 256)
    oh, ow = 59, 38
    hi = np.floor(np.arange(oh) * (30 / oh)).astype(int)
    wi = np.floor(np.arange(ow) * (20 / ow)).astype(int)
    return [x], {"out_shape": (2, oh, ow, 256)}, x[:, hi][:, :, wi]


def adaptive_avgpool(rng):
    x = _f32(rng, 1, 64, 28, 28)
    return [x], {"output_size": 7}, x.reshape(1, 64, 7, 4, 7, 4).mean(axis=(3, 5))


def rmsnorm_qkv(rng):
    h = rng.standard_normal((1, 128, 512)).astype(np.float16)
    w = (rng.standard_normal((512, 512)) * 0.05).astype(np.float16)
    hf = h.astype(np.float32)
    normed = hf / np.sqrt((hf * hf).mean(axis=-1, keepdims=True) + 1e-6)
    return [h, w], {}, normed @ w.astype(np.float32)


def _softmax(s):
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return p / p.sum(axis=-1, keepdims=True)


def flash_fwd(rng, module):
    d, seq = 128, 2048
    q, k = (rng.random((1, 1, d, seq), dtype=np.float32) - 0.5) * 2, (rng.random((1, 1, d, seq), dtype=np.float32) - 0.5) * 2
    v = (rng.random((1, 1, seq, d), dtype=np.float32) - 0.5) * 2
    s = (q[0, 0].T @ k[0, 0]) / np.sqrt(d)
    s = np.where(np.tril(np.ones((seq, seq), bool)), s, -np.inf)
    config = module["FlashConfig"](seq_tile_size=2048, training=False)
    return [q, k, v, None], {"use_causal_mask": True, "mixed_precision": True, "config": config}, \
        (_softmax(s) @ v[0, 0])[None, None]


def sd_attention(rng):
    d, seq = 128, 2048
    q, k, v = _f32(rng, 1, d, seq), _f32(rng, 1, seq, d), _f32(rng, 1, seq, d)
    s = (q[0].T * 0.125) @ k[0].T
    return [q, k, v], {}, (_softmax(s) @ v[0])[None]


def sd_attention_allocated(rng):
    d, seq = 128, 2048
    q, k, v = _f32(rng, 1, d, seq), _f32(rng, 1, d, seq), _f32(rng, 1, seq, d)
    s = (q[0].T * 0.125) @ k[0]
    return [q, k, v], {}, (_softmax(s) @ v[0]).T[None]


def double_row_matmul(rng):
    import ml_dtypes
    m, k, n = 256, 1024, 512
    lhs = rng.random((m, k)).astype(ml_dtypes.bfloat16)
    rhs = rng.random((k, n)).astype(np.float32)
    scale = rhs.max(axis=0, keepdims=True) / 240.0                       # column-wise fp8 quantization
    q = (rhs / scale).astype(ml_dtypes.float8_e4m3)     # trn1/trn2's e4m3: IEEE style, max 240
    # pair K-tiles 2j and 2j+1 side by side in each 512-wide column tile: [K, N] -> [K/2, 2N]
    packed = q.reshape(k // 256, 2, 128, n // 512, 512).transpose(0, 2, 3, 1, 4).reshape(k // 2, 2 * n)
    want = lhs.astype(np.float32) @ rhs
    scales = np.broadcast_to(scale, (128, n)).astype(ml_dtypes.bfloat16)
    return [lhs, packed, scales, 2, 1, 8], {}, want


def task_inputs(rng):   # accelopt samples: the reference file provides inputs and the expected result
    raise AssertionError("handled by Case.task")


TUT = "src/nki_samples/tutorials"
CASES: list[Case] = [
    Case("nki-samples", f"{TUT}/tensor_addition/tensor_addition_nki_kernels.py", "nki_tensor_add", tensor_add),
    Case("nki-samples", f"{TUT}/tensor_addition/spmd_tensor_addition_nki_kernels.py", "nki_tensor_add", tensor_add),
    Case("nki-samples", f"{TUT}/tensor_addition/spmd_multiple_nc_tensor_addition_nki_kernels.py", "nki_tensor_add_nc2",
         tensor_add_nc2),
    Case("nki-samples", f"{TUT}/transpose2d/transpose2d_nki_kernels.py", "tensor_transpose2D_kernel_", transpose2d),
    Case("nki-samples", f"{TUT}/average_pool2d/average_pool2d_nki_kernels.py", "tensor_avgpool_kernel", avgpool,
         rtol=1e-5, atol=1e-5),
    Case("nki-samples", f"{TUT}/matrix_multiplication/matrix_multiplication_nki_kernels.py", "nki_matmul_basic_",
         matmul_shapes(64, 128, 512)),
    Case("nki-samples", f"{TUT}/matrix_multiplication/matrix_multiplication_nki_kernels.py", "nki_matmul_tiled_",
         matmul_shapes(256, 256, 1024)),
    Case("nki-samples", f"{TUT}/matrix_multiplication/matrix_multiplication_nki_kernels.py", "nki_matmul_hoist_load_",
         matmul_shapes(256, 256, 1024)),
    Case("nki-samples", f"{TUT}/matrix_multiplication/matrix_multiplication_nki_kernels.py",
         "nki_matmul_block_free_dimension_", matmul_shapes(256, 256, 2048)),
    Case("nki-samples", f"{TUT}/matrix_multiplication/matrix_multiplication_nki_kernels.py",
         "nki_matmul_fully_optimized_", matmul_shapes(2048, 1024, 1024), rtol=1e-3, atol=1e-3),
    Case("nki-samples", f"{TUT}/fused_mamba/mamba_nki_kernels.py", "mamba_v1", mamba_batched, rtol=1e-3, atol=1e-3),
    Case("nki-samples", f"{TUT}/fused_mamba/mamba_nki_kernels.py", "mamba_v2", mamba_batched, rtol=1e-3, atol=1e-3),
    Case("nki-samples", f"{TUT}/fused_mamba/mamba_nki_kernels.py", "mamba_v3", mamba_batched, rtol=1e-3, atol=1e-3),
    *[Case("nki-samples", f"{TUT}/attention_fwd_performance/attention_kernels.py", f"attn_fwd_{v}",
           attention(128 if v in ("v1", "v2") else 512, "bf16" if v not in ("v1", "v2") else np.float32), rtol=5e-2, atol=5e-2)
      for v in ("v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v8a", "v9")],
    Case("nki-samples", "contributed/matmul.py", "matmul", contributed_matmul, rtol=1e-3, atol=1e-2),
    Case("nki-samples", "contributed/maxpooling.py", "max_pooling_2d_stride_1", maxpool, rtol=0, atol=0),
    Case("nki-samples", "contributed/interpolate_bilinear_fwd.py", "interpolate_bilinear_2x_fwd", bilinear_2x),
    # reference kernels, removed from the repository's HEAD in 2025: pass an older checkout too
    Case("nki-samples", "src/nki_samples/reference/tutorial.py", "add_kernel_nx8x128x512", add_nx8, grid=(2,),
         rtol=1e-6, atol=1e-6),
    Case("nki-samples", "src/nki_samples/reference/vision.py", "resize_nearest_fixed_dma_kernel", resize_nearest,
         grid=(2,), rtol=0, atol=0),
    Case("nki-samples", "src/nki_samples/reference/vision.py", "adaptive_avg_pool2d_kernel", adaptive_avgpool,
         rtol=1e-5, atol=1e-5),
    Case("nki-samples", "src/nki_samples/reference/allocated_fused_linear.py", "allocated_fused_rms_norm_qkv",
         rmsnorm_qkv, rtol=2e-2, atol=2e-2),
    Case("nki-samples", "src/nki_samples/reference/double_row_matmul.py", "quantized_double_row_matmul",
         double_row_matmul, rtol=5e-2, atol=5e-1),
    Case("nki-samples", "src/nki_samples/reference/attention.py", "flash_fwd", flash_fwd, grid=(1, 1),
         needs_module=True, rtol=1e-2, atol=1e-2),
    Case("nki-samples", "src/nki_samples/reference/attention.py", "fused_self_attn_for_SD_small_head_size",
         sd_attention, grid=(1,), rtol=1e-2, atol=1e-2),
    Case("nki-samples", "src/nki_samples/reference/allocated_attention.py",
         "allocated_fused_self_attn_for_SD_small_head_size", sd_attention_allocated, grid=(1,), rtol=1e-2, atol=1e-2),
    Case("accelopt", "samples/nki/mamba_v1.py", "kernel", task_inputs, task="mamba_M7168_C256_S16_numpy_1.py",
         rtol=3e-5, header=True),
    Case("accelopt", "samples/nki/mamba_v2.py", "kernel", task_inputs, task="mamba_M7168_C256_S16_numpy_1.py",
         rtol=3e-5, header=True),
    Case("accelopt", "samples/nki/mamba_v3.py", "kernel", task_inputs, task="mamba_M7168_C256_S16_numpy_1.py",
         rtol=3e-5, header=True),
    Case("accelopt", "samples/nki/mamba_optimized.py", "kernel", task_inputs, task="mamba_M7168_C256_S16_numpy_1.py",
         rtol=3e-5, header=True),
    Case("accelopt", "samples/nki/rope_optimized.py", "kernel", task_inputs,
         task="rope_single_freq_apply_B1_H64_N4096_D128_numpy_1.py", rtol=2e-5, header=True),
]


# ---- running -----------------------------------------------------------------------------------------
MODES = ("values", "trace")


@dataclass
class Outcome:
    case: Case
    status: str                    # pass | FAIL | ok (trace-only ran) | ERROR | absent
    detail: str = ""
    seconds: float = 0.0
    where: str = ""
    mode: str = "values"

    def to_dict(self) -> dict:
        return {"repo": self.case.repo, "style": self.case.style, "kernel": self.case.title, "mode": self.mode,
                "status": self.status, "detail": self.detail, "seconds": round(self.seconds, 3)}


def all_cases() -> list[Case]:
    """The NKI 0.1 cases above, then today's-style cases (``real_kernels_nki.py``)."""
    sys.modules.setdefault("real_kernels", sys.modules[__name__])   # one Case class when run as a script
    import real_kernels_nki
    return CASES + real_kernels_nki.CASES


def _locate(case: Case, roots: dict[str, list[Path]]) -> Path | None:
    for root in roots.get(case.repo, []):
        p = root / case.path
        if p.is_file():
            return p
    return None


def _load(case: Case, path: Path):
    if case.header:
        return load_kernel(source=NKI_HEADER + path.read_text(), name=case.name, filename=str(path))
    kern = load_kernel(path, name=case.name)
    if case.launch is not None:
        return kern.fn[case.launch]      # host code: a plain function, run as host code by simulate
    return Kernel(kern.fn) if case.jit and kern.host else kern


def _accelopt_task(case: Case, path: Path, rng):
    from accelopt_nb.taskfile import l2_relative_error, load_task
    repo = path.parents[2]
    task = load_task(repo / "NKIBench" / "reference" / case.task)
    inputs = task.get_inputs(seed=0)
    ref = task.forward(*inputs)
    return task, inputs, ref, l2_relative_error


def _compare(case: Case, outputs: tuple, want: Any) -> tuple[bool, str]:
    if case.check is not None:
        return case.check(outputs, want)
    wants = want if isinstance(want, tuple) else (want,)
    if len(outputs) < len(wants):
        return False, f"{len(outputs)} outputs, {len(wants)} expected"
    for i, (o, w) in enumerate(zip(outputs, wants)):
        w = np.asarray(w, dtype=np.float32)
        if np.size(o) != w.size:
            return False, f"output {i} has {np.size(o)} elements, {w.size} expected"
        got = np.asarray(o).astype(np.float32).reshape(w.shape)
        if not np.allclose(got, w, rtol=case.rtol, atol=case.atol, equal_nan=True):
            unwritten = int(np.count_nonzero(np.isnan(got) & ~np.isnan(w)))
            where = f"output {i}: " if len(wants) > 1 else ""
            return False, where + (f"{unwritten} elements never written" if unwritten else
                                   f"max |err| {np.nanmax(np.abs(got - w)):.1e}")
    return True, ""


def run_case(case: Case, path: Path, seed: int, mode: str = "values", hw: str = "trn1") -> Outcome:
    """One kernel in one mode: ``values`` compares with NumPy, ``trace`` estimates the latency."""
    rng = np.random.default_rng(seed)
    options = SimOptions(trace_only=(mode == "trace"))
    try:
        kern = _load(case, path)
        t0 = time.perf_counter()
        if case.task is not None:
            task, inputs, ref, l2 = _accelopt_task(case, path, rng)
            res = simulate(kern, *task.to_nki(inputs), options=options)
        else:
            module = getattr(getattr(kern, "fn", kern), "__globals__", {})
            args, kwargs, want = case.harness(rng, module) if case.needs_module else case.harness(rng)
            res = simulate(kern, *args, grid=case.grid or None, options=options, **kwargs)
        seconds = time.perf_counter() - t0
        if mode == "trace":
            from accelopt_nb.perf import estimate
            latency = estimate(res.trace, hw=hw).latency * 1e3   # ms -> us
            return Outcome(case, "ok", f"{len(res.trace)} instructions, {latency:.1f} us ({hw})", seconds,
                           str(path), mode)
        if case.task is not None:
            outs = task.from_nki(res.outputs[0] if len(res.outputs) == 1 else tuple(res.outputs), ref)
            err = max(l2(o, r) for o, r in zip(outs, ref if isinstance(ref, tuple) else (ref,)))
            ok, detail = err <= case.rtol, f"L2 {err:.1e}"
        else:
            ok, detail = _compare(case, res.outputs, want)
        return Outcome(case, "pass" if ok else "FAIL", detail, seconds, str(path), mode)
    except AccelOptError as exc:
        return Outcome(case, "ERROR", f"{type(exc).__name__}: {exc}", where=str(path), mode=mode)
    except Exception as exc:  # a simulator bug must not stop the survey
        tb = traceback.extract_tb(exc.__traceback__)[-1]
        return Outcome(case, "ERROR", f"(crash) {type(exc).__name__}: {exc} at {Path(tb.filename).name}:{tb.lineno}",
                       where=str(path), mode=mode)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nki-samples", type=Path, action="append", default=[],
                    help="a checkout of github.com/aws-neuron/nki-samples (repeatable)")
    ap.add_argument("--accelopt-repo", type=Path, help="a checkout of github.com/zhang677/AccelOpt")
    ap.add_argument("--nki-library", type=Path, help="a checkout of github.com/aws-neuron/nki-library")
    ap.add_argument("--nxdi", type=Path, help="a checkout of github.com/aws-neuron/neuronx-distributed-inference")
    ap.add_argument("--mode", choices=("values", "trace", "both"), default="both",
                    help="with values (compared with NumPy), trace-only (estimated latency), or both (default)")
    ap.add_argument("--hw", default="trn1", help="hardware of the trace-only estimate (default trn1)")
    ap.add_argument("--only", help="comma-separated substrings of kernel titles")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, help="also write every outcome to this JSON file")
    args = ap.parse_args(argv)
    roots = {"nki-samples": args.nki_samples, "accelopt": [args.accelopt_repo] if args.accelopt_repo else [],
             "nki-library": [args.nki_library] if args.nki_library else [], "nxdi": [args.nxdi] if args.nxdi else []}
    if not any(roots.values()):
        print("skipped: pass --nki-samples DIR (github.com/aws-neuron/nki-samples), --accelopt-repo DIR "
              "(github.com/zhang677/AccelOpt), --nki-library DIR (github.com/aws-neuron/nki-library) and/or "
              "--nxdi DIR (github.com/aws-neuron/neuronx-distributed-inference)")
        return 0
    modes = MODES if args.mode == "both" else (args.mode,)
    cases = [c for c in all_cases() if any(roots.get(c.repo))
             and (args.only is None or any(s in c.title for s in args.only.split(",")))]
    outcomes: list[Outcome] = []
    for case in cases:
        path = _locate(case, roots)
        for mode in modes:
            out = Outcome(case, "absent", mode=mode) if path is None else run_case(case, path, args.seed, mode, args.hw)
            outcomes.append(out)
            msg = f"  {out.detail[:300]}" if out.detail else ""
            print(f"{out.status:6s} {mode:6s} {case.repo:11s} {case.title:60s} {out.seconds:6.2f} s{msg}", flush=True)
    print()
    for style in dict.fromkeys(c.style for c in cases):
        for mode in modes:
            mine = [o for o in outcomes if o.case.style == style and o.mode == mode]
            n = {s: sum(o.status == s for o in mine) for s in ("pass", "FAIL", "ok", "ERROR", "absent")}
            ran = len(mine) - n["absent"]
            head = (f"{n['pass']}/{ran} run unchanged and match NumPy; {n['FAIL']} wrong values" if mode == "values"
                    else f"{n['ok']}/{ran} run trace-only")
            print(f"{style:14s} {mode:6s}: {head}, {n['ERROR']} stopped with an error"
                  + (f"; {n['absent']} absent" if n["absent"] else ""))
    if args.json:
        args.json.write_text(json.dumps([o.to_dict() for o in outcomes], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
