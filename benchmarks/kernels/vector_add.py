"""Vector addition written three ways, for the fixed-cost cases of benchmarks/perf_fidelity.py.

Written for this project after the structure a public course assignment describes (Stanford CS149
asst4, "Programming a Machine Learning Accelerator": a loop of per-chunk loads, one add, one store
per chunk; then the vector reshaped to 128 partitions and streamed in (128, free_dim) tiles). The
published student measurements of that structure on trn1 and trn2 are in
benchmarks/data/perf_corpus.csv; nothing of the assignment's code is copied here.

Inputs are the flat vectors reshaped by the caller: ``(M, 1)`` for the chunked kernel, ``(128, M/128)``
for the streamed one (each tile a column slice: 128 strided runs), ``(M/(128*f), 128, f)`` for the blocked
one (each tile one contiguous block of HBM).
"""
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def vector_add_chunked(a, b, row_chunk=1):
    """``row_chunk`` elements per step: each step loads a (row_chunk, 1) tile of each input."""
    m_total = a.shape[0]
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(m_total // row_chunk):
        lo, hi = m * row_chunk, (m + 1) * row_chunk
        x = nl.load(a[lo:hi, 0:1])
        y = nl.load(b[lo:hi, 0:1])
        nl.store(out[lo:hi, 0:1], value=nl.add(x, y))
    return out


@nki.jit
def vector_add_streamed(a, b, free_dim=2):
    """(128, free_dim) tiles: one DMA per input and one per output for 128 * free_dim elements."""
    parts, cols = a.shape
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(cols // free_dim):
        x = nl.ndarray((parts, free_dim), dtype=a.dtype, buffer=nl.sbuf)
        y = nl.ndarray((parts, free_dim), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(src=a[:, m * free_dim:(m + 1) * free_dim], dst=x)
        nisa.dma_copy(src=b[:, m * free_dim:(m + 1) * free_dim], dst=y)
        s = nisa.tensor_tensor(x, y, op=nl.add)
        nisa.dma_copy(src=s, dst=out[:, m * free_dim:(m + 1) * free_dim])
    return out


@nki.jit
def vector_add_blocked(a, b):
    """(128, f) tiles that are contiguous blocks of HBM: input shaped (tiles, 128, f)."""
    tiles, parts, free_dim = a.shape
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(tiles):
        x = nl.ndarray((parts, free_dim), dtype=a.dtype, buffer=nl.sbuf)
        y = nl.ndarray((parts, free_dim), dtype=a.dtype, buffer=nl.sbuf)
        x[...] = nl.load(a[m])
        y[...] = nl.load(b[m])
        nl.store(out[m], value=nl.add(x, y))
    return out
