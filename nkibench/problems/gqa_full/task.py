"""NKIBench task: gqa_full, grouped-query attention without a causal mask (fp32)."""
import numpy as np

B = 1
N = 4096
QH = 16
KH = 8
D = 128


def get_inputs():
    q = np.random.normal(0, 1, (B, QH, N, D)).astype(np.float32)
    k = np.random.normal(0, 1, (B, KH, N, D)).astype(np.float32)
    v = np.random.normal(0, 1, (B, KH, N, D)).astype(np.float32)
    return [q, k, v]


def forward(q, k, v):
    group = QH // KH
    out = np.empty((B, QH, N, D), dtype=np.float64)
    for b in range(B):
        for h in range(QH):
            kv = h // group          # kv head h // group serves query head h
            s = q[b, h].astype(np.float64) @ k[b, kv].astype(np.float64).T
            s /= np.sqrt(D)
            s -= s.max(axis=-1, keepdims=True)
            np.exp(s, out=s)
            s /= s.sum(axis=-1, keepdims=True)
            out[b, h] = s @ v[b, kv].astype(np.float64)
    return out


def transform_to_nki_inputs(inputs):
    return [np.ascontiguousarray(x) for x in inputs]


def transform_nki_outputs(k_res, ref):
    return (np.asarray(k_res).reshape(ref.shape),)


def _far_apart_scores(rng, keep):
    # Scores outside the kept key block are about 40 * -60 / sqrt(128) = -212.
    q = rng.standard_normal((B, QH, N, D), dtype=np.float32)
    k = rng.standard_normal((B, KH, N, D), dtype=np.float32)
    v = rng.standard_normal((B, KH, N, D), dtype=np.float32)
    q[..., 0] = 40.0
    k[..., 0] = -60.0
    k[:, :, keep, 0] = 0.0
    return [q, k, v]


def get_adversarial_inputs():
    rng = np.random.default_rng(4005)
    width = min(128, N)
    return [_far_apart_scores(rng, slice(N - width, N)), _far_apart_scores(rng, slice(0, width))]
