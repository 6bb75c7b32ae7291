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
from accelopt_nb.sim.api.kernel import FILES_KEY, Kernel, SimResult, jit, program_fingerprint, simulate
from accelopt_nb.sim.core import failures
from accelopt_nb.sim.core.context import active
from accelopt_nb.sim.core.views import unknown_attribute

# Two front ends over one core: each entry maps an import name to its facade module, and the
# top-level package returned for plain `import a.b` is the one named by the first component.
ALIASES: dict[str, types.ModuleType] = {**facade_neuronxcc.MODULES, **facade_nki.MODULES}
_FACADE_ROOTS = {"neuronxcc", "nki"}
_MODULE_IDS = itertools.count(1)


def _make_import(real_import: Callable, modules: "_KernelModules | None" = None) -> Callable:
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
        if modules is not None:
            if level > 0:
                return modules.import_relative(name, globals or {}, fromlist, level)
            if root in modules.roots:
                return modules.import_absolute(name, fromlist)
            if name == root:
                mod = modules.sibling(root)
                if mod is not None:
                    return mod
        return real_import(name, globals, locals, fromlist, level)
    return sim_import


class _KernelModules:
    """The modules of one kernel load: the kernel file, NKI files next to it, and the package it belongs to.

    A sibling (``from helpers import tile_add``) is a ``.py`` file in the kernel's directory. Modules already
    imported for real (numpy, math, ...) take precedence over a sibling of the same name, so a stray
    ``numpy.py`` next to a kernel cannot shadow NumPy.

    A kernel file inside a Python package (its directory, and maybe directories above it, hold an
    ``__init__.py``) is a module of that package: ``from ..utils.helpers import f`` and absolute imports that
    start with the name of one of the packages containing it (``from mylib.utils import helpers``) load the
    package's files the simulator's way (their NKI imports resolve to the facades). Packages the kernel reaches
    are initialised as Python does (their ``__init__.py`` runs), except the packages that contain the kernel
    file itself: Python would run those first, and a library's top-level ``__init__`` sets up the whole
    installed library (eager imports of every subpackage, module swaps in ``sys.modules``), which a kernel does
    not need. Such a package's ``__init__`` runs only if the kernel imports a name it defines.

    Each file loads once per kernel load (modules are keyed by file), so a module reached by two import paths
    is one module, as in Python.
    """

    def __init__(self, kernel_file: Path | None, files: set[str]) -> None:
        self.files = files          # every file of this kernel's modules, for error locations
        self.directory = kernel_file.parent if kernel_file is not None else None
        self.by_file: dict[str, types.ModuleType] = {}
        self.roots: dict[str, Path] = {}             # package name -> directory, for absolute imports
        self.containing: set[str] = set()            # directories of the packages that contain the kernel
        self.pending_init: dict[str, Path] = {}      # dotted package name -> its __init__.py, not run yet
        self.package = ""                            # the kernel's own package (dotted), "" outside one
        if kernel_file is None:
            return
        chain: list[Path] = []
        d = kernel_file.parent
        while (d / "__init__.py").is_file():
            chain.append(d)
            d = d.parent
        chain.reverse()                              # outermost package first
        for pkg in chain:
            self.roots.setdefault(pkg.name, pkg)
            self.containing.add(str(pkg.resolve()))
        if chain:
            self.package = ".".join(p.name for p in chain)

    # ---- plain siblings --------------------------------------------------------------------------------
    def sibling(self, name: str) -> types.ModuleType | None:
        if self.directory is None or name in sys.modules:
            return None
        path = self.directory / f"{name}.py"
        if not path.is_file():
            return None
        return self._module_file(path, name, "")

    # ---- package imports ---------------------------------------------------------------------------------
    def import_relative(self, name: str, globals: dict, fromlist: tuple, level: int) -> types.ModuleType:
        package = globals.get("__package__") or ""
        parts = package.split(".") if package else []
        if not parts or level > len(parts):
            raise ImportError("attempted relative import beyond the kernel's top-level package"
                              if parts else "attempted relative import with no known parent package")
        base = parts[:len(parts) - level + 1]
        dotted = ".".join(base + ([name] if name else []))
        module = self._load_dotted(dotted)
        self._from(module, dotted, fromlist)
        return module

    def import_absolute(self, name: str, fromlist: tuple) -> types.ModuleType:
        module = self._load_dotted(name)
        if fromlist:
            self._from(module, name, fromlist)
            return module
        return self._load_dotted(name.split(".", 1)[0])

    def _from(self, module: types.ModuleType, dotted: str, fromlist: tuple) -> None:
        """``from module import a, b``: a name that is no attribute may be a submodule (as in Python)."""
        if not hasattr(module, "__path__"):
            return
        for item in fromlist:
            if item == "*" or item in module.__dict__:
                continue
            try:
                self._load_dotted(f"{dotted}.{item}")
            except ImportError:
                self._run_pending(dotted, module)   # a name the package's own __init__ defines

    def _load_dotted(self, dotted: str) -> types.ModuleType:
        """The module or package ``a.b.c``, loading what is not loaded yet (parents first)."""
        parts = dotted.split(".")
        if parts[0] not in self.roots:
            raise ImportError(f"No module named {dotted!r}")
        directory = self.roots[parts[0]]
        module = self._package(directory, parts[0])
        for i, part in enumerate(parts[1:], start=1):
            name = ".".join(parts[:i + 1])
            sub = directory / part
            if (sub / "__init__.py").is_file():
                child = self._package(sub, name)
                directory = sub
            elif (directory / f"{part}.py").is_file():
                child = self._module_file(directory / f"{part}.py", name, ".".join(parts[:i]))
            else:
                raise ImportError(f"No module named {name!r} (looked in {directory})")
            setattr(module, part, child)
            module = child
            if i < len(parts) - 1 and not hasattr(module, "__path__"):
                raise ImportError(f"No module named {dotted!r}: {name!r} is not a package")
        return module

    def _package(self, directory: Path, dotted: str) -> types.ModuleType:
        init = directory / "__init__.py"
        key = str(init.resolve())
        module = self.by_file.get(key)
        if module is not None:
            return module
        module = self._new(init, dotted, dotted)
        module.__path__ = [str(directory)]
        if str(directory.resolve()) in self.containing:
            self.pending_init[key] = init     # run only if the kernel asks for a name it defines
            return module
        self._run(module, init)
        return module

    def _module_file(self, path: Path, dotted: str, package: str) -> types.ModuleType:
        key = str(path.resolve())
        module = self.by_file.get(key)
        if module is not None:
            return module
        module = self._new(path, dotted, package)
        self._run(module, path)
        return module

    def _new(self, path: Path, dotted: str, package: str) -> types.ModuleType:
        filename = str(path.resolve())
        module = _new_module(dotted.rsplit(".", 1)[-1], filename, self)
        module.__package__ = package
        self.by_file[filename] = module       # before running it: import cycles see the partial module
        return module

    def _run(self, module: types.ModuleType, path: Path) -> None:
        filename = module.__file__
        _exec_module(_compile(path.read_text(), filename), module, filename)

    def _run_pending(self, dotted: str, module: types.ModuleType) -> None:
        init = self.pending_init.pop(str(Path(module.__file__).resolve()), None)
        if init is not None:
            self._run(module, init)

    def entry(self, filename: str) -> types.ModuleType:
        """The kernel file's own module (a module of its package, when it is in one)."""
        module = _new_module(Path(filename).stem, filename, self)
        module.__package__ = self.package
        self.by_file[filename] = module
        return module


def _compile(source: str, filename: str) -> types.CodeType:
    # register the text so tracebacks and error locations can show kernel lines
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    try:
        return compile(source, filename, "exec")
    except SyntaxError as exc:
        raise KernelLoadError(f"syntax error: {exc.msg}", file=filename, line=exc.lineno,
                              rule="kernel source must be valid Python") from exc


def _new_module(name: str, filename: str, modules: _KernelModules) -> types.ModuleType:
    modules.files.add(filename)
    module = types.ModuleType(f"accelopt_kernel_{name}_{next(_MODULE_IDS)}")   # a name no real package uses
    module.__file__ = filename
    module.__builtins__ = kernel_builtins(modules)
    module.__dict__[FILES_KEY] = modules.files
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
                              rule="kernels import numpy, math, the NKI packages (neuronxcc.nki, nki), NKI files next "
                              "to them and modules of their own package") from exc
    except failures.PYTHON_ERRORS as exc:
        missing = unknown_attribute(exc)   # tensor.<a name it lacks>, at the module's top level
        if missing is not None:
            raise missing.locate(filename, _exc_line(exc, filename)).with_traceback(exc.__traceback__) from None
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


def kernel_builtins(modules: _KernelModules | None = None) -> dict[str, Any]:
    b = dict(vars(builtins))
    b["__import__"] = _make_import(builtins.__import__, modules)
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
    modules = _KernelModules(Path(filename) if path is not None else None, set())
    module = modules.entry(filename)
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


__all__ = ["ALIASES", "Kernel", "SimResult", "jit", "kernel_builtins", "load_kernel", "program_fingerprint", "simulate"]
