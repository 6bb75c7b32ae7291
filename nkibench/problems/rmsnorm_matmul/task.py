"""NKIBench task: rmsnorm_matmul, (x / sqrt(mean(x^2, axis=-1))) @ w (fp32, no epsilon)."""
import numpy as np

M = 4096
N = 2048
K = 1024


def get_inputs():
    x = np.random.normal(0, 1, (M, K)).astype(np.float32)
    w = np.random.normal(0, 1, (K, N)).astype(np.float32)
    return [x, w]


def forward(x, w):
    x64 = x.astype(np.float64)
    rms = np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True))
    return (x64 / rms) @ w.astype(np.float64)


def transform_to_nki_inputs(inputs):
    x, w = inputs
    return [np.ascontiguousarray(x.reshape(M // 128, 128, K)), np.ascontiguousarray(w.reshape(K // 128, 128, N))]


def transform_nki_outputs(k_res, ref):
    return (np.asarray(k_res).reshape(ref.shape),)


def get_adversarial_inputs():
    rng = np.random.default_rng(4007)
    x = rng.standard_normal((M, K), dtype=np.float32)
    x *= (10.0 ** rng.uniform(-6, 4, size=(M, 1))).astype(np.float32)
    w = rng.standard_normal((K, N), dtype=np.float32)
    return [[x, w]]
