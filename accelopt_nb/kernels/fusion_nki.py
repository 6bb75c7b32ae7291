"""``fusion.py``'s GELU kernels in today's standalone ``nki`` style (notebook 04).

What differs: each tile is allocated, then loaded with ``nisa.dma_copy``; every ISA call writes into a
``dst`` the kernel allocates; ``tensor_scalar`` names its operators and operands ``op0``/``operand0``,
``op1``/``operand1``. The instructions, and so the time, are the same. Written for accelopt_nb's
teaching course.
"""
import nki
import nki.isa as nisa
import nki.language as nl

SQRT_2_OVER_PI = 0.7978845608028654


@nki.jit
def gelu_unfused(x):
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(rows // 128):
        t = nl.ndarray((128, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[i * 128:(i + 1) * 128, 0:cols])
        x2 = nl.ndarray((128, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=x2, data1=t, data2=t, op=nl.multiply)                      # VectorE
        x3 = nl.ndarray((128, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=x3, data1=x2, data2=t, op=nl.multiply)                     # VectorE
        c = nl.ndarray((128, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=c, data=x3, op0=nl.multiply, operand0=0.044715,
                           engine=nisa.vector_engine)                                     # VectorE
        inner = nl.ndarray((128, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=inner, data1=c, data2=t, op=nl.add)                        # VectorE
        th = nl.ndarray((128, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.activation(dst=th, op=nl.tanh, data=inner, scale=SQRT_2_OVER_PI)            # ScalarE
        h = nl.ndarray((128, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=h, data=th, op0=nl.add, operand0=1.0, op1=nl.multiply, operand1=0.5,
                           engine=nisa.vector_engine)                                     # VectorE
        y = nl.ndarray((128, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=y, data1=h, data2=t, op=nl.multiply)                       # VectorE
        nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, 0:cols], src=y)
    return out


@nki.jit
def gelu_fused(x):
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(rows // 128):
        t = nl.ndarray((128, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[i * 128:(i + 1) * 128, 0:cols])
        y = nl.ndarray((128, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.activation(dst=y, op=nl.gelu_apprx_tanh, data=t)                # ScalarE, one instruction
        nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, 0:cols], src=y)
    return out
