"""NKIBench task: bmm, out[b] = lhs[b] @ rhs[b] (fp32)."""
import numpy as np

B = 16
M = 4096
K = 64
N = 4096

CANCEL = 0.05


def get_inputs():
    lhs = np.random.normal(0, 1, (B, M, K)).astype(np.float32)
    rhs = np.random.normal(0, 1, (B, K, N)).astype(np.float32)
    return [lhs, rhs]


def forward(lhs, rhs):
    return np.matmul(lhs.astype(np.float64), rhs.astype(np.float64))


def transform_to_nki_inputs(inputs):
    return [np.ascontiguousarray(inputs[0]), np.ascontiguousarray(inputs[1])]


def transform_nki_outputs(k_res, ref):
    return (np.asarray(k_res).reshape(ref.shape),)


def get_adversarial_inputs():
    # Per batch: lhs = [X, X], rhs = [Y; -Y + CANCEL*Z], so out = CANCEL * X @ Z after heavy cancellation.
    rng = np.random.default_rng(4003)
    half = K // 2
    x = rng.standard_normal((B, M, half), dtype=np.float32)
    y = rng.standard_normal((B, half, N), dtype=np.float32)
    z = rng.standard_normal((B, half, N), dtype=np.float32)
    lhs = np.concatenate([x, x], axis=2)
    rhs = np.concatenate([y, (-y + np.float32(CANCEL) * z).astype(np.float32)], axis=1)
    return [[lhs, rhs]]
