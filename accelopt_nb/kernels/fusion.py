"""Fusion (notebook 04): GELU's tanh approximation, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).

``gelu_unfused`` spells the formula out: five VectorE instructions and one ScalarE ``tanh`` per tile
(the ``sqrt(2/pi)`` scale rides on the activation). ``gelu_fused`` is the exercise's answer: ScalarE
has the whole function as one activation, ``nl.gelu_apprx_tanh``. Written for accelopt_nb's course.
"""
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

SQRT_2_OVER_PI = 0.7978845608028654


@nki.jit
def gelu_unfused(x):
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(rows // 128):
        t = nl.load(x[i * 128:(i + 1) * 128, 0:cols])
        x2 = nisa.tensor_tensor(t, t, op=nl.multiply)                         # VectorE
        x3 = nisa.tensor_tensor(x2, t, op=nl.multiply)                        # VectorE
        c = nisa.tensor_scalar(x3, nl.multiply, 0.044715, engine=nisa.vector_engine)
        inner = nisa.tensor_tensor(c, t, op=nl.add)                           # VectorE
        th = nisa.activation(op=nl.tanh, data=inner, scale=SQRT_2_OVER_PI)   # ScalarE
        h = nisa.tensor_scalar(th, nl.add, 1.0, op1=nl.multiply, operand1=0.5,
                               engine=nisa.vector_engine)                     # VectorE
        y = nisa.tensor_tensor(h, t, op=nl.multiply)                          # VectorE
        nl.store(out[i * 128:(i + 1) * 128, 0:cols], value=y)
    return out


@nki.jit
def gelu_fused(x):
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(rows // 128):
        t = nl.load(x[i * 128:(i + 1) * 128, 0:cols])
        y = nisa.activation(op=nl.gelu_apprx_tanh, data=t)                   # ScalarE, one instruction
        nl.store(out[i * 128:(i + 1) * 128, 0:cols], value=y)
    return out
