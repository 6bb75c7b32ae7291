"""Simulation state for one kernel launch: options, loops, SPMD ids, errors and the trace.

NKI APIs find the running simulation through :func:`current` (:mod:`accelopt_nb.sim.core.context`); outside a
simulation they raise a clear error instead of silently doing NumPy math.
"""
from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterator

from accelopt_nb import hwfiles
from accelopt_nb.errors import KernelError, NKIRuleError
from accelopt_nb.sim.core import onchip
from accelopt_nb.sim.core.context import active, current, running
from accelopt_nb.sim.core.hooks import Observer
from accelopt_nb.sim.core.prims import BOOKS, primitive
from accelopt_nb.sim.trace import Instruction, Region, TensorInfo, Trace


@dataclass
class SimOptions:
    """How a kernel is simulated.

    trace_only: skip arithmetic (and data-dependent checks); only shapes and the instruction
        stream are computed. For fast profiling of large shapes.
    affine_write_conflicts: what to do when different affine_range iterations assign the same
        location: "error" (default), "warn" or "ignore".
    check_uninitialized: raise when a kernel output is computed from never-written memory.
    record_trace: keep the instruction stream (turn off for pure functional runs).
    fast_indexing: address affine ``nl.arange`` accesses as slices (through a plan per key structure),
        check loop-carried writes on a log of written boxes, keep new buffers' validity as written boxes,
        and fill unwritten on-chip memory lazily (same values, trace and errors as the general
        gather/stamp/fill path, which ``False`` forces: for tests and side-by-side timing).
    loop_replay: run a loop's first iterations and extrapolate the others where that provably gives the
        same trace (``accelopt_nb.sim.replay.loops``) and, with values, the same memory
        (``accelopt_nb.sim.replay.values``);
        ``False`` runs every iteration.
    hw: the target hardware (``"trn1"``, ``"trn2"``, a hardware YAML path or config; its home is the hardware
        registry, ``accelopt_nb/perf/hw``). Semantics that differ by NeuronCore generation (``nc_matmul``'s
        transpose mode) and API availability (calls documented for one generation only) follow it. ``None``
        (the default): an unknown target, every generation's calls are accepted (docs/nki_coverage.md).
    """

    trace_only: bool = False
    affine_write_conflicts: str = "error"
    check_uninitialized: bool = True
    record_trace: bool = True
    fast_indexing: bool = True
    loop_replay: bool = True
    hw: Any = None

    def __post_init__(self) -> None:
        if self.affine_write_conflicts not in ("error", "warn", "ignore"):
            raise ValueError("affine_write_conflicts must be 'error', 'warn' or 'ignore'")
        hwfiles.target(self.hw)    # an unknown name fails here, not inside the kernel

    @property
    def target(self) -> hwfiles.Target | None:
        """The target's name and NeuronCore generation (None: unknown)."""
        return hwfiles.target(self.hw)


@dataclass
class LoopFrame:
    uid: int
    kind: str
    iteration: int = -1
    inst_epoch: int = 0     # epoch at the loop instance's first iteration
    iter_epoch: int = 0     # epoch at the current iteration's start
    start: int = 0          # the first iteration's value (nl.loop_reduce restarts there)
    step: int = 1           # the range's step and length: an iteration's position is (iteration - start) // step
    count: int = 0


class LoopIndex(int):
    """A loop variable: an int that remembers its loop, so ``loop_indices=[i]`` can name the loop."""

    frame: LoopFrame


class Runtime:
    """Everything mutable about one simulated kernel launch."""

    def __init__(self, options: SimOptions, kernel_name: str, kernel_files: set[str]) -> None:
        self.options = options
        self.target = options.target         # the hardware generation simulated (None: unknown, permissive)
        self.kernel_files = kernel_files
        self.trace = Trace(kernel_name=kernel_name, trace_only=options.trace_only)
        self.loops: list[LoopFrame] = []
        self.loop_key: tuple[tuple[int, str, int], ...] = ()
        self.epoch = 0
        self._next_uid = 1
        self._next_tensor = 1
        self.program_id: tuple[int, ...] = ()
        self.grid: tuple[int, ...] = ()
        self.shared_hbm: list[Any] = []      # shared_hbm tensors, matched by creation order
        self.shared_hbm_cursor = 0
        self.in_kernel = False               # False while a host function (not an @nki.jit kernel) runs
        self.num_cores = 1                   # physical NeuronCores of the current launch (nl.nc)
        self.force_auto_alloc = False        # @nki.compiler.force_auto_alloc: explicit placements ignored
        self.log: list[str] = []
        self.warnings: list[str] = []
        self.warned_once: set[tuple] = set()   # what a warning given once per kernel line has been given for
        self.loop_reduce_state: dict[tuple, Any] = {}   # nl.loop_reduce accumulators by call site and loop nest
        self.pending_reduction: Any = None   # (result, how to reduce it into a destination) of the last loop_reduce
        self.deferred: Any = None            # the result tile whose values are not computed yet (memory.defer)
        self.rng: Any = None                 # nl.rand / nl.dropout's generator (seeded per launch: language._rng)
        self.engine_regs: dict[str, Any] = {}   # an engine's 128 accumulation registers (reduce_cmd), by engine
        self.hidden: dict[int, TensorInfo] = {}     # result tiles taken out of the trace (hide_result), by id
        self.onchip = onchip.Launch()        # the on-chip buffers' memory, kept for the next launch
        # nl.no_reorder blocks (enter_no_reorder): nesting depth, the open block's identity, and the books that
        # number them (sites in order of first entry; entries per site within one loop iteration)
        self.no_reorder_depth = 0
        self.no_reorder: tuple[int, int, int] | None = None
        self.no_reorder_sites: dict[tuple, int] = {}
        self.no_reorder_entries: dict[tuple, int] = {}
        self.tensors_unsorted = False               # a hidden tile came back: trace.tensors leaves id order
        # the observer of the launch (the replay wing, when loops replay), and the same while it watches every
        # access (a loop probes) or also records every primitive call (probing with values): see core.hooks
        self.observer: Observer | None = None
        self.watching: Observer | None = None
        self.recording: Observer | None = None
        self.calls: Observer | None = None   # the observer of the launch's program (the program hash)

    # ---- identities --------------------------------------------------------------
    def new_tensor_id(self) -> int:
        tid = self._next_tensor
        self._next_tensor += 1
        return tid

    def new_uid(self) -> int:
        uid = self._next_uid
        self._next_uid += 1
        return uid

    # ---- source locations --------------------------------------------------------
    def location(self) -> tuple[str | None, int | None]:
        """The innermost kernel-source frame on the Python stack."""
        frame = sys._getframe(1)
        files = self.kernel_files
        while frame is not None:
            if frame.f_code.co_filename in files:
                return frame.f_code.co_filename, frame.f_lineno
            frame = frame.f_back
        return None, None

    def rule_error(self, api: str, message: str, rule: str, cls: type[KernelError] = NKIRuleError) -> KernelError:
        file, line = self.location()
        return cls(message, api=api, file=file, line=line, rule=rule)

    def warn(self, message: str) -> None:
        file, line = self.location()
        text = f"{file or '<kernel>'}:{line}: {message}"
        self.warnings.append(text)
        warnings.warn(text, stacklevel=3)

    # ---- loops -------------------------------------------------------------------
    def loop(self, kind: str, values: range, no_reorder: bool = False) -> Iterator[int]:
        """A kernel loop over ``values``; ``no_reorder``: the whole loop is one no_reorder block (the NKI 0.1
        form ``sequential_range(..., directives=nki.compiler.no_reorder())``)."""
        if no_reorder:
            self.enter_no_reorder()
        frame = LoopFrame(uid=self.new_uid(), kind=kind, start=values[0] if len(values) else 0, step=values.step,
                          count=len(values))
        self.loops.append(frame)
        if self.calls is not None:
            self.calls.begin(kind, frame.start, frame.step, frame.count, no_reorder)
        if self.recording is not None:
            self.recording.record(loop_begin, (), {"kind": kind, "start": frame.start, "step": frame.step,
                                                   "count": frame.count}, frame)
        try:
            observer = self.observer
            if observer is not None:
                # the frame whose `for` advances this generator
                yield from observer.loop(self, frame, values, sys._getframe(1))
            else:
                for i in values:
                    yield self.iterate(frame, i)
        finally:
            # generators may be closed out of order by `break`; remove this frame wherever it is
            if frame in self.loops:
                self.loops.remove(frame)
            self._refresh_loop_key()
            if self.recording is not None:
                self.recording.record(loop_end, (frame,), {}, None)
            if self.calls is not None:
                self.calls.end()
            if no_reorder:
                self.exit_no_reorder()

    def iterate(self, frame: LoopFrame, i: int, index: type[LoopIndex] | None = None) -> LoopIndex:
        """``enter_iteration``, recorded for value replay by the enclosing probing loops."""
        if self.calls is not None:
            self.calls.iteration(i)
        if self.recording is not None:
            self.recording.record(loop_iteration, (frame,), {"i": int(i)}, None)
        return self.enter_iteration(frame, i, index or LoopIndex)

    def enter_iteration(self, frame: LoopFrame, i: int, index: type[LoopIndex] = LoopIndex) -> LoopIndex:
        """Start iteration ``i`` of ``frame``: its epoch (affine loops) and loop key; the loop variable."""
        if frame.kind == "affine":
            self.epoch += 1
            frame.iter_epoch = self.epoch
            if not frame.inst_epoch:   # the instance's first iteration (epochs start at 1)
                frame.inst_epoch = self.epoch
        frame.iteration = i
        self._refresh_loop_key()
        idx = index(i)
        idx.frame = frame
        return idx

    def _refresh_loop_key(self) -> None:
        self.loop_key = tuple((f.uid, f.kind, f.iteration) for f in self.loops)

    def set_force_auto_alloc(self, on: bool) -> None:
        """The running kernel's ``force_auto_alloc`` directive (explicit placements ignored); the program
        observer sees it, since it changes the trace."""
        self.force_auto_alloc = on
        if self.calls is not None:
            self.calls.setting("force_auto_alloc", on)

    # ---- no_reorder blocks ---------------------------------------------------------
    def enter_no_reorder(self) -> None:
        """Open a ``no_reorder`` block. It is dynamically scoped (a nested block adds nothing): every instruction
        until the outermost block closes carries ``attrs["no_reorder"] = (site, depth, entry)``: the ``with``
        statement's ordinal, how many loops enclose the ``with`` (the block instance is also told apart by those
        loops' iterations, ``Instruction.loops[:depth]``) and which entry of that site within that iteration.
        None of it is a source line or a counter across iterations, so loop replay sees equal iterations."""
        self.no_reorder_depth += 1
        if self.calls is not None:
            self.calls.setting("no_reorder", self.no_reorder_depth)
        if self.no_reorder_depth == 1:
            site = self.no_reorder_sites.setdefault(self.location(), len(self.no_reorder_sites))
            key = (site, self.loop_key)
            entry = self.no_reorder_entries.get(key, 0)
            self.no_reorder_entries[key] = entry + 1
            self.no_reorder = (site, len(self.loop_key), entry)

    def exit_no_reorder(self) -> None:
        self.no_reorder_depth = max(self.no_reorder_depth - 1, 0)
        if self.calls is not None:
            self.calls.setting("no_reorder", self.no_reorder_depth)
        if self.no_reorder_depth == 0:
            self.no_reorder = None

    def affine_frames(self) -> list[LoopFrame]:
        return [f for f in self.loops if f.kind == "affine" and f.iteration >= 0]

    # ---- trace -------------------------------------------------------------------
    def register_tensor(self, info: TensorInfo) -> None:
        if self.options.record_trace:
            self.trace.tensors[info.id] = info

    def hide_result(self, tid: int) -> None:
        """A result tile whose instruction now writes its destination (``dst[...] = nl.exp(x)``): no instruction
        reads or writes the tile itself, so it is no allocation of the trace (the compiler never makes one).
        Replayed loops then build only the records that stay. A later access brings it back (``unhide``)."""
        info = self.trace.tensors.pop(tid, None)
        if info is not None:
            self.hidden[tid] = info

    def unhide(self, tid: int) -> None:
        info = self.hidden.pop(tid, None)
        if info is not None:
            self.trace.tensors[tid] = info
            self.tensors_unsorted = True

    def finish_trace(self) -> Trace:
        """The trace, its tensors in id (allocation) order whatever came back from hiding."""
        if self.tensors_unsorted:
            self.trace.tensors = dict(sorted(self.trace.tensors.items()))
            self.tensors_unsorted = False
        return self.trace

    def emit(self, engine: str, op: str, api: str, reads: tuple[Region, ...], writes: tuple[Region, ...],
             partitions: int, free_elems: int, in_dtypes: tuple[str, ...], out_dtype: str,
             accumulate: bool = False, attrs: dict | None = None) -> Instruction | None:
        if not self.options.record_trace:
            return None
        file, line = self.location()
        ins = Instruction(index=len(self.trace.instructions), engine=engine, op=op, api=api,
                          reads=reads, writes=writes, partitions=partitions, free_elems=free_elems,
                          in_dtypes=in_dtypes, out_dtype=out_dtype, accumulate=accumulate,
                          attrs=attrs or {}, loops=self.loop_key, file=file, line=line)
        if self.no_reorder is not None:
            ins.attrs = {**ins.attrs, "no_reorder": self.no_reorder}   # a fresh dict: attrs may be shared
        self.trace.instructions.append(ins)
        return ins


# ---- the loops' books, as value replay re-runs them (primitives: see core.prims) ----------------------------
@primitive(replay=BOOKS)
def loop_begin(*, kind: str, start: int, step: int, count: int) -> LoopFrame:
    rt = active()
    frame = LoopFrame(uid=0, kind=kind, start=start, step=step, count=count)
    rt.loops.append(frame)
    return frame


@primitive(replay=BOOKS)
def loop_iteration(frame: LoopFrame, *, i: int) -> None:
    active().enter_iteration(frame, i)


@primitive(replay=BOOKS)
def loop_end(frame: LoopFrame) -> None:
    rt = active()
    if frame in rt.loops:
        rt.loops.remove(frame)


@dataclass
class ParDim:
    """``nl.par_dim(n)``: marks the partition axis in a shape."""

    size: int

    def __int__(self) -> int:
        return self.size

    def __index__(self) -> int:
        return self.size


def par_dim(size: int) -> ParDim:
    return ParDim(int(size))


@dataclass
class Buffer:
    name: str
    on_chip: bool

    def __repr__(self) -> str:
        return f"nl.{self.name}"


sbuf = Buffer("sbuf", True)
psum = Buffer("psum", True)
hbm = Buffer("hbm", False)
private_hbm = Buffer("private_hbm", False)
shared_hbm = Buffer("shared_hbm", False)

__all__ = ["SimOptions", "Runtime", "LoopFrame", "LoopIndex", "current", "active", "running", "par_dim", "ParDim", "Buffer",
           "sbuf", "psum", "hbm", "private_hbm", "shared_hbm", "field"]


class NoReorder:
    """``with nl.no_reorder():`` / ``with nki.compiler.no_reorder():`` (also a loop directive): the compiler adds a
    dependency edge between every two instructions of the block (Neuron docs, "How to use the NKI scheduling
    APIs"), so they run one after another in program order. Values do not depend on it (the simulator computes in
    program order); the performance model chains the block's instructions (``perf/schedule.py``)."""

    def __enter__(self) -> "NoReorder":
        current().enter_no_reorder()
        return self

    def __exit__(self, *exc: Any) -> None:
        current().exit_no_reorder()
