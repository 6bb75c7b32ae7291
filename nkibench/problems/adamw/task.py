"""NKIBench task: adamw, one AdamW step at step 1 with PyTorch's default hyperparameters (fp32)."""
import numpy as np

M = 10944
N = 2048

LR = 1e-3
BETA1 = 0.9
BETA2 = 0.999
EPS = 1e-8
WEIGHT_DECAY = 1e-2
STEP = 1


def get_inputs():
    param = np.random.normal(0, 1, (M, N)).astype(np.float32)
    grad = np.random.normal(0, 1, (M, N)).astype(np.float32)
    exp_avg = np.random.normal(0, 1, (M, N)).astype(np.float32)
    exp_avg_sq = np.abs(np.random.normal(0, 1, (M, N))).astype(np.float32)
    return [param, grad, exp_avg, exp_avg_sq]


def forward(param, grad, exp_avg, exp_avg_sq):
    p, g, m, v = (a.astype(np.float64) for a in (param, grad, exp_avg, exp_avg_sq))
    m = BETA1 * m + (1 - BETA1) * g
    v = BETA2 * v + (1 - BETA2) * g * g
    m_hat = m / (1 - BETA1 ** STEP)
    v_hat = v / (1 - BETA2 ** STEP)
    return p * (1 - LR * WEIGHT_DECAY) - LR * m_hat / (np.sqrt(v_hat) + EPS)


def transform_to_nki_inputs(inputs):
    return [np.ascontiguousarray(a) for a in inputs]


def transform_nki_outputs(k_res, ref):
    return (np.asarray(k_res).reshape(ref.shape),)


def get_adversarial_inputs():
    rng = np.random.default_rng(4011)
    param = rng.standard_normal((M, N), dtype=np.float32)
    grad = rng.standard_normal((M, N), dtype=np.float32)
    exp_avg = rng.standard_normal((M, N), dtype=np.float32)
    exp_avg_sq = np.abs(rng.standard_normal((M, N), dtype=np.float32))
    kind = rng.random((M, N))
    never = kind < 0.2                       # no gradient ever: v = g = 0
    tiny = (kind >= 0.2) & (kind < 0.4)      # epsilon-dominated denominator
    exp_avg_sq[never] = 0.0
    grad[never] = 0.0
    exp_avg_sq[tiny] = np.float32(1e-30) * np.abs(rng.standard_normal(int(tiny.sum()), dtype=np.float32))
    grad[tiny] = np.float32(1e-20) * rng.standard_normal(int(tiny.sum()), dtype=np.float32)
    return [[param, grad, exp_avg, exp_avg_sq]]
