"""Static half of loop replay: may this ``nl.*_range`` loop's body be skipped once its records are known?

Replay (``accelopt_nb.sim.replay``) stops running a loop's Python body and extrapolates its records. That
is only exact when nothing but the runtime sees the body's effects. This module reads the kernel
function's source (the runtime knows the file and line of the ``for``) and answers with a
:class:`LoopSite` or the reason replay is unsafe:

* no statement that changes control flow or scope (``break``, ``return``, ``yield``, ``global``,
  ``nonlocal``, ``try``, ``del``, ``import``, nested ``def``/``lambda``/``class``), no attribute store;
* no Python state carried from one iteration to the next: a name bound in the body is neither read
  before it is bound in an iteration (``acc = acc + x``) nor read after the loop (liveness analysis
  of the whole kernel function);
* the calls, subscript stores and subscript reads that the runtime check (:func:`runtime_reason`)
  must see resolved against the kernel frame: stores go to NKI tensors, calls to NKI APIs, NumPy,
  pure builtins or kernel helpers that pass the same checks, and no container is indexed by a value
  that changes from one iteration to the next.
"""
from __future__ import annotations

import ast
import builtins
import functools
import linecache
import types
from dataclasses import dataclass, field
from typing import Any

RANGE_APIS = frozenset({"affine_range", "sequential_range", "static_range"})
_FORBIDDEN = (ast.Return, ast.Yield, ast.YieldFrom, ast.Await, ast.Global, ast.Nonlocal, ast.FunctionDef,
              ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.Try, ast.Delete, ast.Import, ast.ImportFrom,
              ast.AsyncFor, ast.AsyncWith) + ((ast.TryStar,) if hasattr(ast, "TryStar") else ())
# methods that mutate the builtin containers (and file-likes): never called on something unresolved
MUTATORS = frozenset({"append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault", "popitem",
                      "add", "discard", "sort", "reverse", "write", "send", "fill", "put", "itemset", "resize",
                      "__setitem__", "__delitem__", "__iadd__", "__setattr__"})
PURE_BUILTINS = frozenset(getattr(builtins, n) for n in (
    "range", "len", "int", "float", "bool", "min", "max", "abs", "tuple", "list", "dict", "set", "frozenset",
    "slice", "zip", "enumerate", "isinstance", "print", "divmod", "round", "sum", "sorted", "reversed", "str",
    "repr", "type", "getattr", "hasattr", "any", "all"))
PURE_MODULES = ("numpy", "math", "ml_dtypes", "accelopt_nb.sim")
_DYNAMIC = frozenset({"locals", "vars", "eval", "exec", "globals", "setattr", "delattr", "__import__"})


@dataclass
class LoopSite:
    """What the runtime check needs about one eligible loop."""

    target: str
    varying: frozenset[str]                  # the target and every name bound in the body
    accumulated: frozenset[str] = frozenset()   # `name += x` targets: in-place on NKI tensors, else carried
    calls: list[ast.Call] = field(default_factory=list)
    store_bases: list[ast.expr] = field(default_factory=list)
    loads: list[ast.Subscript] = field(default_factory=list)

    @functools.cached_property
    def paths(self) -> tuple[tuple, tuple]:
        """The distinct name paths (see :func:`_path`) whose types the runtime fingerprint keys on, and the
        distinct (callee, receiver) paths of the calls: a compiler-style body names ``nl.arange`` dozens of
        times, and each instance of a nested loop computes its fingerprint."""
        typed = [(name,) for name in sorted(self.accumulated - self.varying)]
        typed += [_path(node) for node in self.store_bases] + [_path(sub.value) for sub in self.loads]
        calls = [(_path(c.func), _path(c.func.value) if isinstance(c.func, ast.Attribute) else _NO_RECEIVER)
                 for c in self.calls]
        return tuple(dict.fromkeys(typed)), tuple(dict.fromkeys(calls))


_NO_RECEIVER = ("<no receiver>",)


# ---- finding the loop --------------------------------------------------------------------------
_parsed: dict[str, tuple[list[str], ast.Module | None]] = {}
_sites: dict[tuple[str, int, int, str], tuple[list[str], LoopSite | str]] = {}


def _module_ast(filename: str) -> tuple[list[str], ast.Module | None]:
    lines = linecache.getlines(filename)
    cached = _parsed.get(filename)
    if cached is not None and cached[0] is lines:
        return cached
    try:
        tree = ast.parse("".join(lines)) if lines else None
    except SyntaxError:
        tree = None
    _parsed[filename] = (lines, tree)
    return lines, tree


def loop_site(code: types.CodeType, line: int) -> LoopSite | str:
    """The loop whose ``for`` is at ``line`` of the function running ``code``, or why it cannot be replayed."""
    key = (code.co_filename, line, code.co_firstlineno, code.co_name)
    lines, tree = _module_ast(code.co_filename)
    hit = _sites.get(key)
    if hit is not None and hit[0] is lines:
        return hit[1]
    result = _analyse(tree, code, line)
    _sites[key] = (lines, result)
    return result


def _analyse(tree: ast.Module | None, code: types.CodeType, line: int) -> LoopSite | str:
    if tree is None:
        return "kernel source not available"
    fn = _find_function(tree, code)
    if fn is None:
        return "kernel function not found in its source"
    facts = _function_facts(fn)
    fors = facts.fors.get(line, [])
    if len(fors) != 1:
        return "the loop's for statement is not found in its source"
    loop = fors[0]
    call = loop.iter
    name = None
    if isinstance(call, ast.Call):
        f = call.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
        if isinstance(f, ast.Name) and name == "range":
            name = "sequential_range"   # a kernel module's plain `range` is the runtime's sequential loop
    if name not in RANGE_APIS:
        return "the loop does not iterate an nl range or a plain range directly"
    if not isinstance(loop.target, ast.Name):
        return "the loop target is not a plain name"
    if loop.orelse:
        return "for ... else"
    reason = body_reason(loop.body, top_level_loop=True)
    if reason:
        return reason
    target = loop.target.id
    bound = {target} | _bound_names(loop.body)
    live_out, body_in = facts.live[loop]
    carried = (bound - {target}) & body_in
    if carried:
        return f"Python names carried between iterations: {', '.join(sorted(carried))}"
    escaping = bound & (live_out | facts.closure)
    if escaping:
        return f"names bound in the loop are read after it: {', '.join(sorted(escaping))}"
    site = LoopSite(target=target, varying=frozenset(bound), accumulated=frozenset(_accumulated_names(loop.body)))
    _collect(loop.body, site)
    return site


@dataclass
class _Facts:
    """What every loop of one kernel function needs: its for statements by line, liveness, closure reads."""

    fors: dict[int, list[ast.For]]
    live: dict[ast.AST, tuple[set[str], set[str]]]
    closure: set[str]


_facts: dict[ast.AST, _Facts] = {}


def _function_facts(fn: ast.FunctionDef) -> _Facts:
    hit = _facts.get(fn)
    if hit is None:
        fors: dict[int, list[ast.For]] = {}
        for node in _walk_scope(fn):
            if isinstance(node, ast.For):
                fors.setdefault(node.lineno, []).append(node)
        lv = _Liveness()
        lv.block(fn.body, set())
        if len(_facts) >= 512:
            _facts.clear()
        hit = _facts[fn] = _Facts(fors, lv.at, _closure_names(fn))
    return hit


def _children(node: ast.AST) -> list[ast.AST]:
    """``ast.iter_child_nodes`` as a list, without its generators (the analysis visits every node)."""
    out = []
    for name in node._fields:
        v = getattr(node, name, None)
        if isinstance(v, ast.AST):
            out.append(v)
        elif type(v) is list:
            out.extend(x for x in v if isinstance(x, ast.AST))
    return out


def _walk(node: ast.AST) -> list[ast.AST]:
    """Every node under ``node``, itself included (``ast.walk``'s nodes, depth first)."""
    out = [node]
    todo = [node]
    while todo:
        kids = _children(todo.pop())
        out += kids
        todo += kids
    return out


_functions_memo: dict[ast.AST, dict[tuple[str, int], list[ast.FunctionDef]]] = {}


def _find_function(tree: ast.Module, code: types.CodeType) -> ast.FunctionDef | None:
    functions = _functions_memo.get(tree)
    if functions is None:
        if len(_functions_memo) > 256:
            _functions_memo.clear()
        functions = _functions_memo[tree] = {}
        for n in _walk(tree):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for line in {n.lineno} | {d.lineno for d in n.decorator_list}:
                    functions.setdefault((n.name, line), []).append(n)
    hits = functions.get((code.co_name, code.co_firstlineno), [])
    return hits[0] if len(hits) == 1 else None


def _walk_scope(fn: ast.AST):
    """Nodes of one function's own scope (not of nested functions, lambdas or classes)."""
    todo = _children(fn)
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            todo.extend(_children(node))


_nodes_memo: dict[ast.AST, list[ast.AST]] = {}


def _nodes(stmt: ast.AST) -> list[ast.AST]:
    """Every node under a statement (memoized: several checks read the same loop body)."""
    hit = _nodes_memo.get(stmt)
    if hit is None:
        if len(_nodes_memo) > 50_000:
            _nodes_memo.clear()
        hit = [stmt]
        for kid in _children(stmt):   # nested statements through the memo: nested loops share them
            hit += _nodes(kid) if isinstance(kid, ast.stmt) else _walk(kid)
        _nodes_memo[stmt] = hit
    return hit


def body_reason(body: list[ast.stmt], top_level_loop: bool, allow_return: bool = False) -> str | None:
    """Why statements cannot run as a replayed body (or a helper called from one), or None."""
    for stmt in body:
        reason = _stmt_reason(stmt, allow_return)
        if reason:
            return reason
    if top_level_loop and _has_own_break(body):
        return "break in the loop body"
    return None


_stmt_reasons: dict[tuple[ast.AST, bool], str | None] = {}


def _stmt_reason(stmt: ast.stmt, allow_return: bool) -> str | None:
    """:func:`body_reason` of one statement (memoized: a nested loop's statements are checked for each
    enclosing loop too)."""
    key = (stmt, allow_return)
    if key in _stmt_reasons:
        return _stmt_reasons[key]
    reason = None
    for node in _nodes(stmt):
        if isinstance(node, _FORBIDDEN) and not (allow_return and isinstance(node, ast.Return)):
            reason = f"{type(node).__name__.lower()} statement in the loop body"
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            reason = "attribute assignment in the loop body"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _DYNAMIC:
            reason = f"{node.func.id}() in the loop body"
        if reason:
            break
    if len(_stmt_reasons) > 50_000:
        _stmt_reasons.clear()
    _stmt_reasons[key] = reason
    return reason


def _has_own_break(body: list[ast.stmt]) -> bool:
    todo: list[ast.AST] = list(body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Break):
            return True
        if isinstance(node, (ast.For, ast.While)):
            todo.extend(node.orelse)  # a break inside a nested loop ends that loop only
            continue
        todo.extend(_children(node))
    return False


def _accumulated_names(body: list[ast.stmt]) -> set[str]:
    return {n.target.id for stmt in body for n in _nodes(stmt)
            if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name)}


def _bound_names(body: list[ast.stmt]) -> set[str]:
    """Names the body rebinds; ``name += x`` is left to the runtime check (in place on an NKI tensor)."""
    aug = {id(n.target) for stmt in body for n in _nodes(stmt)
           if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name)}
    out: set[str] = set()
    for stmt in body:
        for node in _nodes(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)) and id(node) not in aug:
                out.add(node.id)
    return out


def _closure_names(fn: ast.AST) -> set[str]:
    """Names read by nested functions and lambdas: they may read them at any time."""
    out: set[str] = set()
    for node in _walk_scope(fn):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            out |= _uses(node)
    return out


def _collect(body: list[ast.stmt], site: LoopSite) -> None:
    for stmt in body:
        for node in _nodes(stmt):
            if isinstance(node, ast.Call):
                site.calls.append(node)
            elif isinstance(node, ast.Subscript):
                if isinstance(node.ctx, ast.Store):
                    site.store_bases.append(node.value)
                else:
                    site.loads.append(node)


# ---- liveness -----------------------------------------------------------------------------------
_uses_memo: dict[ast.AST, frozenset[str]] = {}


def _uses(node: ast.AST) -> frozenset[str]:
    """Names read anywhere inside ``node`` (memoized: liveness asks again for nested statements)."""
    hit = _uses_memo.get(node)
    if hit is None:
        if isinstance(node, ast.Name):
            hit = frozenset((node.id,)) if isinstance(node.ctx, ast.Load) else frozenset()
        else:
            hit = frozenset().union(*map(_uses, _children(node)))
        if len(_uses_memo) > 200_000:
            _uses_memo.clear()
        _uses_memo[node] = hit
    return hit


def _target_names(target: ast.AST) -> set[str]:
    return {n.id for n in _walk(target) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


class _Liveness:
    """Backward liveness of local names over one function's structured statements.

    Conservative where it does not model a statement: it keeps everything live and kills nothing.
    ``at[loop]`` is (live after the loop, live at the top of its body).
    """

    def __init__(self) -> None:
        self.at: dict[ast.AST, tuple[set[str], set[str]]] = {}
        self.jumps: list[tuple[set[str], set[str]]] = []   # (loop head, after loop) of enclosing loops

    def block(self, stmts: list[ast.stmt], live: set[str]) -> set[str]:
        for s in reversed(stmts):
            live = self.stmt(s, live)
        return live

    def stmt(self, s: ast.stmt, live: set[str]) -> set[str]:
        if isinstance(s, ast.Assign):
            kills = set().union(*(_plain_targets(t) for t in s.targets))
            return (live - kills) | _uses(s)
        if isinstance(s, (ast.AnnAssign, ast.AugAssign)):
            if isinstance(s.target, ast.Name) and isinstance(s, ast.AnnAssign):
                return (live - {s.target.id}) | (_uses(s.value) if s.value else set())
            extra = {s.target.id} if isinstance(s.target, ast.Name) else set()
            return live | _uses(s) | extra
        if isinstance(s, ast.If):
            return _uses(s.test) | self.block(s.body, live) | self.block(s.orelse, live)
        if isinstance(s, (ast.For, ast.While)):
            return self.loop(s, live)
        if isinstance(s, ast.Break):
            return set(self.jumps[-1][1]) if self.jumps else live
        if isinstance(s, ast.Continue):
            return set(self.jumps[-1][0]) if self.jumps else live
        if isinstance(s, ast.With):
            inner = self.block(s.body, live)
            kills = set().union(*(_target_names(i.optional_vars) for i in s.items if i.optional_vars))
            return (inner - kills) | set().union(*(_uses(i.context_expr) for i in s.items))
        if isinstance(s, ast.Return):
            return _uses(s)
        return live | _uses(s)  # Expr, Assert, Raise, Pass, Try, Match, defs...: no kills

    def loop(self, s: ast.For | ast.While, live: set[str]) -> set[str]:
        after = self.block(s.orelse, live)
        head = set(after)
        while True:
            self.jumps.append((head, after))
            body_in = self.block(s.body, head)
            self.jumps.pop()
            if isinstance(s, ast.For):
                new = after | (body_in - _plain_targets(s.target)) | _uses(s.target)
            else:
                new = after | body_in | _uses(s.test)
            if new <= head:
                break
            head |= new
        self.at[s] = (after, body_in)
        return head | (_uses(s.iter) if isinstance(s, ast.For) else set())


def _plain_targets(t: ast.AST) -> set[str]:
    """Names an assignment target certainly rebinds (names and tuple/list unpacking of names)."""
    if isinstance(t, ast.Name):
        return {t.id}
    if isinstance(t, (ast.Tuple, ast.List)):
        return set().union(*(_plain_targets(e) for e in t.elts)) if t.elts else set()
    return set()


# ---- runtime resolution against the kernel frame -----------------------------------------------------
def runtime_reason(site: LoopSite, f_locals: dict[str, Any], f_globals: dict[str, Any], kernel_files: set[str],
                   sim_types: tuple[type, ...]) -> str | None:
    """Why the body's calls and subscripts are unsafe with the objects the names now hold, or None.

    The answer depends only on which functions the calls reach and on the types of everything else, so it
    is kept per loop and fingerprint (:func:`_fingerprint`): a nested loop is checked at each instance of it.
    """
    env = _Env(f_locals, f_globals)
    found = _fingerprint(site, env, kernel_files)
    if found is None:
        return _runtime_reason(site, env, kernel_files, sim_types)
    key, callees = found
    known = _reasons.get(id(site))
    if known is None or known[0] is not site:
        if len(_reasons) >= 1024:
            _reasons.clear()
        known = _reasons[id(site)] = (site, {})
    hit = known[1].get(key)
    if hit is None:
        reason = _runtime_reason(site, env, kernel_files, sim_types)
        hit = known[1][key] = (reason, callees)   # the callees kept alive: their ids stay their own
    return hit[0]


# per loop site (by id, with the site kept): fingerprint -> (reason, the callees the fingerprint names by id)
_reasons: dict[int, tuple[LoopSite, dict[tuple, tuple[str | None, list[Any]]]]] = {}


def _fingerprint(site: LoopSite, env: "_Env", kernel_files: set[str]) -> tuple[tuple, list[Any]] | None:
    """What :func:`_runtime_reason` reads from the frame: the object each call resolves to (by identity) or
    its receiver's type, and the types of the accumulated names, store bases and indexed values; with the
    callees. None when a call reaches a kernel helper, whose check also reads the helper's own globals."""
    typed, calls = site.paths
    key: list[Any] = [type(env.resolve_path(path)) for path in typed]
    callees: list[Any] = []
    for func, receiver in calls:
        obj = env.resolve_path(func)
        if obj is _UNRESOLVED:
            key.append(type(env.resolve_path(receiver)) if receiver is not _NO_RECEIVER else None)
            continue
        target = obj if isinstance(obj, types.FunctionType) else (getattr(obj, "__wrapped__", None)
                                                                  or getattr(obj, "fn", None))
        if isinstance(target, types.FunctionType) and target.__code__.co_filename in kernel_files:
            return None
        key.append(id(obj))
        callees.append(obj)
    return tuple(key), callees


def _path(node: ast.AST) -> tuple[str, ...] | None:
    """A name or a chain of attributes of one (``nl.arange`` -> ('nl', 'arange')); None for any other
    expression (which :meth:`_Env.resolve` leaves unresolved)."""
    attrs: list[str] = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return (node.id, *reversed(attrs))


def _runtime_reason(site: LoopSite, env: "_Env", kernel_files: set[str], sim_types: tuple[type, ...]) -> str | None:
    # what this reads from the frame, _fingerprint keys the kept answers by: a new check here needs its input there
    for name in site.accumulated - site.varying:
        obj = env.resolve_path((name,))
        if not isinstance(obj, sim_types[:2]):   # Tensor, View: `+=` accumulates in place and returns itself
            return f"`{name} += ...` on a {type(obj).__name__} carries Python state between iterations"
    for base in site.store_bases:
        obj = env.resolve(base)
        if not isinstance(obj, sim_types):
            return f"subscript assignment to a {type(obj).__name__ if obj is not _UNRESOLVED else 'non-tensor'}"
    for sub in site.loads:
        obj = env.resolve(sub.value)
        if isinstance(obj, sim_types) or isinstance(obj, types.ModuleType):
            continue
        if _uses(sub.slice) & site.varying:
            return "a Python container indexed by a loop-dependent value"
    for call in site.calls:
        reason = _call_reason(call, env, kernel_files, sim_types, depth=0, varying=site.varying)
        if reason:
            return reason
    return None


_UNRESOLVED = object()


class _Env:
    def __init__(self, f_locals: dict[str, Any], f_globals: dict[str, Any]) -> None:
        self.locals, self.globals = f_locals, f_globals

    def resolve(self, node: ast.AST) -> Any:
        """What a name, or a module attribute of one, holds in the frame; ``_UNRESOLVED`` for anything else."""
        return self.resolve_path(_path(node))

    def resolve_path(self, path: tuple[str, ...] | None) -> Any:
        """:meth:`resolve` of the expression :func:`_path` turned into ``path``."""
        if path is None:
            return _UNRESOLVED
        name = path[0]
        for scope in (self.locals, self.globals, vars(builtins)):
            if name in scope:
                obj = scope[name]
                break
        else:
            return _UNRESOLVED
        for attr in path[1:]:
            if not isinstance(obj, types.ModuleType):
                return _UNRESOLVED  # only module attributes are resolved: no property code runs here
            obj = getattr(obj, attr, _UNRESOLVED)
        return obj


def _pure_module(obj: Any) -> bool:
    mod = getattr(obj, "__module__", None) or ""
    if isinstance(obj, types.ModuleType):
        mod = obj.__name__
    if mod.startswith("numpy.random") or type(obj).__name__ in ("Generator", "RandomState"):
        return False   # hidden state: a random number differs from one iteration to the next
    return any(mod == m or mod.startswith(m + ".") for m in PURE_MODULES)


def _pure_builtin(obj: Any) -> bool:
    try:
        return obj in PURE_BUILTINS
    except TypeError:  # unhashable
        return False


def _call_reason(call: ast.Call, env: _Env, kernel_files: set[str], sim_types: tuple[type, ...], depth: int,
                 varying: frozenset[str]) -> str | None:
    func = call.func
    obj = env.resolve(func)
    if obj is _UNRESOLVED and isinstance(func, ast.Attribute):
        recv = env.resolve(func.value)
        if recv is not _UNRESOLVED and not isinstance(recv, sim_types) and not _pure_module(type(recv)):
            return f"method {func.attr}() of a {type(recv).__name__}"
        if func.attr in MUTATORS:
            return f"call of mutating method {func.attr}()"
        return None  # a method of an NKI tile, an index expression, a NumPy value or a call's result
    if obj is _UNRESOLVED:
        return "a call of something that is not a named function"
    if _pure_builtin(obj):
        return None
    if isinstance(obj, types.FunctionType) and obj.__code__.co_filename in kernel_files:
        return _helper_reason(obj, call, env, kernel_files, sim_types, depth)
    if _pure_module(obj):
        wrapped = getattr(obj, "__wrapped__", None) or getattr(obj, "fn", None)
        if isinstance(wrapped, types.FunctionType) and wrapped.__code__.co_filename in kernel_files:
            return _helper_reason(wrapped, call, env, kernel_files, sim_types, depth)
        return None
    return f"call of {getattr(obj, '__qualname__', type(obj).__name__)}"


_helper_ok: dict[types.CodeType, str | None] = {}


def _helper_reason(fn: types.FunctionType, call: ast.Call, env: _Env, kernel_files: set[str],
                   sim_types: tuple[type, ...], depth: int) -> str | None:
    """A kernel helper called from the body: no hidden state, and no container handed to it."""
    if depth > 4:
        return "kernel helpers nested too deep to check"
    for arg in list(call.args) + [k.value for k in call.keywords]:
        val = env.resolve(arg.value if isinstance(arg, ast.Starred) else arg)
        if isinstance(val, (list, dict, set, bytearray)) or (
                val is not _UNRESOLVED and hasattr(val, "__dict__") and not isinstance(val, sim_types)
                and not isinstance(val, (types.ModuleType, types.FunctionType, type)) and not _pure_module(type(val))):
            return f"a mutable {type(val).__name__} passed to kernel helper {fn.__name__}"
    code = fn.__code__
    if code not in _helper_ok:
        _helper_ok[code] = None  # recursion guard
        _helper_ok[code] = _helper_static(fn)
    reason = _helper_ok[code]
    if reason:
        return reason
    node = _helper_node(fn)
    if node is None:
        return f"source of kernel helper {fn.__name__} not found"
    helper_env = _Env({}, fn.__globals__)
    local = _bound_names(node.body) | {a.arg for a in _walk(node.args) if isinstance(a, ast.arg)}
    for sub in _nodes(node):
        if isinstance(sub, ast.Call) and not (isinstance(sub.func, ast.Name) and sub.func.id in local):
            reason = _call_reason(sub, helper_env, kernel_files, sim_types, depth + 1, frozenset(local))
            if reason:
                return f"in kernel helper {fn.__name__}: {reason}"
        if isinstance(sub, ast.Subscript) and isinstance(sub.ctx, ast.Store) and isinstance(sub.value, ast.Name) \
                and sub.value.id not in local and not isinstance(helper_env.resolve(sub.value), sim_types):
            return f"kernel helper {fn.__name__} assigns into a global container"
    return None


def _helper_node(fn: types.FunctionType) -> ast.FunctionDef | None:
    _, tree = _module_ast(fn.__code__.co_filename)
    return None if tree is None else _find_function(tree, fn.__code__)


def _helper_static(fn: types.FunctionType) -> str | None:
    if fn.__closure__:
        return f"kernel helper {fn.__name__} is a closure"
    node = _helper_node(fn)
    if node is None:
        return f"source of kernel helper {fn.__name__} not found"
    inner = body_reason(node.body, top_level_loop=False, allow_return=True)
    return f"in kernel helper {fn.__name__}: {inner}" if inner else None
