"""DMA transfer efficiency (notebook 02): the same copy, HBM -> SBUF -> HBM, in tiles of ``width`` columns.

A transfer of ``width`` float32 values per partition moves ``4 * width`` bytes per partition; the
DMA engines reach their bandwidth only with a few KiB per partition (and all 128 partitions, 8
per engine). Written for accelopt_nb's teaching course.
"""
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def copy_tiles(x, width=2048):
    parts, cols = x.shape
    out = nl.ndarray((parts, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    for j in nl.affine_range(cols // width):
        t = nl.load(x[0:parts, j * width:(j + 1) * width])
        nl.store(out[0:parts, j * width:(j + 1) * width], value=t)
    return out
