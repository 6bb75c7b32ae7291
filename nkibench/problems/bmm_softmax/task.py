"""NKIBench task: bmm_softmax, softmax(lhs[b] @ rhs[b], axis=-1) (fp32)."""
import numpy as np

B = 16
M = 4096
K = 64
N = 4096


def get_inputs():
    lhs = np.random.normal(0, 1, (B, M, K)).astype(np.float32)
    rhs = np.random.normal(0, 1, (B, K, N)).astype(np.float32)
    return [lhs, rhs]


def forward(lhs, rhs):
    out = np.empty((B, M, N), dtype=np.float64)
    for b in range(B):   # one batch at a time keeps the float64 temporaries small
        s = lhs[b].astype(np.float64) @ rhs[b].astype(np.float64)
        s -= s.max(axis=-1, keepdims=True)
        np.exp(s, out=s)
        s /= s.sum(axis=-1, keepdims=True)
        out[b] = s
    return out


def transform_to_nki_inputs(inputs):
    return [np.ascontiguousarray(inputs[0]), np.ascontiguousarray(inputs[1])]


def transform_nki_outputs(k_res, ref):
    return (np.asarray(k_res).reshape(ref.shape),)


def _far_apart_scores(rng, keep):
    # Feature 0 of every lhs row is 30 and feature 0 of rhs is -40 on the columns outside `keep`, so
    # those scores are about -1200 while the kept columns keep ordinary N(0, K-1) scores.
    lhs = rng.standard_normal((B, M, K), dtype=np.float32)
    rhs = rng.standard_normal((B, K, N), dtype=np.float32)
    lhs[:, :, 0] = 30.0
    rhs[:, 0, :] = -40.0
    rhs[:, 0, keep] = 0.0
    return [lhs, rhs]


def get_adversarial_inputs():
    rng = np.random.default_rng(4004)
    width = min(128, N)
    return [_far_apart_scores(rng, slice(N - width, N)),   # the max lives in the last tile only
            _far_apart_scores(rng, slice(0, width))]       # the max lives in the first tile only
