"""NKIBench task: add_rmsnorm_matmul, ((x + z) / sqrt(mean((x+z)^2) + 1e-5) * g) @ w (fp32)."""
import numpy as np

M = 4096
N = 2048
K = 1024

EPS = 1e-5


def get_inputs():
    x = np.random.normal(0, 1, (M, K)).astype(np.float32)
    z = np.random.normal(0, 1, (M, K)).astype(np.float32)
    g = np.random.normal(0, 1, (K,)).astype(np.float32)
    w = np.random.normal(0, 1, (K, N)).astype(np.float32)
    return [x, z, g, w]


def forward(x, z, g, w):
    y = x.astype(np.float64) + z.astype(np.float64)
    normed = y / np.sqrt(np.mean(y * y, axis=-1, keepdims=True) + EPS) * g.astype(np.float64)
    return normed @ w.astype(np.float64)


def transform_to_nki_inputs(inputs):
    x, z, g, w = inputs
    return [np.ascontiguousarray(x), np.ascontiguousarray(z), np.ascontiguousarray(g.reshape(K, 1)),
            np.ascontiguousarray(w)]


def transform_nki_outputs(k_res, ref):
    return (np.asarray(k_res).reshape(ref.shape),)


def get_adversarial_inputs():
    rng = np.random.default_rng(4008)
    scale = (10.0 ** rng.uniform(-5, 3, size=(M, 1))).astype(np.float32)
    x = rng.standard_normal((M, K), dtype=np.float32) * scale
    z = rng.standard_normal((M, K), dtype=np.float32) * scale
    g = rng.standard_normal((K,), dtype=np.float32)
    w = rng.standard_normal((K, N), dtype=np.float32)
    return [[x, z, g, w]]
