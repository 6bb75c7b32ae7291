"""The first kernel of ``basics.py`` in today's standalone ``nki`` style: out = 2 * x + 1.

What differs from the NKI 0.1 style: ``import nki``; every ``nki.isa`` call writes into a ``dst``
the kernel allocated (its first argument) instead of returning a new tile; data moves with
``nisa.dma_copy(dst=..., src=...)``. Written for accelopt_nb's teaching course.
"""
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def scale_shift(x):
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(rows // 128):
        # HBM -> SBUF, into a tile the kernel allocated
        tile = nl.ndarray((128, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x[i * 128:(i + 1) * 128, 0:cols])
        # one engine instruction, writing into its dst
        y = nl.ndarray((128, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=y, data=tile, op0=nl.multiply, operand0=2.0,
                           op1=nl.add, operand1=1.0)
        # SBUF -> HBM
        nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, 0:cols], src=y)
    return out
