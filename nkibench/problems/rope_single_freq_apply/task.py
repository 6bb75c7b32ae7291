"""NKIBench task: rope_single_freq_apply, rotate the two halves of feature-major x (fp32)."""
import numpy as np

B = 1
H = 64
N = 4096
D = 128


def get_inputs():
    cols = B * H * N
    x = np.random.normal(0, 1, (D, cols)).astype(np.float32)
    cos = np.random.normal(0, 1, (D // 2, cols)).astype(np.float32)
    sin = np.random.normal(0, 1, (D // 2, cols)).astype(np.float32)
    return [x, cos, sin]


def forward(x, cos, sin):
    x64, c, s = x.astype(np.float64), cos.astype(np.float64), sin.astype(np.float64)
    x0, x1 = x64[: D // 2], x64[D // 2:]
    return np.concatenate([x0 * c - x1 * s, x0 * s + x1 * c], axis=0)


def transform_to_nki_inputs(inputs):
    return [np.ascontiguousarray(a) for a in inputs]


def transform_nki_outputs(k_res, ref):
    return (np.asarray(k_res).reshape(ref.shape),)


def _wide_range(rng, shape):
    mag = 10.0 ** rng.uniform(-3, 6, size=shape)
    return (mag * rng.choice([-1.0, 1.0], size=shape)).astype(np.float32)


def get_adversarial_inputs():
    rng = np.random.default_rng(4012)
    cols = B * H * N
    return [[_wide_range(rng, (D, cols)), _wide_range(rng, (D // 2, cols)), _wide_range(rng, (D // 2, cols))]]
