"""NKIBench task: mamba, the selective scan of a Mamba block (fp32, batch 1)."""
import numpy as np

M = 7168
C = 256
S = 16

SCALE = 0.05


def get_inputs():
    delta = (np.random.normal(0, 1, (C, M)) * SCALE).astype(np.float32)
    u = (np.random.normal(0, 1, (C, M)) * SCALE).astype(np.float32)
    a = (np.random.normal(0, 1, (C, S)) * SCALE).astype(np.float32)
    b = (np.random.normal(0, 1, (S, M)) * SCALE).astype(np.float32)
    c_mat = (np.random.normal(0, 1, (S, M)) * SCALE).astype(np.float32)
    return [delta, u, a, b, c_mat]


def forward(delta, u, a, b, c_mat):
    delta, u, a, b, c_mat = (x.astype(np.float64) for x in (delta, u, a, b, c_mat))
    d_a = np.exp(delta[:, None, :] * a[:, :, None])             # (C, S, M)
    d_bu = (delta * u)[:, None, :] * b[None, :, :]              # (C, S, M)
    h = np.zeros((C, S), dtype=np.float64)
    out = np.empty((C, M), dtype=np.float64)
    for t in range(M):
        h = d_a[:, :, t] * h + d_bu[:, :, t]
        out[:, t] = h @ c_mat[:, t]
    return out


def transform_to_nki_inputs(inputs):
    return [np.ascontiguousarray(x) for x in inputs]


def transform_nki_outputs(k_res, ref):
    return (np.asarray(k_res).reshape(ref.shape),)


def get_adversarial_inputs():
    rng = np.random.default_rng(4014)
    # Case 1: strong decay, delta * a = O(1).
    delta = np.abs(rng.standard_normal((C, M), dtype=np.float32))
    u = rng.standard_normal((C, M), dtype=np.float32)
    a = (-2.0 * np.abs(rng.standard_normal((C, S), dtype=np.float32))).astype(np.float32)
    b = rng.standard_normal((S, M), dtype=np.float32)
    c_mat = rng.standard_normal((S, M), dtype=np.float32)
    strong_decay = [delta, u, a, b, c_mat]
    # Case 2: no decay; input only at the start, so the tail is pure carried state.
    delta2 = (SCALE * rng.standard_normal((C, M), dtype=np.float32)).astype(np.float32)
    u2 = rng.standard_normal((C, M), dtype=np.float32)
    u2[:, max(1, M // 8):] = 0.0
    a2 = np.zeros((C, S), dtype=np.float32)
    b2 = rng.standard_normal((S, M), dtype=np.float32)
    c2 = rng.standard_normal((S, M), dtype=np.float32)
    long_memory = [delta2, u2, a2, b2, c2]
    return [strong_decay, long_memory]
