"""A first kernel in the NKI 0.1 style (``neuronxcc.nki``): out = 2 * x + 1, one 128-row tile at a time.

The same kernel in today's standalone ``nki`` style is ``basics_nki.py``; notebook 01 shows them
side by side. Written for accelopt_nb's teaching course.
"""
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def scale_shift(x):
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(rows // 128):
        # HBM -> SBUF: returns a new tile
        tile = nl.load(x[i * 128:(i + 1) * 128, 0:cols])
        # one engine instruction: returns a new tile
        y = nisa.tensor_scalar(tile, nl.multiply, 2.0, op1=nl.add, operand1=1.0)
        # SBUF -> HBM
        nl.store(out[i * 128:(i + 1) * 128, 0:cols], value=y)
    return out
