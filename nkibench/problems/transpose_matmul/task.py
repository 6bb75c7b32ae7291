"""NKIBench task: transpose_matmul, C = lhs_t.T @ rhs (fp32)."""
import numpy as np

M = 4096
K = 2048
N = 10944

CANCEL = 0.05


def get_inputs():
    lhs_t = np.random.normal(0, 1, (K, M)).astype(np.float32)
    rhs = np.random.normal(0, 1, (K, N)).astype(np.float32)
    return [lhs_t, rhs]


def forward(lhs_t, rhs):
    return lhs_t.astype(np.float64).T @ rhs.astype(np.float64)


def transform_to_nki_inputs(inputs):
    lhs_t, rhs = inputs
    return [np.ascontiguousarray(lhs_t.reshape(128, K // 128, M)),
            np.ascontiguousarray(rhs.reshape(128, K // 128, N))]


def transform_nki_outputs(k_res, ref):
    return (np.asarray(k_res).reshape(ref.shape),)


def get_adversarial_inputs():
    # Duplicate the contraction half and negate it up to a small residual: C = CANCEL * X^T Z.
    rng = np.random.default_rng(4002)
    half = K // 2
    x_t = rng.standard_normal((half, M), dtype=np.float32)
    y = rng.standard_normal((half, N), dtype=np.float32)
    z = rng.standard_normal((half, N), dtype=np.float32)
    lhs_t = np.concatenate([x_t, x_t], axis=0)
    rhs = np.concatenate([y, (-y + np.float32(CANCEL) * z).astype(np.float32)], axis=0)
    return [[lhs_t, rhs]]
