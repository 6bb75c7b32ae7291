"""silu staging two row blocks at once."""
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa


@nki.jit
def kernel(x):
    P, J, N = x.shape
    out = nl.ndarray((P, J, N), dtype=x.dtype, buffer=nl.shared_hbm)
    both = nl.ndarray((2 * P, N), dtype=x.dtype, buffer=nl.sbuf)
    for j in nl.affine_range(J):
        t = nl.load(x[:, j, :])
        nl.store(out[:, j, :], value=nisa.activation(op=nl.silu, data=t))
    return out
