"""``softmax_balanced`` of ``engines.py`` in today's standalone ``nki`` style (notebook 04).

What differs: every ISA call writes into a ``dst`` the kernel allocates, and the exponentials' sum is
an option of ``nisa.activation`` itself (``reduce_op``/``reduce_res`` with ``reduce_cmd=reset_reduce``:
the engine's accumulators start from zero for this instruction), where NKI 0.1 had a separate
``activation_reduce``. Written for accelopt_nb's teaching course.
"""
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def softmax_balanced(x):
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(rows // 128):
        t = nl.ndarray((128, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[i * 128:(i + 1) * 128, 0:cols])
        # VectorE: -max
        m = nl.ndarray((128, 1), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=m, op=nl.max, data=t, axis=1, negate=True, keepdims=True)
        # ScalarE: exp(x + (-max)), summed into s as it is written
        e = nl.ndarray((128, cols), dtype=x.dtype, buffer=nl.sbuf)
        s = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=e, op=nl.exp, data=t, bias=m, reduce_op=nl.add, reduce_res=s,
                        reduce_cmd=nisa.reduce_cmd.reset_reduce)
        # VectorE: scale
        r = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(dst=r, data=s)
        y = nl.ndarray((128, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=y, data=e, op0=nl.multiply, operand0=r, engine=nisa.vector_engine)
        nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, 0:cols], src=y)
    return out
