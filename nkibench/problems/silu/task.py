"""NKIBench task: silu, x / (1 + exp(-x)) (fp32)."""
import numpy as np

M = 4096
N = 7168


def get_inputs():
    return [np.random.normal(0, 1, (M, N)).astype(np.float32)]


def forward(x):
    x64 = x.astype(np.float64)
    return x64 / (1.0 + np.exp(-x64))


def transform_to_nki_inputs(inputs):
    return [np.ascontiguousarray(inputs[0].reshape(128, M // 128, N))]


def transform_nki_outputs(k_res, ref):
    return (np.asarray(k_res).reshape(ref.shape),)


def get_adversarial_inputs():
    rng = np.random.default_rng(4010)
    x = rng.uniform(-100, 100, size=(M, N)).astype(np.float32)
    mask = rng.random((M, N)) < 0.5
    x[mask] = rng.standard_normal(int(mask.sum()), dtype=np.float32)
    return [[x]]
