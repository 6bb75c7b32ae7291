"""Correctness checks on one kernel run: the paper's L2 test plus the checks the paper lacks.

* the paper's test: every output has the reference's shape and a whole-tensor relative L2 error
  below the tolerance (non-float outputs must match exactly);
* coverage: every output element was written (from the instruction stream's write regions, and
  from NaNs where the reference is finite: the simulator fills fresh tensors with NaN);
* precision: no float type narrower than the problem's inputs, decided from the dtypes the kernel
  actually used (the trace), not from a substring of its source.
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np

from accelopt_nb.taskfile import as_output_tuple, l2_relative_error

# Mantissa+exponent+sign bits of the float types a kernel can use; a smaller number is a lowering.
_FLOAT_BITS = {"float64": 64, "float32": 32, "float32r": 32, "tfloat32": 19, "bfloat16": 16,
               "float16": 16}


def float_bits(dtype_name: str) -> int | None:
    """Precision rank of a float dtype name (None for non-float types: ints, bools)."""
    name = str(dtype_name)
    if name in _FLOAT_BITS:
        return _FLOAT_BITS[name]
    for prefix, bits in (("float8", 8), ("float6", 6), ("float4", 4)):
        if name.startswith(prefix):
            return bits
    return None


def lowered_dtypes(used: Iterable[str], input_dtypes: Iterable[str]) -> list[str]:
    """Float dtypes in ``used`` less precise than the least precise float input."""
    in_bits = [b for b in (float_bits(d) for d in input_dtypes) if b is not None]
    if not in_bits:
        return []
    floor = min(in_bits)
    return sorted(d for d in set(used) if (float_bits(d) or floor) < floor)


def output_write_regions(trace: Any) -> list[tuple[str, tuple[int, ...], np.ndarray]]:
    """(name, shape, boxes) for every kernel output: the (n, 2, ndim) lo/hi boxes the trace wrote."""
    if trace is None:
        return []
    outputs = {tid: info for tid, info in trace.tensors.items() if info.kind == "output"}
    regions: dict[int, list] = {tid: [] for tid in outputs}
    for ins in trace.instructions:
        for region in ins.writes:
            if region.tensor in regions:
                regions[region.tensor].append((tuple(region.lo), tuple(region.hi)))
    return [(info.name, tuple(info.shape),
             np.asarray(regions[tid], dtype=np.int64).reshape(-1, 2, len(info.shape)))
            for tid, info in outputs.items()]


def unwritten_outputs(trace: Any) -> list[tuple[str, int, int]]:
    """(name, never-written elements, total elements) for every kernel output the trace shows
    partly unwritten."""
    return unwritten_regions(output_write_regions(trace))


def unwritten_regions(outputs: Iterable[tuple[str, tuple[int, ...], np.ndarray]]
                      ) -> list[tuple[str, int, int]]:
    """(name, never-written elements, total elements) for every output whose write regions
    ((n, 2, ndim) lo/hi boxes) leave elements unwritten. A box may over-cover a strided write, so
    this never reports a written element as unwritten."""
    report = []
    for name, shape, boxes in outputs:
        mask = np.zeros(shape, dtype=bool)
        for lo, hi in np.asarray(boxes, dtype=np.int64).reshape(-1, 2, len(shape)):
            mask[tuple(slice(int(a), int(b)) for a, b in zip(lo, hi))] = True
        missing = int(mask.size - np.count_nonzero(mask))
        if missing:
            report.append((name, missing, int(mask.size)))
    return report


def compare_outputs(actual: Sequence[Any], reference: Any, tolerance: float
                    ) -> tuple[bool, list[float | None], str | None]:
    """Compare transformed kernel outputs to the reference.

    Returns (passed, per-output relative L2 errors, reason for the first failure)."""
    ref = as_output_tuple(reference)
    if len(actual) != len(ref):
        return False, [], f"kernel produced {len(actual)} output(s); the reference has {len(ref)}"
    errors: list[float | None] = []
    reason: str | None = None
    for i, (a, r) in enumerate(zip(actual, ref)):
        a, r = np.asarray(a), np.asarray(r)
        if a.shape != r.shape:
            errors.append(None)
            reason = reason or f"output {i} has shape {a.shape}; the reference has {r.shape}"
            continue
        if not (np.issubdtype(r.dtype, np.floating) or np.issubdtype(r.dtype, np.complexfloating)):
            same = bool(np.array_equal(a, r))
            errors.append(0.0 if same else float("inf"))
            if not same:
                reason = reason or f"output {i} differs from the exact (non-float) reference"
            continue
        # In the outputs' own dtypes: a cast keeps NaN/inf as they are, and whole-tensor float64
        # copies cost more than the check (paper shapes: 50M elements); the L2 error casts by chunk.
        err = l2_relative_error(a, r)
        errors.append(err)
        # a non-finite kernel element makes the error infinite: only then look for where
        bad = (~np.isfinite(a) & np.isfinite(r)) if not np.isfinite(err) else None
        if bad is not None and bad.any():
            n_nan = int(np.count_nonzero(np.isnan(a) & bad))
            kind = "NaN" if n_nan == int(np.count_nonzero(bad)) else "NaN/inf"
            reason = reason or (f"output {i} has {int(np.count_nonzero(bad))} of {a.size} elements "
                                f"{kind} where the reference is finite (unwritten or NaN-producing)")
        elif not err < tolerance:
            reason = reason or (f"output {i}: relative L2 error {err:.3g} is not below the "
                                f"tolerance {tolerance:.3g}")
    return reason is None, errors, reason
