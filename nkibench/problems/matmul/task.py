"""NKIBench task: matmul, C = A @ B (fp32)."""
import numpy as np

M = 4096
N = 12288
K = 5120

# Cancellation factor of the adversarial inputs (see get_adversarial_inputs).
CANCEL = 0.05


def get_inputs():
    lhs = np.random.normal(0, 1, (M, K)).astype(np.float32)
    rhs = np.random.normal(0, 1, (K, N)).astype(np.float32)
    return [lhs, rhs]


def forward(lhs, rhs):
    return lhs.astype(np.float64) @ rhs.astype(np.float64)


def transform_to_nki_inputs(inputs):
    lhs, rhs = inputs
    return [np.ascontiguousarray(lhs.reshape(M // 128, 128, K // 128, 128)),
            np.ascontiguousarray(rhs.reshape(K // 128, 128, N))]


def transform_nki_outputs(k_res, ref):
    return (np.asarray(k_res).reshape(ref.shape),)


def get_adversarial_inputs():
    # lhs = [X, X] and rhs = [Y; -Y + c*Z]: the result c*X@Z is ~1/c smaller than the partial sums, so
    # any kernel whose products are less exact than fp32 loses most of its significant digits.
    rng = np.random.default_rng(4001)
    half = K // 2
    x = rng.standard_normal((M, half), dtype=np.float32)
    y = rng.standard_normal((half, N), dtype=np.float32)
    z = rng.standard_normal((half, N), dtype=np.float32)
    lhs = np.concatenate([x, x], axis=1)
    rhs = np.concatenate([y, (-y + np.float32(CANCEL) * z).astype(np.float32)], axis=0)
    return [[lhs, rhs]]
