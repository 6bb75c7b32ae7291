"""Engine balance (notebook 04): a row softmax, y = exp(x - max) / sum(exp(x - max)), two ways.

``softmax_vector_heavy`` leaves VectorE four passes over each tile (max, subtract, sum, scale) and
ScalarE one (exp). ``softmax_balanced`` lets ScalarE subtract the max as its activation's bias and
add up the exponentials as it writes them (``nisa.activation_reduce``): ScalarE computes
func(scale * x + bias) and can reduce along the free dimension in the same instruction, leaving
VectorE two passes. Written for accelopt_nb's teaching course.
"""
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def softmax_vector_heavy(x):
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(rows // 128):
        t = nl.load(x[i * 128:(i + 1) * 128, 0:cols])
        # VectorE: max, subtract
        m = nisa.tensor_reduce(nl.max, t, axis=1, keepdims=True)
        d = nisa.tensor_scalar(t, nl.subtract, m, engine=nisa.vector_engine)
        # ScalarE: exp
        e = nisa.activation(op=nl.exp, data=d)
        # VectorE: sum, scale
        s = nisa.tensor_reduce(nl.add, e, axis=1, keepdims=True, dtype=nl.float32)
        r = nisa.reciprocal(s)
        y = nisa.tensor_scalar(e, nl.multiply, r, engine=nisa.vector_engine)
        nl.store(out[i * 128:(i + 1) * 128, 0:cols], value=y)
    return out


@nki.jit
def softmax_balanced(x):
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(rows // 128):
        t = nl.load(x[i * 128:(i + 1) * 128, 0:cols])
        # VectorE: -max
        m = nisa.tensor_reduce(nl.max, t, axis=1, keepdims=True, negate=True)
        # ScalarE: exp(x + (-max)), summed into s as it is written
        s = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        e = nisa.activation_reduce(op=nl.exp, data=t, bias=m,
                                   reduce_op=nl.add, reduce_res=s)
        # VectorE: scale
        r = nisa.reciprocal(s)
        y = nisa.tensor_scalar(e, nl.multiply, r, engine=nisa.vector_engine)
        nl.store(out[i * 128:(i + 1) * 128, 0:cols], value=y)
    return out
