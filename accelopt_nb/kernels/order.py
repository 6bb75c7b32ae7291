"""Program order, which the compiler may change and the performance model does not (notebook 08).

Both kernels compute the same values: per tile, four rounds of a VectorE -> ScalarE -> VectorE chain
plus an independent VectorE instruction. ``chain_first`` writes the dependent instruction first, so
VectorE waits for ScalarE before it reaches the independent one; ``independent_first`` writes the
independent one first, so VectorE has work while ScalarE runs. A list-scheduling compiler can turn the
first into the second; the model runs each engine's instructions in the order written.
Written for accelopt_nb's teaching course.
"""
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

ROUNDS = 4


@nki.jit
def chain_first(x):
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(rows // 128):
        t = nl.load(x[i * 128:(i + 1) * 128, 0:cols])
        acc = t
        for r in nl.static_range(ROUNDS):
            a = nisa.tensor_scalar(acc, nl.multiply, 0.5, engine=nisa.vector_engine)
            e = nisa.activation(op=nl.tanh, data=a)                  # ScalarE, waits for a
            c = nisa.tensor_tensor(e, t, op=nl.multiply)              # waits for e
            d = nisa.tensor_scalar(t, nl.add, 1.0, engine=nisa.vector_engine)   # needs only t
            acc = nisa.tensor_tensor(c, d, op=nl.add)
        nl.store(out[i * 128:(i + 1) * 128, 0:cols], value=acc)
    return out


@nki.jit
def independent_first(x):
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(rows // 128):
        t = nl.load(x[i * 128:(i + 1) * 128, 0:cols])
        acc = t
        for r in nl.static_range(ROUNDS):
            a = nisa.tensor_scalar(acc, nl.multiply, 0.5, engine=nisa.vector_engine)
            e = nisa.activation(op=nl.tanh, data=a)
            d = nisa.tensor_scalar(t, nl.add, 1.0, engine=nisa.vector_engine)   # moved up
            c = nisa.tensor_tensor(e, t, op=nl.multiply)
            acc = nisa.tensor_tensor(c, d, op=nl.add)
        nl.store(out[i * 128:(i + 1) * 128, 0:cols], value=acc)
    return out
