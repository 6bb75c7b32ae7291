"""``neuronxcc.nki.compiler`` (explicit allocation, kernel decorators) and the hardware launchers
``nki.baremetal`` / ``nki.benchmark`` / ``nki.profile``, on the simulator.

Allocators return a ``buffer=`` value that behaves as ``nl.sbuf`` / ``nl.psum`` for the values and
pins the tensor: the trace records the placement (``TensorInfo.allocation``) and the performance
model never spills a pinned tensor (the compiler does not move explicitly allocated memory).

The decorators change only how neuronx-cc compiles, not what a kernel computes: they return the
kernel unchanged (``force_auto_alloc`` also drops the kernel's explicit placements from the trace).
``baremetal`` runs the kernel on the simulator; ``benchmark`` also attaches the performance model's
latency estimate as ``kernel.benchmark_result``; ``profile`` writes the estimated profile as JSON.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from accelopt_nb.errors import UnsupportedAPIError
from accelopt_nb.sim.api.kernel import Kernel
from accelopt_nb.sim.core.limits import PSUM_BANK_BYTES, PSUM_BANKS
from accelopt_nb.sim.core.runtime import NoReorder as _NoReorder


@dataclass(frozen=True)
class Allocation:
    """An explicit placement passed as ``buffer=``: ``name`` is the buffer it lives in."""

    name: str                         # "sbuf" | "psum" (what nl APIs see)
    kind: str                         # "alloc" | "mod_alloc" | "auto_alloc"
    params: tuple = ()                # the allocator's arguments, as (key, value) pairs
    func: Callable | None = field(default=None, compare=False)

    on_chip = True

    @property
    def pinned(self) -> bool:
        return self.kind != "auto_alloc"

    def trace_record(self) -> dict[str, Any] | None:
        """What the trace keeps (TensorInfo.allocation): None when the compiler places the tensor."""
        if not self.pinned:
            return None
        return {"kind": self.kind, "buffer": self.name, **dict(self.params)}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params)
        return f"nki.compiler.{self.name}.{self.kind}({args})"


def _ints(api: str, name: str, value: Any) -> tuple[int, ...]:
    items = value if isinstance(value, (tuple, list)) else (value,)
    try:
        out = tuple(int(v) for v in items)
    except (TypeError, ValueError):
        raise UnsupportedAPIError(f"{api}: {name} must be an int or a tuple of ints, got {value!r}", api=api) from None
    if any(v < 0 for v in out):
        raise UnsupportedAPIError(f"{api}: {name} must be non-negative, got {value!r}", api=api)
    return out


class _Space:
    """``nki.compiler.sbuf`` / ``nki.compiler.psum``: the allocator functions of one buffer."""

    def __init__(self, name: str) -> None:
        self.name = name

    def alloc(self, func: Callable) -> Allocation:
        """Placement by a function of the block index (returns partition and address per block)."""
        if not callable(func):
            raise UnsupportedAPIError(f"nki.compiler.{self.name}.alloc takes a function, got {type(func).__name__}",
                                      api=f"nki.compiler.{self.name}.alloc")
        return Allocation(self.name, "alloc", (), func)

    def auto_alloc(self) -> Allocation:
        return Allocation(self.name, "auto_alloc")

    def __repr__(self) -> str:
        return f"nki.compiler.{self.name}"


class _SbufSpace(_Space):
    def mod_alloc(self, *, base_addr: int, base_partition: int = 0, num_par_tiles=(), num_free_tiles=()) -> Allocation:
        """Blocks rotate modulo ``num_free_tiles`` physical tiles starting at byte ``base_addr``."""
        api = "nki.compiler.sbuf.mod_alloc"
        params = (("base_addr", _ints(api, "base_addr", base_addr)[0]),
                  ("base_partition", _ints(api, "base_partition", base_partition)[0]),
                  ("num_par_tiles", _ints(api, "num_par_tiles", num_par_tiles)),
                  ("num_free_tiles", _ints(api, "num_free_tiles", num_free_tiles)))
        return Allocation("sbuf", "mod_alloc", params)


class _PsumSpace(_Space):
    def mod_alloc(self, *, base_bank: int, base_addr: int = 0, base_partition: int = 0, num_bank_tiles=(),
                  num_par_tiles=(), num_free_tiles=()) -> Allocation:
        """Blocks rotate modulo ``num_bank_tiles`` PSUM banks starting at ``base_bank``."""
        api = "nki.compiler.psum.mod_alloc"
        bank = _ints(api, "base_bank", base_bank)[0]
        banks = _ints(api, "num_bank_tiles", num_bank_tiles)
        if bank >= PSUM_BANKS or bank + (banks[0] if banks else 1) > PSUM_BANKS:
            raise UnsupportedAPIError(f"{api}: banks {bank}..{bank + (banks[0] if banks else 1) - 1} do not exist "
                                      f"(PSUM has {PSUM_BANKS} banks of {PSUM_BANK_BYTES} bytes per partition)", api=api)
        params = (("base_bank", bank), ("base_addr", _ints(api, "base_addr", base_addr)[0]),
                  ("base_partition", _ints(api, "base_partition", base_partition)[0]),
                  ("num_bank_tiles", banks), ("num_par_tiles", _ints(api, "num_par_tiles", num_par_tiles)),
                  ("num_free_tiles", _ints(api, "num_free_tiles", num_free_tiles)))
        return Allocation("psum", "mod_alloc", params)


sbuf = _SbufSpace("sbuf")
psum = _PsumSpace("psum")


# ---- kernel decorators (compiler directives: no effect on values) ---------------------------------
def _directive(name: str, mark: str | None = None):
    def decorator(func=None, **kwargs):
        def apply(f):
            if mark is not None:
                target = getattr(f, "fn", f)    # a Kernel (decorator above @nki.jit) or the function
                setattr(target, mark, True)
            return f
        return apply if func is None else apply(func)
    decorator.__name__ = name
    decorator.__doc__ = f"nki.compiler.{name}: a neuronx-cc directive; the simulated kernel is unchanged."
    return decorator


skip_middle_end_transformations = _directive("skip_middle_end_transformations", mark="_nki_skip_middle_end")
enable_stack_allocator = _directive("enable_stack_allocator")
force_auto_alloc = _directive("force_auto_alloc", mark="_nki_force_auto_alloc")


def no_reorder() -> _NoReorder:
    """``with nki.compiler.no_reorder():``, or ``sequential_range(..., directives=no_reorder())``: the block (the
    loop) keeps program order; the performance model chains its instructions."""
    return _NoReorder()


# ---- hardware launchers ------------------------------------------------------------------------
def _launcher(name: str, on_result: Callable | None = None):
    """``@nki.<name>``, ``@nki.<name>(**options)`` or ``nki.<name>(kernel, **options)``: a kernel that
    is simulated when called (``on_result`` sees each launch's result)."""
    def decorator(kernel=None, **options):
        def wrap(k):
            base = k if isinstance(k, Kernel) else Kernel(k)
            return Kernel(base.fn, base.grid_spec, base.mode, options={**base.options, **options},
                          on_result=on_result)
        return wrap if kernel is None else wrap(kernel)
    decorator.__name__ = name
    decorator.__doc__ = f"nki.{name}: runs the kernel on the accelopt_nb simulator."
    return decorator


@dataclass
class NCLatency:
    """Latency of one launch in microseconds. The performance model is deterministic: every
    percentile is the same estimate."""

    latency_us: float

    def get_latency_percentile(self, percentile: float) -> float:
        return self.latency_us


@dataclass
class BenchmarkResult:
    nc_latency: NCLatency
    hw: str = "trn1"
    source: str = "accelopt_nb performance model estimate (not a measurement)"


def _estimate(result, options: dict):
    from accelopt_nb.perf import estimate
    return estimate(result.trace, hw=options.get("hw", "trn1"))


def _record_benchmark(kernel, result) -> None:
    prof = _estimate(result, kernel.options)
    kernel.benchmark_result = BenchmarkResult(NCLatency(prof.latency * 1e3), prof.hw)


def _write_profile(kernel, result) -> None:
    directory = kernel.options.get("working_directory")
    if directory is None:
        return
    prof = _estimate(result, kernel.options)
    name = kernel.options.get("save_trace_name") or f"{kernel.__name__}.ntff"
    path = Path(directory) / (Path(name).stem + ".profile.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(prof.to_dict(), indent=1, default=str))


baremetal = _launcher("baremetal")
benchmark = _launcher("benchmark", _record_benchmark)
profile = _launcher("profile", _write_profile)

__all__ = ["Allocation", "sbuf", "psum", "skip_middle_end_transformations", "enable_stack_allocator",
           "force_auto_alloc", "no_reorder", "baremetal", "benchmark", "profile", "BenchmarkResult", "NCLatency"]
