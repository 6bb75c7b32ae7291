"""Loop kinds and double buffering, in the NKI 0.1 style (notebook 04). Written for accelopt_nb's course.

* ``swish_affine`` / ``swish_sequential``: the same independent per-tile work, y = x * sigmoid(x),
  under ``nl.affine_range`` (iterations may overlap) and ``nl.sequential_range`` (they may not);
* ``colmax_single`` / ``colmax_double``: a loop-carried reduction (the running maximum of
  128-row tiles), which needs ``sequential_range``; the second loads the next tile while the
  engines work on the current one (double buffering, written by hand).

x: (T * 128, F), float32.
"""
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def swish_affine(x):
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(rows // 128):
        t = nl.load(x[i * 128:(i + 1) * 128, 0:cols])
        s = nisa.activation(op=nl.sigmoid, data=t)     # ScalarE
        y = nisa.tensor_tensor(t, s, op=nl.multiply)    # VectorE
        nl.store(out[i * 128:(i + 1) * 128, 0:cols], value=y)
    return out


@nki.jit
def swish_sequential(x):
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.sequential_range(rows // 128):         # the only change
        t = nl.load(x[i * 128:(i + 1) * 128, 0:cols])
        s = nisa.activation(op=nl.sigmoid, data=t)
        y = nisa.tensor_tensor(t, s, op=nl.multiply)
        nl.store(out[i * 128:(i + 1) * 128, 0:cols], value=y)
    return out


@nki.jit
def colmax_single(x):
    """best[p, f] = max over tiles i of x[i*128 + p, f]; each iteration reads the last one's best."""
    rows, cols = x.shape
    out = nl.ndarray((128, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    best = nl.load(x[0:128, 0:cols])
    for i in nl.sequential_range(1, rows // 128):
        # one buffer, reused by every iteration
        t = nl.load(x[i * 128:(i + 1) * 128, 0:cols])
        best[0:128, 0:cols] = nisa.tensor_tensor(best, t, op=nl.maximum)
    nl.store(out, value=best)
    return out


@nki.jit
def colmax_double(x):
    """colmax_single with two tile buffers: tile i + 1 loads while tile i is compared."""
    rows, cols = x.shape
    n = rows // 128
    out = nl.ndarray((128, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    best = nl.load(x[0:128, 0:cols])
    buf = nl.ndarray((2, nl.par_dim(128), cols), dtype=x.dtype, buffer=nl.sbuf)
    buf[1] = nl.load(x[128:256, 0:cols])
    for i in nl.sequential_range(1, n - 1):
        # prefetch the next tile into the other buffer
        buf[(i + 1) % 2] = nl.load(x[(i + 1) * 128:(i + 2) * 128, 0:cols])
        best[0:128, 0:cols] = nisa.tensor_tensor(best, buf[i % 2], op=nl.maximum)
    best[0:128, 0:cols] = nisa.tensor_tensor(best, buf[(n - 1) % 2], op=nl.maximum)
    nl.store(out, value=best)
    return out
