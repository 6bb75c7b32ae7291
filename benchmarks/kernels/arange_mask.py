"""A compiler-style NKI kernel: every access an nl.arange expression, ragged tiles masked on both axes.

out = x * sigmoid(g) + r for fp32 (M, N) inputs whose sizes need not be multiples of the tile
(128 x 512). Like compiler output, it keeps every intermediate in a block-indexed SBUF buffer and
predicates each instruction with the tile's mask. ``benchmarks/sim_speed.py`` times it against the
same math in NumPy.
"""
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

TP = 128   # partitions per tile
TF = 512   # free elements per tile


@nki.jit
def kernel(x, g, r):
    M, N = x.shape
    MT, NT = (M + TP - 1) // TP, (N + TF - 1) // TF
    out = nl.ndarray((M, N), dtype=x.dtype, buffer=nl.shared_hbm)
    xs = nl.ndarray((MT, NT, nl.par_dim(TP), TF), dtype=np.float32, buffer=nl.sbuf)
    gs = nl.ndarray((MT, NT, nl.par_dim(TP), TF), dtype=np.float32, buffer=nl.sbuf)
    rs = nl.ndarray((MT, NT, nl.par_dim(TP), TF), dtype=np.float32, buffer=nl.sbuf)
    sg = nl.ndarray((MT, NT, nl.par_dim(TP), TF), dtype=np.float32, buffer=nl.sbuf)
    xg = nl.ndarray((MT, NT, nl.par_dim(TP), TF), dtype=np.float32, buffer=nl.sbuf)
    ys = nl.ndarray((MT, NT, nl.par_dim(TP), TF), dtype=np.float32, buffer=nl.sbuf)
    for i in nl.affine_range(MT):
        for j in nl.affine_range(NT):
            inside = (TP * i + nl.arange(TP)[:, None] < M) & (TF * j + nl.arange(TF)[None, :] < N)
            xs[i, j, nl.arange(TP)[:, None], nl.arange(TF)[None, :]] = nl.load(
                x[TP * i + nl.arange(TP)[:, None], TF * j + nl.arange(TF)[None, :]], mask=inside)
            gs[i, j, nl.arange(TP)[:, None], nl.arange(TF)[None, :]] = nl.load(
                g[TP * i + nl.arange(TP)[:, None], TF * j + nl.arange(TF)[None, :]], mask=inside)
            rs[i, j, nl.arange(TP)[:, None], nl.arange(TF)[None, :]] = nl.load(
                r[TP * i + nl.arange(TP)[:, None], TF * j + nl.arange(TF)[None, :]], mask=inside)
            sg[i, j, nl.arange(TP)[:, None], nl.arange(TF)[None, :]] = nisa.activation(
                op=nl.sigmoid, data=gs[i, j, nl.arange(TP)[:, None], nl.arange(TF)[None, :]], mask=inside)
            xg[i, j, nl.arange(TP)[:, None], nl.arange(TF)[None, :]] = nl.multiply(
                xs[i, j, nl.arange(TP)[:, None], nl.arange(TF)[None, :]],
                sg[i, j, nl.arange(TP)[:, None], nl.arange(TF)[None, :]], mask=inside)
            ys[i, j, nl.arange(TP)[:, None], nl.arange(TF)[None, :]] = nl.add(
                xg[i, j, nl.arange(TP)[:, None], nl.arange(TF)[None, :]],
                rs[i, j, nl.arange(TP)[:, None], nl.arange(TF)[None, :]], mask=inside)
            nl.store(out[TP * i + nl.arange(TP)[:, None], TF * j + nl.arange(TF)[None, :]],
                     value=ys[i, j, nl.arange(TP)[:, None], nl.arange(TF)[None, :]], mask=inside)
    return out

