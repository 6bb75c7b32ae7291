"""The static check: refuse kernel sources that reach outside NumPy, math and NKI, before running them.

Kernels come from an LLM and are untrusted. The sandbox (separate process, limits, clean directory)
contains accidents; this check refuses the obvious escapes up front with a message that names the
line, so the executor agent can fix its kernel. It is deliberately a blocklist over an import
allowlist: a kernel may import only NumPy, math and NKI, may not call the builtins that open files,
run code or reach the interpreter, may not touch underscore attributes (``x.__class__``, ``x._impl``),
and may not use NumPy's file and FFI entry points.
"""
from __future__ import annotations

import ast
import re
import threading

from accelopt_nb.errors import KernelLoadError, KernelRejectedError

# Top-level modules a kernel may import (and their submodules). ``__future__`` is a compiler
# directive, not a module with behaviour.
ALLOWED_IMPORT_ROOTS = ("numpy", "math", "neuronxcc", "nki", "__future__")
# Within ``neuronxcc`` only the NKI part is allowed (the rest is the compiler driver).
ALLOWED_NEURONXCC = ("neuronxcc.nki",)

# (``input``/``exit`` are left alone: harmless in the sandbox, and ``input`` is a common tensor name.)
FORBIDDEN_BUILTINS = frozenset({
    "open", "exec", "eval", "compile", "__import__", "globals", "locals", "vars", "breakpoint",
    "memoryview", "setattr", "delattr",
})
# Modules that must not appear as bare names or as attributes (``np.ma.core.os`` would otherwise
# smuggle a module in through an object graph).
FORBIDDEN_NAMES = frozenset({
    "os", "sys", "subprocess", "socket", "ctypes", "importlib", "builtins", "shutil", "pathlib",
    "pickle", "marshal", "multiprocessing", "threading", "tempfile", "urllib", "inspect", "posix",
    "nt", "pty", "runpy", "sysconfig", "webbrowser", "asyncio",
})
# Attributes that give file, foreign-memory or frame access on any object (ndarray.tofile, .ctypes).
FORBIDDEN_ATTRS = frozenset({"tofile", "dump", "f_globals", "f_locals", "f_builtins", "gi_frame",
                             "cr_frame", "tb_frame", "func_globals"}) | FORBIDDEN_NAMES
# NumPy functions and submodules that read or write files, map memory or reach C. They are refused
# as attributes of anything (NKI has none of these names) ...
FORBIDDEN_NUMPY_ATTRS = frozenset({
    "save", "savez", "savez_compressed", "fromfile", "memmap", "loadtxt", "genfromtxt",
    "savetxt", "fromregex", "DataSource", "ctypeslib", "lib", "f2py", "testing", "distutils",
    "show_config", "show_runtime", "get_include", "rec",
})
# ... except ``load``, which is also NKI's harmless ``nl.load``: refused only on the numpy module,
# which is why a kernel may use numpy only as ``np.<name>`` (no aliasing, no passing it around) and
# may not reach it through another module (``nl.np``).
NUMPY_ONLY_FORBIDDEN = frozenset({"load"})
MODULE_HANDLES = frozenset({"np", "numpy"})
ALLOWED_DUNDER_NAMES = frozenset({"__name__"})
MAX_SOURCE_CHARS = 400_000

_FORMAT_ESCAPE = re.compile(r"\{[^{}]*[.\[]\s*_")
# CPython 3.11 keeps the AST constructor's recursion-depth counter per interpreter, not per
# thread: two threads parsing at once can fail with "AST constructor recursion depth mismatch".
_PARSE_LOCK = threading.Lock()


def parse_source(source: str, filename: str = "kernel.py") -> ast.Module:
    """``ast.parse``, serialised across threads (see _PARSE_LOCK)."""
    with _PARSE_LOCK:
        return ast.parse(source, filename=filename)


def check_kernel_source(source: str, filename: str = "kernel.py") -> None:
    """Raise :class:`KernelRejectedError` (or :class:`KernelLoadError` for a syntax error) if the
    kernel source is not allowed to run. Returns None when it passes."""
    if len(source) > MAX_SOURCE_CHARS:
        raise KernelRejectedError(f"kernel source is {len(source)} characters; the limit is "
                                  f"{MAX_SOURCE_CHARS}", file=filename, line=1)
    try:
        tree = parse_source(source, filename)
    except SyntaxError as exc:
        raise KernelLoadError(f"syntax error: {exc.msg}", file=filename, line=exc.lineno) from None
    except ValueError as exc:  # e.g. null bytes in the source
        raise KernelLoadError(f"kernel source cannot be parsed: {exc}", file=filename, line=None) from None
    checker = _Checker(filename)
    checker.parents = {child: parent for parent in ast.walk(tree)
                       for child in ast.iter_child_nodes(parent)}
    checker.visit(tree)


class _Checker(ast.NodeVisitor):
    def __init__(self, filename: str) -> None:
        self.filename = filename
        self.numpy_aliases: set[str] = set()
        self.parents: dict[ast.AST, ast.AST] = {}

    def _reject(self, node: ast.AST, message: str) -> None:
        raise KernelRejectedError(message, file=self.filename, line=getattr(node, "lineno", None))

    # imports -----------------------------------------------------------------------------------
    def _check_module(self, node: ast.AST, module: str) -> None:
        root = module.split(".")[0]
        allowed = root in ALLOWED_IMPORT_ROOTS
        if root == "neuronxcc" and module != "neuronxcc":
            allowed = any(module == m or module.startswith(m + ".") for m in ALLOWED_NEURONXCC)
        if root == "numpy" and module != "numpy":
            sub = module.split(".")[1]
            allowed = sub not in FORBIDDEN_NUMPY_ATTRS
        if not allowed:
            self._reject(node, f"import of '{module}' is not allowed (kernels may import only "
                               f"numpy, math and neuronxcc.nki / nki)")

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._check_module(node, alias.name)
            if alias.name == "numpy":
                self.numpy_aliases.add(alias.asname or "numpy")
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            self._reject(node, "relative imports are not allowed in a kernel")
        module = node.module or ""
        self._check_module(node, module)
        for alias in node.names:
            if alias.name == "*":
                self._reject(node, f"'from {module} import *' is not allowed; import names explicitly")
            if module == "neuronxcc" and alias.name != "nki":
                self._reject(node, f"'from neuronxcc import {alias.name}' is not allowed "
                                   f"(only neuronxcc.nki)")
            if module.split(".")[0] == "numpy" and alias.name in (FORBIDDEN_NUMPY_ATTRS
                                                                  | NUMPY_ONLY_FORBIDDEN):
                self._reject(node, f"numpy.{alias.name} is not allowed in a kernel (file or "
                                   f"foreign-memory access)")
            if alias.name.startswith("_"):
                self._reject(node, f"importing the private name '{alias.name}' is not allowed")
        self.generic_visit(node)

    # names and attributes ----------------------------------------------------------------------
    def visit_Name(self, node: ast.Name) -> None:
        name = node.id
        if name in FORBIDDEN_BUILTINS:
            self._reject(node, f"use of '{name}' is not allowed in a kernel")
        if name in FORBIDDEN_NAMES:
            self._reject(node, f"use of the module '{name}' is not allowed in a kernel")
        if name.startswith("__") and name not in ALLOWED_DUNDER_NAMES:
            self._reject(node, f"use of the interpreter name '{name}' is not allowed in a kernel")
        if name in self.numpy_aliases and not isinstance(self.parents.get(node), ast.Attribute):
            self._reject(node, f"the numpy module may only be used as {name}.<function> in a "
                               f"kernel (not aliased or passed around)")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        attr = node.attr
        if attr.startswith("_"):
            self._reject(node, f"access to the underscore attribute '.{attr}' is not allowed in a kernel")
        if attr in FORBIDDEN_ATTRS:
            self._reject(node, f"access to '.{attr}' is not allowed in a kernel (file or "
                               f"interpreter access)")
        if attr in FORBIDDEN_NUMPY_ATTRS or (attr in NUMPY_ONLY_FORBIDDEN and isinstance(
                node.value, ast.Name) and node.value.id in self.numpy_aliases):
            self._reject(node, f"'.{attr}' is not allowed in a kernel (NumPy file or "
                               f"foreign-memory access)")
        if attr in MODULE_HANDLES:
            self._reject(node, f"reaching numpy through another module ('.{attr}') is not "
                               f"allowed in a kernel; import numpy directly")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id in ("getattr", "hasattr"):
            name_arg = node.args[1] if len(node.args) > 1 else None
            if not (isinstance(name_arg, ast.Constant) and isinstance(name_arg.value, str)):
                self._reject(node, f"{func.id}() with a computed attribute name is not allowed "
                                   f"in a kernel; use the attribute directly")
            elif name_arg.value.startswith("_"):
                self._reject(node, f"{func.id}() on the underscore attribute '{name_arg.value}' "
                                   f"is not allowed in a kernel")
        # "{0.__class__}".format(x) reads attributes through the format mini-language.
        if (isinstance(func, ast.Attribute) and func.attr in ("format", "format_map")
                and isinstance(func.value, ast.Constant) and isinstance(func.value.value, str)
                and _FORMAT_ESCAPE.search(func.value.value)):
            self._reject(node, "format strings may not reach underscore attributes")
        self.generic_visit(node)

    # statements that only make sense for escaping ----------------------------------------------
    def visit_Global(self, node: ast.Global) -> None:
        for name in node.names:
            if name.startswith("__"):
                self._reject(node, f"declaring the interpreter name '{name}' global is not allowed")
