"""Loading and launching kernels written against ``neuronxcc.nki`` (NKI 0.1).

Kernel files run unchanged: while a kernel *module* executes, its ``import neuronxcc.nki...``
statements resolve to the simulator through a private ``__import__`` in the module's own
builtins. Nothing is put in ``sys.modules``, so a real ``neuronx-cc`` installation is never
shadowed. A frontend for the standalone ``nki`` package can be added the same way (a second
alias table) without touching the core.
"""
from __future__ import annotations

import builtins
import functools
import itertools
import linecache
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
from threadpoolctl import ThreadpoolController

from accelopt_nb.errors import KernelError, KernelLoadError, SimulatorBugError, UnsupportedAPIError
from accelopt_nb.pyutil import gc_paused
from accelopt_nb.sim import api_guard, failures, onchip
from accelopt_nb.sim import compiler as _compiler
from accelopt_nb.sim import dtypes as _dt
from accelopt_nb.sim import isa as _isa
from accelopt_nb.sim import language as _nl
from accelopt_nb.sim.launch import Grid, parse_grid, run_grid
from accelopt_nb.sim.runtime import Runtime, SimOptions, active, running
from accelopt_nb.sim.tensor import Tensor, paint_unwritten
from accelopt_nb.sim.trace import Trace


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
    return files | module_globals.get(_FILES_KEY, set())


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
    options = options or SimOptions()
    launch_grid = parse_grid(tuple(grid)) if grid is not None else kernel.grid_spec
    rt = Runtime(options, kernel.__name__, _kernel_files(kernel))
    # per-tile BLAS calls are tiny: extra BLAS threads only add synchronization (5x slower measured)
    with running(rt), _blas().limit(limits=1, user_api="blas"), gc_paused(keeps=True):
        args = [_as_input(rt, a, i) for i, a in enumerate(inputs)]
        kw = {k: _as_input(rt, v, k) for k, v in kwargs.items()}
        try:
            if kernel.host and not launch_grid.shape:
                rt.force_auto_alloc = getattr(kernel.fn, "_nki_force_auto_alloc", False)
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
            raise failures.python_error(exc, rt.kernel_files, _innermost_kernel_frame(exc, rt.kernel_files)) from exc
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


# ---- the neuronxcc.nki facade -----------------------------------------------------------------
def _module(name: str, attrs: dict[str, Any]) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    return mod


def _make_typing() -> types.ModuleType:
    class _TensorType:
        def __class_getitem__(cls, item):
            return cls
    return _module("neuronxcc.nki.typing", {"tensor": _TensorType, "mutable_tensor": _TensorType,
                                            "scalar": float, "ndarray": _TensorType})


def _simulate_kernel(kernel: Any, *args: Any, **kwargs: Any) -> Any:
    k = kernel if isinstance(kernel, Kernel) else Kernel(kernel)
    return k(*args, **kwargs)


compiler_module = _module("neuronxcc.nki.compiler", {k: getattr(_compiler, k) for k in _compiler.__all__})
language_module = _module("neuronxcc.nki.language", {k: getattr(_nl, k) for k in _nl.__all__})
isa_module = _module("neuronxcc.nki.isa", {k: getattr(_isa, k) for k in _isa.__all__})
typing_module = _make_typing()
nki_module = _module("neuronxcc.nki", {
    "jit": jit, "trace": jit, "language": language_module, "isa": isa_module, "typing": typing_module,
    "compiler": compiler_module, "simulate_kernel": _simulate_kernel, "baremetal": _compiler.baremetal,
    "benchmark": _compiler.benchmark, "profile": _compiler.profile,
})
neuronxcc_module = _module("neuronxcc", {"nki": nki_module})

def _make_standalone_nki() -> dict[str, types.ModuleType]:
    """The NKI 0.2+ ``nki`` package: same language, ISA calls with an explicit dst."""
    from accelopt_nb.sim import nki_frontend

    lang = _module("nki.language", dict(language_module.__dict__, __name__="nki.language"))
    typing = _module("nki.typing", dict(typing_module.__dict__, __name__="nki.typing"))
    comp = _module("nki.compiler", dict(compiler_module.__dict__, __name__="nki.compiler"))
    top = _module("nki", {"jit": jit, "language": lang, "isa": nki_frontend.isa_module, "typing": typing,
                          "compiler": comp,
                          "simulate": lambda kernel: (kernel if isinstance(kernel, Kernel) else Kernel(kernel)),
                          "baremetal": _compiler.baremetal, "benchmark": _compiler.benchmark,
                          "profile": _compiler.profile})
    return {"nki": top, "nki.language": lang, "nki.isa": nki_frontend.isa_module, "nki.typing": typing,
            "nki.compiler": comp}


# Two front ends over one core: each entry maps an import name to its facade module, and the
# top-level package returned for plain `import a.b` is the one named by the first component.
_ALIASES: dict[str, types.ModuleType] = {
    "neuronxcc": neuronxcc_module,
    "neuronxcc.nki": nki_module,
    "neuronxcc.nki.language": language_module,
    "neuronxcc.nki.isa": isa_module,
    "neuronxcc.nki.typing": typing_module,
    "neuronxcc.nki.compiler": compiler_module,
    **_make_standalone_nki(),
}
_FACADE_ROOTS = {"neuronxcc", "nki"}
_MODULE_IDS = itertools.count(1)
_FILES_KEY = "__accelopt_kernel_files__"   # module global: the files of a kernel and its sibling modules


def _make_import(real_import: Callable, siblings: "_Siblings | None" = None) -> Callable:
    def sim_import(name, globals=None, locals=None, fromlist=(), level=0):
        root = name.split(".", 1)[0]
        if level == 0 and root in _FACADE_ROOTS:
            if name not in _ALIASES:
                raise ImportError(f"{name} is not provided by the accelopt_nb simulator "
                                  f"(available: {', '.join(sorted(_ALIASES))})")
            module = _ALIASES[name]
            if fromlist and "__getattr__" in module.__dict__:  # `from nl import X`: name a missing API itself
                for item in fromlist:
                    if item != "*" and item not in module.__dict__:
                        getattr(module, item)
            return module if fromlist else _ALIASES[root]
        if level == 0 and siblings is not None and name == root:
            mod = siblings.find(root)
            if mod is not None:
                return mod
        return real_import(name, globals, locals, fromlist, level)
    return sim_import


class _Siblings:
    """NKI files next to a kernel file, importable from it by name (``from helpers import tile_add``).

    A sibling is loaded like the kernel (its ``neuronxcc`` imports resolve to the simulator), once per
    kernel load. Modules already imported for real (numpy, math, ...) take precedence over a sibling
    of the same name, so a stray ``numpy.py`` next to a kernel cannot shadow NumPy.
    """

    def __init__(self, directory: Path | None, files: set[str]) -> None:
        self.directory = directory
        self.files = files          # every file of this kernel's modules, for error locations
        self.loaded: dict[str, types.ModuleType] = {}

    def find(self, name: str) -> types.ModuleType | None:
        if name in self.loaded:
            return self.loaded[name]
        if self.directory is None or name in sys.modules:
            return None
        path = self.directory / f"{name}.py"
        if not path.is_file():
            return None
        filename = str(path.resolve())
        source = path.read_text()
        code = _compile(source, filename)
        module = _new_module(name, filename, self)
        self.loaded[name] = module    # before running it: import cycles see the partial module, as in Python
        _exec_module(code, module, filename)
        return module


def _compile(source: str, filename: str) -> types.CodeType:
    # register the text so tracebacks and error locations can show kernel lines
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    try:
        return compile(source, filename, "exec")
    except SyntaxError as exc:
        raise KernelLoadError(f"syntax error: {exc.msg}", file=filename, line=exc.lineno,
                              rule="kernel source must be valid Python") from exc


def _new_module(name: str, filename: str, siblings: _Siblings) -> types.ModuleType:
    siblings.files.add(filename)
    module = types.ModuleType(f"accelopt_kernel_{name}_{next(_MODULE_IDS)}")   # a name no real package uses
    module.__file__ = filename
    module.__builtins__ = kernel_builtins(siblings)
    module.__dict__[_FILES_KEY] = siblings.files
    return module


def _exec_module(code: types.CodeType, module: types.ModuleType, filename: str) -> None:
    """Run a kernel module's top level as a real module: registered in ``sys.modules`` while it runs
    (``@dataclass`` and friends look their module up there)."""
    key = module.__name__
    sys.modules[key] = module
    try:
        exec(code, module.__dict__)  # noqa: S102 - kernels are user code by design; sandboxing is layer 4's job
    except KernelError as exc:
        raise exc.locate(filename, _exc_line(exc, filename))
    except ImportError as exc:
        raise KernelLoadError(f"import failed: {exc}", file=filename, line=_exc_line(exc, filename),
                              rule="kernels import numpy, math, neuronxcc.nki and NKI files next to them") from exc
    except failures.PYTHON_ERRORS as exc:
        error = failures.python_error(exc, {filename}, (filename, _exc_line(exc, filename)))
        if isinstance(error, SimulatorBugError):
            raise error from exc
        raise KernelLoadError(f"{type(exc).__name__} while loading: {exc}", file=filename,
                              line=_exc_line(exc, filename)) from exc
    except Exception as exc:
        raise KernelLoadError(f"{type(exc).__name__} while loading: {exc}", file=filename,
                              line=_exc_line(exc, filename)) from exc
    finally:
        sys.modules.pop(key, None)


class _TrackedRange:
    """Inside a kernel module, plain ``range`` loops are sequential loops (NKI 0.1 semantics)."""

    __slots__ = ("_r",)

    def __init__(self, *args: Any) -> None:
        self._r = range(*[int(a) if isinstance(a, (np.integer,)) else a for a in args])

    def __iter__(self):
        rt = active()
        return iter(self._r) if rt is None else rt.loop("sequential", self._r)

    def __len__(self) -> int:
        return len(self._r)

    def __getitem__(self, i):
        return self._r[i]

    def __reversed__(self):
        return reversed(self._r)

    def __contains__(self, x) -> bool:
        return x in self._r

    def __repr__(self) -> str:
        return repr(self._r)


def kernel_builtins(siblings: _Siblings | None = None) -> dict[str, Any]:
    b = dict(vars(builtins))
    b["__import__"] = _make_import(builtins.__import__, siblings)
    b["range"] = _TrackedRange
    return b


def load_kernel(path: str | Path | None = None, *, source: str | None = None, name: str = "kernel",
                filename: str | None = None) -> Kernel:
    """Load a kernel file (or source text) written against neuronxcc.nki; return its kernel.

    ``name`` is the kernel function to return; ``kernel`` then ``optimized_kernel`` are tried.
    """
    if source is None:
        if path is None:
            raise KernelLoadError("load_kernel needs a path or source text")
        path = Path(path)
        if not path.is_file():
            raise KernelLoadError(f"kernel file not found: {path}")
        source = path.read_text()
    filename = filename or (str(Path(path).resolve()) if path is not None else f"<kernel-{abs(hash(source)) & 0xffffff:x}>")
    code = _compile(source, filename)
    siblings = _Siblings(Path(filename).parent if path is not None else None, set())
    module = _new_module(Path(filename).stem, filename, siblings)
    _exec_module(code, module, filename)
    module_globals = module.__dict__
    for candidate in (name, "kernel", "optimized_kernel"):
        obj = module_globals.get(candidate)
        if obj is not None:
            return obj if isinstance(obj, Kernel) else Kernel(obj, host=True)
    raise KernelLoadError(f"kernel source defines no function named '{name}'", file=filename,
                          rule="kernel module must define the kernel function")


def _exc_line(exc: BaseException, filename: str) -> int | None:
    tb = exc.__traceback__
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


# ---- the API boundary: every nl / nisa facade function checks its call against the NKI docs ---------
for _fe, _kind in (("neuronxcc", "language"), ("neuronxcc", "isa"), ("nki", "language"), ("nki", "isa")):
    api_guard.guard_module(_ALIASES[f"{api_guard.FRONT_END_PREFIX[_fe]}.{_kind}"], _fe, _kind)
