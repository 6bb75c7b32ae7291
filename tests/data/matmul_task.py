"""A task module in the NKIBench file format (for simulator CLI tests)."""
import numpy as np

M, K, N = 256, 384, 700


def get_inputs():
    return [np.random.normal(0, 1, (M, K)).astype(np.float32), np.random.normal(0, 1, (K, N)).astype(np.float32)]


def forward(a, b):
    return a.astype(np.float64) @ b.astype(np.float64)


def transform_to_nki_inputs(inputs):
    return inputs


def transform_nki_outputs(k_res, ref):
    return (np.asarray(k_res).reshape(ref.shape),)
