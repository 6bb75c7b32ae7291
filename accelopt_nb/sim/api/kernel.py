"""Kernels and launches: ``@nki.jit`` kernels, ``simulate``, and what goes in and out of a launch.

A launch is one :class:`~accelopt_nb.sim.core.runtime.Runtime`: inputs become HBM tensors (borrowed, copied
before the kernel first writes them), the kernel runs (its whole SPMD grid, see ``api.launch``), errors are
located at the kernel line that raised them, and the outputs come back as arrays with the trace. This is where
the wings meet: the replay wing is attached to the runtime here when loops replay.
"""
from __future__ import annotations

import functools
import linecache
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
from threadpoolctl import ThreadpoolController

from accelopt_nb.errors import KernelError
from accelopt_nb.pyutil import gc_paused
from accelopt_nb.sim.api.launch import Grid, apply_directives, parse_grid, run_grid
from accelopt_nb.sim.core import dtypes as _dt
from accelopt_nb.sim.core import failures, onchip
from accelopt_nb.sim.core import program as _program
from accelopt_nb.sim.core.context import active, running
from accelopt_nb.sim.core.hooks import Observer
from accelopt_nb.sim.core.indexing import IndexExpr, Mask, _Grid
from accelopt_nb.sim.core.memory import paint_unwritten
from accelopt_nb.sim.core.runtime import LoopIndex, Runtime, SimOptions
from accelopt_nb.sim.core.tensor import Tensor
from accelopt_nb.sim.core.views import View, unknown_attribute
from accelopt_nb.sim.replay.state import attach as attach_replay
from accelopt_nb.sim.trace import Trace

_program.register(tensor=Tensor, view=View, index=IndexExpr, mask=Mask, grid=_Grid, loop_index=LoopIndex)  # core/program.py

FILES_KEY = "__accelopt_kernel_files__"   # module global: the files of a kernel and its sibling modules (loader)


@dataclass
class SimResult:
    """Outputs and instruction stream of one simulated launch (trace-only: the outputs are read-only zeros)."""

    outputs: tuple[np.ndarray, ...]
    trace: Trace
    log: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def output(self) -> np.ndarray:
        return self.outputs[0]


class Kernel:
    """An ``@nki.jit`` kernel. Calling it with NumPy arrays simulates it; ``kernel[g](...)`` is SPMD.

    ``host=True`` marks a plain function (not decorated): it runs as host code, so a
    ``kernel[grid](...)`` call inside it launches that kernel's whole grid.
    """

    def __init__(self, fn: Callable, grid: Any = (), mode: str = "auto", host: bool = False,
                 options: dict | None = None, on_result: Callable | None = None) -> None:
        self.fn = fn
        self.grid_spec = grid if isinstance(grid, Grid) else parse_grid(tuple(grid)) if grid else Grid(())
        self.mode = mode
        self.host = host
        self.options = dict(options or {})    # compile/launch options (nki.jit, nki.baremetal(...), ...)
        self.on_result = on_result            # nki.benchmark / nki.profile: what to do with each launch
        self.benchmark_result: Any = None
        self.__name__ = getattr(fn, "__name__", "kernel")
        self.__doc__ = getattr(fn, "__doc__", None)
        self.__wrapped__ = fn

    @property
    def grid(self) -> tuple[int, ...]:
        return self.grid_spec.shape

    def __getitem__(self, grid: Any) -> "Kernel":
        return Kernel(self.fn, parse_grid(grid), self.mode, options=self.options, on_result=self.on_result)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        rt = active()
        if rt is not None and rt.in_kernel:  # a kernel calling a sub-kernel: just run it in the same launch
            return self.fn(*args, **kwargs)
        if rt is not None:                   # host code launching a kernel: the whole grid runs
            args = [_as_input(rt, a, i) for i, a in enumerate(args)]
            kwargs = {k: _as_input(rt, v, k) for k, v in kwargs.items()}
            return run_grid(rt, self.fn, args, kwargs, self.grid_spec)
        result = simulate(self, *args, **kwargs)
        if self.on_result is not None:
            self.on_result(self, result)
        return result.outputs[0] if len(result.outputs) == 1 else result.outputs


def jit(func: Callable | None = None, *, mode: str = "auto", **kwargs: Any) -> Any:
    """``@nki.jit`` or ``@nki.jit(**compile_options)``: the options are kept on the kernel, not applied."""
    if func is None:
        return lambda f: Kernel(getattr(f, "fn", f), mode=mode, options=kwargs)
    return Kernel(getattr(func, "fn", func), mode=mode, options=kwargs)


def _kernel_files(kernel: Kernel) -> set[str]:
    code = getattr(kernel.fn, "__code__", None)
    files = {code.co_filename} if code is not None else set()
    module_globals = getattr(kernel.fn, "__globals__", {})
    if module_globals.get("__file__"):
        files.add(module_globals["__file__"])
    return files | module_globals.get(FILES_KEY, set())


@functools.cache
def _blas() -> ThreadpoolController:
    """The process's BLAS thread pools, found once: finding them scans every loaded library (0.45 ms, half
    of a one-tile simulation measured); NumPy's own BLAS, the one kernels use, is loaded with NumPy."""
    return ThreadpoolController()


def simulate(kernel: Kernel | Callable, *inputs: Any, options: SimOptions | None = None, grid: Sequence[Any] | None = None,
             **kwargs: Any) -> SimResult:
    """Run a kernel on NumPy inputs. Kernel errors raise :class:`KernelError` with file and line.

    A plain function (not ``@nki.jit``) runs as host code: the kernels it calls with
    ``kernel[grid](...)`` run their whole grids, all in this one launch and trace.
    """
    if not isinstance(kernel, Kernel):
        kernel = Kernel(kernel, host=True)
    return _launch(kernel, inputs, kwargs, options, grid)


def _launch(kernel: Kernel, inputs: Sequence[Any], kwargs: dict[str, Any], options: SimOptions | None,
            grid: Sequence[Any] | None, calls: Observer | None = None) -> SimResult:
    """``simulate``; ``calls``: the observer of the launch's program (``Runtime.calls``, the program hash)."""
    outer = active()
    if outer is not None and outer.calls is not None:   # its own options, maybe with values: not the recorded program
        outer.calls.unrecordable("a launch inside a launch")
    options = options or SimOptions()
    launch_grid = parse_grid(tuple(grid)) if grid is not None else kernel.grid_spec
    rt = Runtime(options, kernel.__name__, _kernel_files(kernel))
    rt.calls = calls
    if options.loop_replay and options.record_trace:
        attach_replay(rt)   # the replay wing observes the launch (core.hooks)
    # per-tile BLAS calls are tiny: extra BLAS threads only add synchronization (5x slower measured)
    with running(rt), _blas().limit(limits=1, user_api="blas"), gc_paused(keeps=True):
        args = [_as_input(rt, a, i) for i, a in enumerate(inputs)]
        kw = {k: _as_input(rt, v, k) for k, v in kwargs.items()}
        try:
            if kernel.host and not launch_grid.shape:
                apply_directives(rt, kernel.fn)
                outputs = kernel.fn(*args, **kw)
            else:
                outputs = run_grid(rt, kernel.fn, args, kw, launch_grid)
        except KernelError as exc:
            raise exc.locate(*_innermost_kernel_frame(exc, rt.kernel_files))
        except RecursionError:
            raise
        except AssertionError as exc:
            if not _raised_in(exc, rt.kernel_files):
                raise
            file, line = _innermost_kernel_frame(exc, rt.kernel_files)
            raise KernelError(f"assertion failed{': ' + str(exc) if str(exc) else ''}", file=file, line=line,
                              rule="the kernel's own assertion about its inputs") from exc
        except failures.PYTHON_ERRORS as exc:
            location = _innermost_kernel_frame(exc, rt.kernel_files)
            missing = unknown_attribute(exc)   # tensor.<a name it lacks>
            if missing is not None:
                raise missing.locate(*location).with_traceback(exc.__traceback__) from None
            raise failures.python_error(exc, rt.kernel_files, location) from exc
        if rt.calls is not None:
            rt.calls.outputs(outputs)
        result_arrays = _collect_outputs(rt, outputs, kernel.__name__, inputs)
    onchip.give_back(rt.onchip)
    return SimResult(outputs=result_arrays, trace=rt.finish_trace(), log=rt.log, warnings=rt.warnings)


def _raised_in(exc: BaseException, files: set[str]) -> bool:
    """Whether the innermost frame of the traceback (where the exception was raised) is kernel code."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_code.co_filename in files


def _innermost_kernel_frame(exc: BaseException, files: set[str]) -> tuple[str | None, int | None]:
    tb = exc.__traceback__
    found: tuple[str | None, int | None] = (None, None)
    while tb is not None:
        if tb.tb_frame.f_code.co_filename in files:
            found = (tb.tb_frame.f_code.co_filename, tb.tb_lineno)
        tb = tb.tb_next
    return found


def _as_input(rt: Runtime, value: Any, label: Any) -> Any:
    if isinstance(value, np.ndarray):
        dtype = _dt.canonical(value.dtype)
        storage = _dt.storage(dtype)
        borrowed = value.dtype == storage and value.flags.c_contiguous
        if rt.options.trace_only:
            data = None
        elif borrowed:  # read in place; the tensor copies it before a kernel writes into it
            data = value.view()
            data.flags.writeable = False
        else:
            data = np.ascontiguousarray(value.astype(storage))
        return Tensor(rt, value.shape, dtype, "hbm", "input", name=f"input_{label}", data=data, written=True,
                      borrowed=borrowed)
    if hasattr(value, "numpy") and callable(value.numpy):  # torch tensors
        return _as_input(rt, np.asarray(value.numpy()), label)
    return value


def _collect_outputs(rt: Runtime, outputs: Any, name: str, inputs: Sequence[Any]) -> tuple[np.ndarray, ...]:
    if outputs is None:
        raise KernelError(f"kernel '{name}' returned nothing; NKI kernels return their output tensors "
                          "(allocated with buffer=nl.shared_hbm)", rule="kernel outputs are returned HBM tensors")
    items = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
    arrays = []
    for i, t in enumerate(items):
        if not isinstance(t, Tensor) or t.buffer != "hbm":
            where = "an on-chip tile" if isinstance(t, Tensor) else type(t).__name__
            raise KernelError(f"kernel output {i} is {where}; outputs must be HBM tensors allocated with "
                              "buffer=nl.shared_hbm and written with nl.store",
                              rule="kernel inputs and outputs live in HBM")
        if rt.options.trace_only or t._data is None:
            # no values: read-only zeros that take no memory (an output of 48 MB cost a pass to clear)
            arrays.append(np.broadcast_to(np.zeros((), dtype=_dt.storage(t.dtype)), t.shape))
            continue
        if t.kind == "internal":
            t.kind = "output"
        if rt.options.record_trace and t.id in rt.trace.tensors:
            rt.trace.tensors[t.id].kind = "output" if t.kind != "input" else "input"
        # the launch's memory is discarded afterwards: hand the output buffer over without a copy.
        # Unwritten elements hold the NaN fill (painted now: output memory is not filled up front), so
        # coverage checks see them.
        t.own()  # an input returned as an output must not be the caller's array
        paint_unwritten(t)
        arrays.append(t._data)
    return tuple(arrays)


def program_fingerprint(kernel: Kernel | Callable, *inputs: Any, hw: str | None = None,
                        loop_replay: bool = True) -> tuple[str | None, str]:
    """The hash of the program ``kernel`` runs on inputs of these shapes and dtypes (see :mod:`..core.program`)
    and what it covered, or ``(None, why not)``: equal hashes mean equal outputs for every input of these shapes.

    One trace-only launch; with ``loop_replay`` (the default) the iterations replay extrapolates are hashed from
    their probes' records and step (the same hash as running every iteration, ``loop_replay=False``)."""
    if not isinstance(kernel, Kernel):
        kernel = Kernel(kernel, host=True)
    files = sorted(_kernel_files(kernel))
    sources = {}
    for f in files:
        lines = linecache.getlines(f)   # the loader keeps every kernel file's source there (also for source=)
        if not lines:
            return None, f"cannot read the kernel file {f}"
        sources[f] = "".join(lines)
    why = _program.source_refusal(sources)
    if why is not None:
        return None, why
    rec = _program.Recorder()
    rec.put(("inputs", tuple((str(np.asarray(a).dtype), np.shape(a)) for a in inputs), hw))
    try:
        res = _launch(kernel, inputs, {}, SimOptions(trace_only=True, loop_replay=loop_replay, hw=hw), None, calls=rec)
    except Exception as exc:   # noqa: BLE001 - a kernel that fails trace-only has no program to share
        return None, f"the trace-only launch failed: {type(exc).__name__}"
    trace = res.trace
    rec.put(("launch", tuple(trace.grid), trace.num_cores, tuple(sorted(trace.program_cores.items())),
             len(trace.instructions)))
    if trace.skip_middle_end:   # the same calls reach the backend differently (perf_model.md §3d)
        rec.put(("skip_middle_end",))
    if rec.reason is not None:
        return None, rec.reason
    return rec.digest.hexdigest(), f"{rec.calls} calls, {len(trace.instructions)} instructions"
