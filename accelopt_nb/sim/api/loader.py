"""Loading kernels: kernel files run unchanged, their NKI imports resolved to the simulator's facades.

While a kernel *module* executes, its ``import neuronxcc.nki...`` (NKI 0.1) or ``import nki...`` (the standalone
package) statements resolve to the facade modules (``api.facade_neuronxcc``, ``api.facade_nki``) through a private
``__import__`` in the module's own builtins. Nothing is put in ``sys.modules``, so a real ``neuronx-cc``
installation is never shadowed. A third front end is one more facade module whose import names join
:data:`ALIASES`.
"""
from __future__ import annotations

import builtins
import itertools
import linecache
import sys
import types
from pathlib import Path
from typing import Any, Callable

import numpy as np

from accelopt_nb.errors import KernelError, KernelLoadError, SimulatorBugError
from accelopt_nb.sim.api import facade_neuronxcc, facade_nki
from accelopt_nb.sim.api.kernel import FILES_KEY, Kernel, SimResult, jit, simulate
from accelopt_nb.sim.core import failures
from accelopt_nb.sim.core.context import active

# Two front ends over one core: each entry maps an import name to its facade module, and the
# top-level package returned for plain `import a.b` is the one named by the first component.
ALIASES: dict[str, types.ModuleType] = {**facade_neuronxcc.MODULES, **facade_nki.MODULES}
_FACADE_ROOTS = {"neuronxcc", "nki"}
_MODULE_IDS = itertools.count(1)


def _make_import(real_import: Callable, siblings: "_Siblings | None" = None) -> Callable:
    def sim_import(name, globals=None, locals=None, fromlist=(), level=0):
        root = name.split(".", 1)[0]
        if level == 0 and root in _FACADE_ROOTS:
            if name not in ALIASES:
                raise ImportError(f"{name} is not provided by the accelopt_nb simulator "
                                  f"(available: {', '.join(sorted(ALIASES))})")
            module = ALIASES[name]
            if fromlist and "__getattr__" in module.__dict__:  # `from nl import X`: name a missing API itself
                for item in fromlist:
                    if item != "*" and item not in module.__dict__:
                        getattr(module, item)
            return module if fromlist else ALIASES[root]
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
    module.__dict__[FILES_KEY] = siblings.files
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


__all__ = ["ALIASES", "Kernel", "SimResult", "jit", "kernel_builtins", "load_kernel", "simulate"]
