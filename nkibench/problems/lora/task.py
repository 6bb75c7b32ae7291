"""NKIBench task: lora, out = x @ w + (x @ a) @ b (fp32)."""
import numpy as np

M = 4096
N = 12288
K = 5120
R = 128

CANCEL = 0.05


def get_inputs():
    x = np.random.normal(0, 1, (M, K)).astype(np.float32)
    w = np.random.normal(0, 1, (K, N)).astype(np.float32)
    a = np.random.normal(0, 1, (K, R)).astype(np.float32)
    b = np.random.normal(0, 1, (R, N)).astype(np.float32)
    return [x, w, a, b]


def forward(x, w, a, b):
    x64 = x.astype(np.float64)
    return x64 @ w.astype(np.float64) + (x64 @ a.astype(np.float64)) @ b.astype(np.float64)


def transform_to_nki_inputs(inputs):
    x, w, a, b = inputs
    return [np.ascontiguousarray(x.reshape(M // 128, 128, K // 128, 128)),
            np.ascontiguousarray(w.reshape(K // 128, 128, N)),
            np.ascontiguousarray(a.reshape(K // 128, 128, R)),
            np.ascontiguousarray(b)]


def transform_nki_outputs(k_res, ref):
    return (np.asarray(k_res).reshape(ref.shape),)


def _cancelling(rng, rows_half, cols):
    y = rng.standard_normal((rows_half, cols), dtype=np.float32)
    z = rng.standard_normal((rows_half, cols), dtype=np.float32)
    return np.concatenate([y, (-y + np.float32(CANCEL) * z).astype(np.float32)], axis=0)


def get_adversarial_inputs():
    # x = [X, X] against weights [Y; -Y + CANCEL*Z]: both products cancel down to CANCEL * X @ Z.
    rng = np.random.default_rng(4006)
    half = K // 2
    xh = rng.standard_normal((M, half), dtype=np.float32)
    x = np.concatenate([xh, xh], axis=1)
    w = _cancelling(rng, half, N)
    a = _cancelling(rng, half, R)
    b = rng.standard_normal((R, N), dtype=np.float32)
    return [[x, w, a, b]]
