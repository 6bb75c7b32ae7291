"""``colmax_double`` of ``loops.py`` in today's standalone ``nki`` style (notebook 04).

NKI 0.2 removed block dimensions (``nl.par_dim`` not first): the two tile buffers are a Python
list of two tiles, and the loop runs as ordinary Python, so ``i % 2`` picks one. Written for
accelopt_nb's teaching course.
"""
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def colmax_double(x):
    rows, cols = x.shape
    n = rows // 128
    out = nl.ndarray((128, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    best = nl.ndarray((128, cols), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=best, src=x[0:128, 0:cols])
    bufs = [nl.ndarray((128, cols), dtype=x.dtype, buffer=nl.sbuf) for _ in range(2)]
    nisa.dma_copy(dst=bufs[1], src=x[128:256, 0:cols])
    for i in nl.sequential_range(1, n - 1):
        # prefetch the next tile into the other buffer
        nisa.dma_copy(dst=bufs[(i + 1) % 2], src=x[(i + 1) * 128:(i + 2) * 128, 0:cols])
        nisa.tensor_tensor(dst=best, data1=best, data2=bufs[i % 2], op=nl.maximum)
    nisa.tensor_tensor(dst=best, data1=best, data2=bufs[(n - 1) % 2], op=nl.maximum)
    nisa.dma_copy(dst=out, src=best)
    return out
