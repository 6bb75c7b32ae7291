"""Safe evaluation of the arithmetic expressions in ``problem.yaml`` (peak formulas, constraints).

Expressions are written over the shape parameters, e.g. ``4*(M*N + N*K + M*K)`` or
``M % 128 == 0``. Only numbers, parameter names, arithmetic, comparisons and ``and``/``or``/``not``
are allowed, so a problem file can never execute code.
"""
from __future__ import annotations

import ast
import operator
from typing import Mapping

from accelopt_nb.errors import ProblemError
from accelopt_nb.pyutil import parse

_BINOPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_CMPOPS = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
}
_FUNCS = {"min": min, "max": max, "ceil_div": lambda a, b: -(-a // b)}


def evaluate(expr: str | int | float, names: Mapping[str, int | float], *,
             where: str = "expression") -> float | int | bool:
    """Evaluate ``expr`` with ``names`` bound; raise :class:`ProblemError` naming ``where`` on any problem."""
    if isinstance(expr, (int, float)) and not isinstance(expr, bool):
        return expr
    try:
        tree = parse(str(expr), mode="eval")
    except SyntaxError as exc:
        raise ProblemError(f"{where}: cannot parse {expr!r}: {exc.msg}") from exc
    return _eval(tree.body, names, str(expr), where)


def _eval(node: ast.AST, names: Mapping[str, int | float], src: str, where: str):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in names:
            raise ProblemError(f"{where}: {src!r} uses unknown name {node.id!r} (known: {', '.join(sorted(names))})")
        return names[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return _BINOPS[type(node.op)](_eval(node.left, names, src, where), _eval(node.right, names, src, where))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd, ast.Not)):
        v = _eval(node.operand, names, src, where)
        return -v if isinstance(node.op, ast.USub) else (+v if isinstance(node.op, ast.UAdd) else not v)
    if isinstance(node, ast.BoolOp):
        vals = [_eval(v, names, src, where) for v in node.values]
        return all(vals) if isinstance(node.op, ast.And) else any(vals)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, names, src, where)
        for op, comp in zip(node.ops, node.comparators):
            if type(op) not in _CMPOPS:
                break
            right = _eval(comp, names, src, where)
            if not _CMPOPS[type(op)](left, right):
                return False
            left = right
        else:
            return True
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS
            and not node.keywords):
        return _FUNCS[node.func.id](*(_eval(a, names, src, where) for a in node.args))
    raise ProblemError(f"{where}: {src!r} contains an unsupported construct ({type(node).__name__}); "
                       "only numbers, shape names, + - * / // % **, comparisons, and/or/not, min, max, ceil_div")
