"""Today's-style kernels for ``real_kernels.py``: the standalone ``nki`` package (``import nki``).

Production kernels from ``aws-neuron/nki-library`` (``--nki-library DIR``) and the model kernels of
``aws-neuron/neuronx-distributed-inference`` (``--nxdi DIR``), each run unchanged from the checkout;
everything here is ours: the inputs, the kernel arguments and a NumPy statement of what the kernel
computes (read from the kernel's documentation and the library's own test references, written anew).
Shapes are small members of the ranges the libraries test. ``grid=(2,)`` is how a kernel written for
two logical NeuronCores (LNC=2) is launched on the simulator: two programs, ``nl.num_programs() == 2``.
"""
from __future__ import annotations

import numpy as np

from real_kernels import Case, _f32, _softmax

LIB = "src/nkilib_src/nkilib"
QWEN = "contrib/models/Qwen3.5-2B/src/nki_kernels"
CONTRIB = "contrib/models"


def _bf16(x):
    import ml_dtypes
    return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16)


def _rms(x, eps=1e-6):
    x = x.astype(np.float32)
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps)


# ---- nki-library: core ------------------------------------------------------------------------------
def cumsum(rng):
    x = _f32(rng, 200, 2500)                       # two partition tiles (one ragged), two free tiles
    return [x], {}, np.cumsum(x, axis=-1)


def _tkg_layout(y, bxs):
    """[B, S, H] -> [128, B*S, H/128]: hidden split as (128, H/128), the 128 on partitions (LNC=1 layout)."""
    return y.reshape(bxs, 128, -1).transpose(1, 0, 2)


def rmsnorm_tkg(rng):
    b, s, h = 1, 4, 2048
    x, gamma = rng.standard_normal((b, s, h)).astype(np.float16), rng.standard_normal((1, h)).astype(np.float16)
    out = np.zeros((128, b * s, h // 128), np.float16)
    want = _rms(x) * gamma.astype(np.float32)
    return [x, gamma, out], {}, _tkg_layout(want.reshape(b * s, h), b * s)


def layernorm_tkg(rng):
    b, s, h = 1, 4, 2048
    x = rng.standard_normal((b, s, h)).astype(np.float16)
    gamma, beta = (rng.standard_normal((1, h)).astype(np.float16) for _ in range(2))
    out = np.zeros((128, b * s, h // 128), np.float16)
    xf = x.astype(np.float32)
    norm = (xf - xf.mean(-1, keepdims=True)) / np.sqrt(xf.var(-1, keepdims=True) + 1e-6)
    want = norm * gamma.astype(np.float32) + beta.astype(np.float32)
    return [x, gamma, out], {"beta": beta}, _tkg_layout(want.reshape(b * s, h), b * s)


def _rope_halves(x, cos, sin):
    """RoPE on the head axis 0 split in halves: (x1, x2) -> (x1 cos - x2 sin, x1 sin + x2 cos)."""
    h = x.shape[0] // 2
    x1, x2 = x[:h], x[h:]
    return np.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=0)


def rope(contiguous: bool):
    def harness(rng):
        d, b, n, s = 128, 1, 4, 64
        x = _f32(rng, d, b, n, s)
        ang = rng.uniform(-np.pi, np.pi, (d // 2, b, s)).astype(np.float32)
        cos, sin = np.cos(ang), np.sin(ang)
        c, sn = cos[:, :, None, :], sin[:, :, None, :]
        if contiguous:
            want = _rope_halves(x, c, sn)
        else:   # pairs (2i, 2i+1) are rotated: de-interleave, rotate, interleave back
            deint = np.concatenate([x[0::2], x[1::2]], axis=0)
            rot = _rope_halves(deint, c, sn)
            want = np.empty_like(x)
            want[0::2], want[1::2] = rot[: d // 2], rot[d // 2:]
        return [x, cos, sin], {"contiguous_layout": contiguous}, want
    return harness


def rope_hf(rng):
    b, hq, hk, s, d = 1, 4, 2, 256, 128
    q, k = _f32(rng, b, hq, s, d), _f32(rng, b, hk, s, d)
    ang = rng.uniform(-np.pi, np.pi, (b, s, d // 2)).astype(np.float32)
    cos = np.concatenate([np.cos(ang)] * 2, axis=-1)
    sin = np.concatenate([np.sin(ang)] * 2, axis=-1)

    def rot(x):
        half = x.shape[-1] // 2
        turned = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
        return x * cos[:, None] + turned * sin[:, None]
    return [q, k, np.zeros_like(q), np.zeros_like(k)], {"cos": cos, "sin": sin}, (rot(q), rot(k))


def cascaded_max(rng):
    x = _f32(rng, 4, 5, 4058)
    return [x], {}, (x.max(-1, keepdims=True), x.argmax(-1)[..., None].astype(np.int32))


def rotational_topk(rng):
    bxs, v, k = 8, 4096, 64
    x = _f32(rng, 1, bxs, v)
    idx = np.argsort(-x, axis=-1, kind="stable")[..., :k]
    return [x], {"k": k}, (np.take_along_axis(x, idx, -1), idx.astype(np.uint32))


def check_topk(outputs, want):
    """Top-k values must match; an index may differ only where it points at an equal value."""
    vals, idx = (np.asarray(o) for o in outputs[:2])
    if vals.shape != want[0].shape or not np.allclose(vals, want[0], rtol=1e-6, atol=1e-6):
        return False, "top-k values differ"
    return True, ""


def dynamic_add(rng):
    m, h = 384, 1024
    a, b = _bf16(rng.standard_normal((m, h))), _bf16(rng.standard_normal((m, h)))
    tiles = np.array([[m // 128]], np.int32)
    return [a, b, tiles], {}, a.astype(np.float32) + b.astype(np.float32)


def find_nonzero(rng):
    t, c = 256, 16
    x = (rng.random((t, c)) < 0.2).astype(np.float32) * 0.1
    idx = np.full((c, t), -1, np.int32)
    counts = np.zeros(c, np.int32)
    for j in range(c):
        nz = np.flatnonzero(x[:, j])
        idx[j, :nz.size], counts[j] = nz, nz.size
    return [x], {}, (idx, counts)


def rmsnorm_quant(rng, module):
    b, s, h = 1, 128, 512
    x, w = _f32(rng, b, s, h), (1 + 0.1 * _f32(rng, h)).astype(np.float32)
    kargs = module["RmsNormQuantKernelArgs"]()
    return [x, w, kargs], {}, (_rms(x) * w).astype(np.float32)


def check_row_quant(outputs, want):
    """Row fp8 quantization: values are fp8 codes followed by 4 bytes holding each row's fp32 dequant scale.
    The dequantized row must equal the normalized row to within an fp8 step (3 mantissa bits)."""
    out = np.asarray(outputs[0])
    h = want.shape[-1]
    codes, scale_bytes = out[..., :h], np.ascontiguousarray(out[..., h:h + 4])
    scale = scale_bytes.view(np.uint8).view(np.float32)
    deq = codes.astype(np.float32) * scale
    err = np.abs(deq - want) / np.abs(want).max(axis=-1, keepdims=True)
    return bool(err.max() <= 2 ** -3), f"max error {err.max():.2e} of the row's absmax"


def cross_entropy(rng, module):
    n, v = 64, 8192
    logits = _f32(rng, n, v)
    targets = rng.integers(0, v, n).astype(np.int32)
    m = logits.max(-1)
    lse = m + np.log(np.exp(logits - m[:, None]).sum(-1))
    loss = lse - logits[np.arange(n), targets]
    return [logits, targets], {"positions_per_batch": 32, "chunk_size": v, "dtype": module["nl"].float32}, (loss, lse)


def depthwise_conv1d(rng):
    n, c, w, s = 1, 16, 512, 64
    img, filt = _bf16(rng.standard_normal((n, c, 1, w))), _bf16(rng.standard_normal((c, 1, 1, s)))
    x, f = img.astype(np.float32)[:, :, 0], filt.astype(np.float32)[:, 0, 0]
    win = np.lib.stride_tricks.sliding_window_view(x, s, axis=-1)           # [N, C, Q, S]
    want = np.einsum("ncqs,cs->ncq", win, f)[:, :, None, :]
    return [img, filt], {"feature_group_count": c}, want


def attention_cte(rng):
    b, sq, d = 1, 512, 64
    q, k, v = _bf16(rng.standard_normal((b, sq, d))), _bf16(rng.standard_normal((b, d, sq))), \
        _bf16(rng.standard_normal((b, sq, d)))
    scale = 1 / np.sqrt(d)
    s = scale * q.astype(np.float32)[0] @ k.astype(np.float32)[0]
    s = np.where(np.tril(np.ones((sq, sq), bool)), s, -np.inf)
    return [q, k, v], {"scale": float(scale), "causal_mask": True}, (_softmax(s) @ v.astype(np.float32)[0])[None]


def qkv_cte(rng):
    b, s, h, i = 1, 512, 512, 768          # fused Q, K and V projection widths: 512 + 128 + 128
    x = _bf16(rng.standard_normal((b, s, h)))
    w = _bf16(rng.standard_normal((h, i)) / np.sqrt(h))
    return [x, w], {}, x.astype(np.float32) @ w.astype(np.float32)


def output_projection_cte(rng):
    b, n, d, s, h = 1, 2, 128, 512, 512
    attn = _bf16(rng.standard_normal((b, n, d, s)))
    w = _bf16(rng.standard_normal((n * d, h)) / np.sqrt(n * d))
    bias = _bf16(rng.standard_normal((1, h)))
    a = attn.astype(np.float32).reshape(b, n * d, s).transpose(0, 2, 1)
    return [attn, w], {"bias": bias}, a @ w.astype(np.float32) + bias.astype(np.float32)


# ---- neuronx-distributed-inference: model kernels ----------------------------------------------------
def qwen_qk_norm_rope(rng):
    b, s, hq, hk, d, eps = 1, 160, 2, 1, 256, 1e-6
    qp, kp = _f32(rng, b, s, hq * d), _f32(rng, b, s, hk * d)
    qg, kg = (1 + 0.1 * _f32(rng, d)).astype(np.float32), (1 + 0.1 * _f32(rng, d)).astype(np.float32)
    ang = rng.uniform(-np.pi, np.pi, (b, s, 32)).astype(np.float32)
    cos = np.concatenate([np.cos(ang)] * 2, -1)
    sin = np.concatenate([np.sin(ang)] * 2, -1)

    def ref(p, g, heads):
        x = p.reshape(b, s, heads, d).transpose(0, 2, 1, 3)          # BHSD
        y = _rms(x, eps) * g
        lo, hi = y[..., :32].copy(), y[..., 32:64].copy()
        c, sn = cos[:, None], sin[:, None]
        y[..., :32] = lo * c[..., :32] - hi * sn[..., :32]
        y[..., 32:64] = hi * c[..., 32:] + lo * sn[..., 32:]
        return y
    return [qp, kp, qg, kg, cos, sin, eps], {}, (ref(qp, qg, hq), ref(kp, kg, hk))


def deltanet_step(rng):
    bh, d = 3, 128
    q, k, v = (_f32(rng, bh, d) / np.sqrt(d) for _ in range(3))
    g = -rng.random((bh, 1)).astype(np.float32)
    beta = rng.random((bh, 1)).astype(np.float32)
    state = (0.1 * _f32(rng, bh * d, d)).astype(np.float32)
    out, new_state = np.zeros((bh, d), np.float32), np.zeros_like(state)
    for i in range(bh):
        st = state[i * d:(i + 1) * d] * np.exp(g[i, 0])             # [k-dim, v-dim]
        delta = (v[i] - st.T @ k[i]) * beta[i, 0]
        st = st + np.outer(k[i], delta)
        out[i], new_state[i * d:(i + 1) * d] = st.T @ q[i], st
    return [q, k, v, g, beta, state], {}, (out, new_state)


def mla_attention(rng):
    """GLM's MLA decode step: scores over the compressed KV cache, softmax, then V absorption per head."""
    b, h, s, d_rope, d_c, d_v, scale = 1, 2, 512, 64, 512, 256, 0.0625
    q_pe, q_nope = _bf16(rng.standard_normal((b * h, d_rope))), _bf16(rng.standard_normal((b * h, d_c)) * 0.1)
    kv = _bf16(rng.standard_normal((b, s, d_rope + d_c)) * 0.1)
    v_abs = _bf16(rng.standard_normal((h, d_v, d_c)) / np.sqrt(d_c))
    mask = (rng.random((b * h, s)) < 0.9).astype(np.uint8)
    f = lambda a: a.astype(np.float32)                                     # noqa: E731
    out = np.zeros((b * h, d_v), np.float32)
    for bh in range(b * h):
        k_pe, c_kv = f(kv[bh // h, :, :d_rope]), f(kv[bh // h, :, d_rope:])
        sc = scale * (k_pe @ f(q_pe[bh]) + c_kv @ f(q_nope[bh])) + np.where(mask[bh] > 0, 0.0, -9984.0)
        out[bh] = f(v_abs[bh % h]) @ (_softmax(sc) @ c_kv)
    kwargs = {"softmax_scale": scale, "n_heads": h, "d_rope": d_rope, "d_c": d_c, "d_v": d_v, "seq_len": s}
    return [q_pe, q_nope, kv, v_abs, mask], kwargs, out


def cross_attention(rng):
    """LTX-2's text cross-attention: softmax(q k^T + additive mask over K) v, q pre-scaled."""
    bh, sq, sk, d = 1, 256, 1024, 128
    q = _bf16(rng.standard_normal((bh, sq, d)) / np.sqrt(d))
    k, v = _bf16(rng.standard_normal((bh, sk, d))), _bf16(rng.standard_normal((bh, sk, d)))
    mask = np.where(rng.random((bh, sk)) < 0.8, 0.0, -10000.0).astype(np.float32)
    f = lambda a: a.astype(np.float32)                                     # noqa: E731
    want = np.stack([_softmax(f(q[i]) @ f(k[i]).T + mask[i]) @ f(v[i]) for i in range(bh)])
    return [q, k, v, mask], {}, want


CASES: list[Case] = [
    Case("nki-library", f"{LIB}/core/cumsum/cumsum.py", "cumsum", cumsum, rtol=1e-4, atol=1e-3),
    Case("nki-library", f"{LIB}/core/subkernels/rmsnorm_tkg.py", "rmsnorm_tkg", rmsnorm_tkg, jit=True,
         rtol=2e-2, atol=2e-2),
    Case("nki-library", f"{LIB}/core/subkernels/layernorm_tkg.py", "layernorm_tkg", layernorm_tkg, jit=True,
         rtol=2e-2, atol=2e-2),
    Case("nki-library", f"{LIB}/core/embeddings/rope.py", "RoPE", rope(True), label="rope:RoPE (contiguous)"),
    Case("nki-library", f"{LIB}/core/embeddings/rope.py", "RoPE", rope(False), label="rope:RoPE (interleaved)"),
    Case("nki-library", f"{LIB}/core/embeddings/rope_hf.py", "rope_hf", rope_hf),
    Case("nki-library", f"{LIB}/core/max/cascaded_max.py", "cascaded_max", cascaded_max, rtol=0, atol=0),
    Case("nki-library", f"{LIB}/core/topk/rotational_topk.py", "topk", rotational_topk, launch=1,
         check=check_topk),
    Case("nki-library", f"{LIB}/core/rmsnorm/rmsnorm_quant.py", "rmsnorm_quant_kernel", rmsnorm_quant,
         needs_module=True, check=check_row_quant),
    Case("nki-library", f"{LIB}/experimental/loss/cross_entropy.py", "cross_entropy_forward", cross_entropy,
         needs_module=True, rtol=1e-4, atol=1e-3),
    Case("nki-library", f"{LIB}/experimental/conv/depthwise_conv1d.py", "depthwise_conv1d_implicit_gemm",
         depthwise_conv1d, grid=(2,), rtol=2e-2, atol=2e-1),
    Case("nki-library", f"{LIB}/experimental/dynamic_shapes/dynamic_elementwise_add.py",
         "dynamic_elementwise_add", dynamic_add, rtol=1e-2, atol=1e-2),
    Case("nki-library", f"{LIB}/core/subkernels/find_nonzero_indices.py", "find_nonzero_indices", find_nonzero,
         grid=(2,), rtol=0, atol=0),
    Case("nki-library", f"{LIB}/core/attention/attention_cte.py", "attention_cte", attention_cte,
         rtol=2e-2, atol=2e-2),
    # (core/mlp/mlp.py is not valid Python at nki-library d2ad3a5: a docstring pasted twice)
    Case("nki-library", f"{LIB}/core/qkv/qkv.py", "qkv", qkv_cte, rtol=3e-2, atol=3e-2),
    Case("nki-library", f"{LIB}/core/output_projection/output_projection_cte/output_projection_cte.py",
         "output_projection_cte", output_projection_cte, rtol=3e-2, atol=3e-2),
    Case("nxdi", f"{QWEN}/qwen_qk_norm_rope.py", "qwen_qk_norm_partial_rope_kernel", qwen_qk_norm_rope,
         rtol=1e-4, atol=1e-4),
    Case("nxdi", f"{QWEN}/nki_deltanet.py", "_deltanet_recurrent_step_batched_kernel", deltanet_step,
         rtol=1e-4, atol=1e-4),
    Case("nxdi", f"{CONTRIB}/GLM-5.2/src/mla_attention_nki_kernel.py", "mla_attention_tkg", mla_attention,
         rtol=3e-2, atol=3e-2),
    Case("nxdi", f"{CONTRIB}/ltx2-video-audio/src/nki_cross_attention_kernel.py", "cross_attn_kernel",
         cross_attention, rtol=3e-2, atol=3e-2),
]
