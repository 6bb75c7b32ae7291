"""The static check: refuse kernel sources that reach outside NumPy, math and NKI, before running them.

Kernels come from an LLM and are untrusted. The sandbox (separate process, limits, clean directory)
contains accidents; this check refuses the obvious escapes up front with a message that names the
line, so the executor agent can fix its kernel. It is deliberately a blocklist over an import
allowlist: a kernel may import only NumPy, math and NKI, may not call the builtins that open files,
run code or reach the interpreter, may not touch underscore attributes (``x.__class__``, ``x._impl``),
and may not use NumPy's file and FFI entry points.

Nor may it rebind what the libraries (and so a checker) use: no assignment to or deletion of any
attribute (``np.allclose = ...``, ``math.isclose = ...``, ``nl.x = ...``, ``del np.x``; in
functions and helpers too, and so through any alias or parameter), no item assignment or mutating
method call on a library object (``np.sctypeDict[...] = ...``, ``d = np.typecodes; d.update()``),
and an imported module is used only as ``module.<name>`` (never aliased, passed or returned).
The judge, which decides the verdict, runs in a process where the kernel never ran
(:mod:`accelopt_nb.evaluation.engine`); this check keeps the runner's simulator honest too.
"""
from __future__ import annotations

import ast
import re

from accelopt_nb.errors import KernelLoadError, KernelRejectedError
from accelopt_nb.pyutil import parse

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
# Methods that mutate a container in place: refused on library objects (``np.sctypeDict.update``).
MUTATING_METHODS = frozenset({"update", "setdefault", "pop", "popitem", "clear", "append",
                              "extend", "insert", "remove", "add", "discard", "sort", "reverse",
                              "fill", "resize", "put", "itemset", "setflags", "setfield"})
# ``from <package> import <name>`` binds a module for these names (numpy.linalg, nki.language, ...).
KNOWN_SUBMODULES = frozenset({"nki", "language", "isa", "typing", "compiler", "linalg", "random",
                              "fft", "ma", "polynomial", "emath", "char", "strings"})
# Calls that may take a module as an argument because they only read from it.
READ_ONLY_MODULE_CALLS = frozenset({"getattr", "hasattr"})
MAX_SOURCE_CHARS = 400_000

_FORMAT_ESCAPE = re.compile(r"\{[^{}]*[.\[]\s*_")
def parse_source(source: str, filename: str = "kernel.py") -> ast.Module:
    """``ast.parse``, serialised across threads (see :mod:`accelopt_nb.pyutil`)."""
    return parse(source, filename=filename)


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
    checker.collect_names(tree)
    checker.visit(tree)


class _Checker(ast.NodeVisitor):
    def __init__(self, filename: str) -> None:
        self.filename = filename
        self.numpy_aliases: set[str] = set()
        self.module_names: set[str] = set()      # names bound to modules by imports
        self.library_aliases: set[str] = set()   # names bound to objects reached through a module
        self.parents: dict[ast.AST, ast.AST] = {}

    def collect_names(self, tree: ast.AST) -> None:
        """First pass, over the whole file (any scope, any order): which names are modules, and
        which are assigned something reached through a module (``d = np.typecodes``)."""
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    self.module_names.add(alias.asname or alias.name.split(".")[0])
            elif isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if alias.name in KNOWN_SUBMODULES:
                        self.module_names.add(alias.asname or alias.name)
        changed = True
        while changed:  # aliases of aliases
            changed = False
            for node in ast.walk(tree):
                targets: list[ast.AST] = []
                value: ast.AST | None = None
                if isinstance(node, ast.Assign):
                    targets, value = node.targets, node.value
                elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
                    targets, value = [node.target], node.value
                if value is None or not self._library_rooted(value):
                    continue
                for t in targets:
                    for name in ast.walk(t):
                        if isinstance(name, ast.Name) and name.id not in self.library_aliases:
                            self.library_aliases.add(name.id)
                            changed = True

    def _root(self, node: ast.AST) -> tuple[ast.AST | None, bool]:
        """The object an attribute/item chain starts from (None: a call's fresh result), and
        whether the chain has an attribute step. ``getattr(x, "n")`` reads like ``x.n``."""
        has_attr = False
        while True:
            if isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
                has_attr = has_attr or isinstance(node, ast.Attribute)
                node = node.value
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                  and node.func.id in READ_ONLY_MODULE_CALLS and node.args):
                has_attr = True
                node = node.args[0]
            elif isinstance(node, ast.Call):
                return None, has_attr
            else:
                return node, has_attr

    def _library_rooted(self, node: ast.AST) -> bool:
        root, _ = self._root(node)
        return isinstance(root, ast.Name) and (root.id in self.module_names
                                               or root.id in self.library_aliases)

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
        parent = self.parents.get(node)
        if (name in self.module_names and isinstance(node.ctx, ast.Load)
                and not isinstance(parent, ast.Attribute)
                and not (isinstance(parent, ast.Call) and node in parent.args[:1]
                         and isinstance(parent.func, ast.Name)
                         and parent.func.id in READ_ONLY_MODULE_CALLS)):
            self._reject(node, f"the module '{name}' may only be used as {name}.<name> in a "
                               f"kernel (not aliased, passed or returned)")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        attr = node.attr
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            verb = "assigning to" if isinstance(node.ctx, ast.Store) else "deleting"
            self._reject(node, f"{verb} the attribute '{ast.unparse(node)}' is not allowed in a "
                               f"kernel (it could rebind a library function); use a local variable")
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

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            root, has_attr = self._root(node.value)
            if has_attr or self._library_rooted(node.value):
                self._reject(node, f"item assignment to '{ast.unparse(node.value)}' is not "
                                   f"allowed in a kernel (it could change a library object); "
                                   f"assign items of local tiles and arrays only")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if (isinstance(func, ast.Attribute) and func.attr in MUTATING_METHODS
                and not (isinstance(func.value, ast.Name) and func.value.id in self.module_names)
                and self._library_rooted(func.value)):
            self._reject(node, f"calling '.{func.attr}()' on the library object "
                               f"'{ast.unparse(func.value)}' is not allowed in a kernel")
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
