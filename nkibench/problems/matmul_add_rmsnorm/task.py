"""NKIBench task: matmul_add_rmsnorm, y = x @ w + z; y * g / sqrt(mean(y^2) + 1e-5) (fp32)."""
import numpy as np

M = 4096
N = 2048
K = 2048

EPS = 1e-5


def get_inputs():
    x = np.random.normal(0, 1, (M, K)).astype(np.float32)
    w = np.random.normal(0, 1, (K, N)).astype(np.float32)
    z = np.random.normal(0, 1, (M, N)).astype(np.float32)
    g = np.random.normal(0, 1, (N,)).astype(np.float32)
    return [x, w, z, g]


def forward(x, w, z, g):
    y = x.astype(np.float64) @ w.astype(np.float64) + z.astype(np.float64)
    return y * g.astype(np.float64) / np.sqrt(np.mean(y * y, axis=-1, keepdims=True) + EPS)


def transform_to_nki_inputs(inputs):
    x, w, z, g = inputs
    return [np.ascontiguousarray(x), np.ascontiguousarray(w), np.ascontiguousarray(z),
            np.ascontiguousarray(g.reshape(1, N))]


def transform_nki_outputs(k_res, ref):
    return (np.asarray(k_res).reshape(ref.shape),)


def get_adversarial_inputs():
    rng = np.random.default_rng(4009)
    scale = (10.0 ** rng.uniform(-5, 3, size=(M, 1))).astype(np.float32)
    x = rng.standard_normal((M, K), dtype=np.float32) * scale
    w = (rng.standard_normal((K, N), dtype=np.float32) / np.float32(np.sqrt(K))).astype(np.float32)
    z = rng.standard_normal((M, N), dtype=np.float32) * scale
    g = rng.standard_normal((N,), dtype=np.float32)
    return [[x, w, z, g]]
