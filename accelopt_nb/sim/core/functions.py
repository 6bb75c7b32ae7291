"""Numerics of ALU operators and activation functions, in fp32.

Kernels name operators either by NumPy ufunc (``np.add``) or by NKI function (``nl.add``,
``nl.exp``); both resolve here to one table entry.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from accelopt_nb.sim.core.prims import ELEMENTWISE as _ELEMENTWISE

_SQRT2 = np.float32(math.sqrt(2.0))
_INV_SQRT_PI2 = np.float32(2.0 / math.sqrt(math.pi))


def _erf(x: np.ndarray) -> np.ndarray:
    # Abramowitz & Stegun 7.1.26 refined by one Newton-free correction is ~1e-7 accurate;
    # computed in float64 then returned as float32.
    x64 = np.asarray(x, dtype=np.float64)
    s = np.sign(x64)
    a = np.abs(x64)
    t = 1.0 / (1.0 + 0.5 * a)
    # Numerical Recipes erfc approximation (fractional error < 1.2e-7 everywhere)
    y = t * np.exp(-a * a - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (
        -0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))))
    return (s * (1.0 - y)).astype(np.float32)


def _sigmoid(x, out=None):
    """1 / (1 + exp(-x)) in float32; with ``out`` (float32, may be ``x``) computed in place there."""
    with np.errstate(over="ignore"):
        y = np.negative(x, out=out)
        np.exp(y, out=y)
        np.add(y, 1.0, out=y)
        y = np.divide(1.0, y, out=y)
    return y if out is not None else y.astype(np.float32, copy=False)


def _softplus(x):
    return np.logaddexp(np.float32(0), x).astype(np.float32)


ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "copy": lambda x: x,
    "identity": lambda x: x,
    "abs": np.abs,
    "negative": np.negative,
    "sign": np.sign,
    "trunc": np.trunc,
    "floor": np.floor,
    "ceil": np.ceil,
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "reciprocal": lambda x: 1.0 / x,
    "square": np.square,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "tanh": np.tanh,
    "arctan": np.arctan,
    "sigmoid": _sigmoid,
    "relu": lambda x: np.maximum(x, 0),
    "gelu": lambda x: 0.5 * x * (1.0 + _erf(x / _SQRT2)),
    "gelu_dx": lambda x: 0.5 * (1.0 + _erf(x / _SQRT2)) + x * np.exp(-0.5 * x * x) / np.float32(math.sqrt(2 * math.pi)),
    "gelu_apprx_tanh": lambda x: 0.5 * x * (1.0 + np.tanh(np.float32(math.sqrt(2 / math.pi)) * (x + 0.044715 * x ** 3))),
    "gelu_apprx_sigmoid": lambda x: x * _sigmoid(np.float32(1.702) * x),
    # d/dx of x * sigmoid(1.702 x) (the nki front end's name; the docs give no formula, this is the derivative)
    "gelu_apprx_sigmoid_dx": lambda x: _sigmoid(np.float32(1.702) * x) * (
        1.0 + np.float32(1.702) * x * (1.0 - _sigmoid(np.float32(1.702) * x))),
    "silu": lambda x: x * _sigmoid(x),
    "silu_dx": lambda x: _sigmoid(x) * (1.0 + x * (1.0 - _sigmoid(x))),
    "erf": _erf,
    "erf_dx": lambda x: _INV_SQRT_PI2 * np.exp(-x * x),
    "softplus": _softplus,
    "mish": lambda x: x * np.tanh(_softplus(x)),
}

# Activations that are not ufuncs but compute a float32 input into ``out=`` exactly as they would into a new
# array (so a result can be computed in its destination, ``ops.deferrable``)
FLOAT32_INTO = frozenset({_sigmoid})

# Which unary functions lower to ScalarE activations (vs. cheap VectorE ALU ops).
SCALAR_ENGINE_FUNCS = {"exp", "log", "sqrt", "rsqrt", "reciprocal", "square", "sin", "cos", "tan", "tanh", "arctan",
                       "sigmoid", "relu", "gelu", "gelu_dx", "gelu_apprx_tanh", "gelu_apprx_sigmoid",
                       "gelu_apprx_sigmoid_dx", "silu", "silu_dx", "erf", "erf_dx", "softplus", "mish", "abs", "copy", "identity"}


def _divide(a, b):
    return np.divide(a, b)


def _power(a, b):
    return np.power(np.asarray(a, dtype=np.float32), b)


ALU: dict[str, Callable[[Any, Any], Any]] = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": _divide,
    "maximum": np.maximum, "minimum": np.minimum, "max": np.maximum, "min": np.minimum,
    "power": _power, "fmod": np.fmod, "mod": np.mod,
    "equal": np.equal, "not_equal": np.not_equal, "greater": np.greater, "greater_equal": np.greater_equal,
    "less": np.less, "less_equal": np.less_equal,
    "logical_and": np.logical_and, "logical_or": np.logical_or, "logical_xor": np.logical_xor,
    "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor,
    "left_shift": np.left_shift, "right_shift": np.right_shift,
    "bypass": lambda a, b: a,
}


def _unary_alu(fn: Callable[..., Any]) -> Callable[..., Any]:
    """An "arithmetic unary" ALU operator (the NKI docs' ALU table): ``op(data)``, its scalar operand ignored."""
    def alu(a: Any, b: Any, out: Any = None) -> Any:
        y = fn(a)
        if out is None:
            return y
        np.copyto(out, y)
        return out
    return alu


# abs, square, relu, rsqrt, reciprocal and copy may fill an op0/op1 field (nki.api.shared "ALU operators")
UNARY_ALU = {"abs": np.abs, "square": np.square, "relu": lambda x: np.maximum(x, 0),
             "rsqrt": lambda x: 1.0 / np.sqrt(x), "reciprocal": lambda x: 1.0 / x, "copy": lambda x: x}
ALU.update({name: _unary_alu(fn) for name, fn in UNARY_ALU.items()})

# the tables' functions, each elementwise (an element of the result depends on the same element of each operand):
# they run over lanes like any broadcast axis (core.prims.is_elementwise)
ELEMENTWISE = frozenset(ACTIVATIONS.values()) | frozenset(ALU.values())
_ELEMENTWISE.update(ELEMENTWISE)

BITWISE = {"bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift"}
COMPARISON = {"equal", "not_equal", "greater", "greater_equal", "less", "less_equal",
              "logical_and", "logical_or", "logical_xor"}

# Reductions usable in tensor_reduce / nl.sum etc.
REDUCE: dict[str, Callable[..., np.ndarray]] = {
    "add": np.sum, "sum": np.sum, "maximum": np.max, "max": np.max, "minimum": np.min, "min": np.min,
    "multiply": np.prod, "prod": np.prod, "bitwise_or": np.bitwise_or.reduce, "bitwise_and": np.bitwise_and.reduce,
    "logical_and": np.all, "logical_or": np.any, "all": np.all,
}

_UFUNC_NAMES = {
    np.add: "add", np.subtract: "subtract", np.multiply: "multiply", np.divide: "divide", np.true_divide: "divide",
    np.maximum: "maximum", np.minimum: "minimum", np.power: "power", np.fmod: "fmod", np.mod: "mod",
    np.equal: "equal", np.not_equal: "not_equal", np.greater: "greater", np.greater_equal: "greater_equal",
    np.less: "less", np.less_equal: "less_equal", np.logical_and: "logical_and", np.logical_or: "logical_or",
    np.logical_xor: "logical_xor", np.bitwise_and: "bitwise_and", np.bitwise_or: "bitwise_or",
    np.bitwise_xor: "bitwise_xor", np.left_shift: "left_shift", np.right_shift: "right_shift",
    np.exp: "exp", np.log: "log", np.sqrt: "sqrt", np.square: "square", np.sin: "sin", np.cos: "cos",
    np.tan: "tan", np.tanh: "tanh", np.arctan: "arctan", np.abs: "abs", np.negative: "negative",
    np.sign: "sign", np.floor: "floor", np.ceil: "ceil", np.trunc: "trunc", np.reciprocal: "reciprocal",
    np.sum: "add", np.max: "max", np.min: "min", np.prod: "multiply", np.amax: "max", np.amin: "min",
}


def op_name(op: Any) -> str | None:
    """Name of an operator given as a NumPy function, an nl function, or a string."""
    if op is None:
        return None
    if isinstance(op, str):
        return op
    name = getattr(op, "_nki_name", None)
    if name is not None:
        return name
    try:
        return _UFUNC_NAMES.get(op)
    except TypeError:
        return None
