"""NKIBench task: swiglu, (silu(x @ w_gate) * (x @ w_up)) @ w_down (fp32)."""
import numpy as np

M = 4096
N = 3072
K = 1024


def get_inputs():
    x = np.random.normal(0, 1, (M, K)).astype(np.float32)
    w_gate = np.random.normal(0, 1, (K, N)).astype(np.float32)
    w_up = np.random.normal(0, 1, (K, N)).astype(np.float32)
    w_down = np.random.normal(0, 1, (N, K)).astype(np.float32)
    return [x, w_gate, w_up, w_down]


def forward(x, w_gate, w_up, w_down):
    x64 = x.astype(np.float64)
    gate = x64 @ w_gate.astype(np.float64)
    up = x64 @ w_up.astype(np.float64)
    # silu(gate) = gate * sigmoid(gate), written so that exp never overflows
    e = np.exp(-np.abs(gate))
    sig = np.where(gate >= 0, 1.0 / (1.0 + e), e / (1.0 + e))
    return (gate * sig * up) @ w_down.astype(np.float64)


def transform_to_nki_inputs(inputs):
    x, w_gate, w_up, w_down = inputs
    return [np.ascontiguousarray(x.reshape(M // 128, 128, K // 128, 128)),
            np.ascontiguousarray(w_gate.reshape(K // 128, 128, N)),
            np.ascontiguousarray(w_up.reshape(K // 128, 128, N)),
            np.ascontiguousarray(w_down.reshape(N // 128, 128, K))]


def transform_nki_outputs(k_res, ref):
    return (np.asarray(k_res).reshape(ref.shape),)


def get_adversarial_inputs():
    rng = np.random.default_rng(4013)
    x = (20.0 * rng.standard_normal((M, K), dtype=np.float32)).astype(np.float32)
    ws = [rng.standard_normal(s, dtype=np.float32) for s in ((K, N), (K, N), (N, K))]
    return [[x, *ws]]
