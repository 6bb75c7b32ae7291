"""The simulator's API boundary: every ``nl`` / ``nisa`` call a kernel makes is checked here first.

Kernels reach the simulator only through the facade modules (``neuronxcc.nki.language`` /
``.isa`` and the standalone ``nki.language`` / ``nki.isa``). :func:`guard_module` wraps each
facade function once, at import, with the signature the NKI docs of that front end give it
(``nki_api.yaml``). A call is then bound the documented way, and

- a keyword neither the docs nor the simulator know is refused (a keyword is never swallowed);
- a documented argument whose effect the simulator does not model is refused unless it has its
  documented default: a parameter the simulator's function does not take, one it takes but never
  reads (found in its bytecode, so the check lifts by itself once the code uses it), or a
  :data:`LIMITS` entry;
- a ``dtype`` or ``engine`` value the simulator does not know is refused;
- a documented argument that cannot change a result (:data:`NO_EFFECT`, e.g. ``name``) is dropped;
- a documented name the facade lacks raises on first use (an AttributeError that names the API).

Every refusal is an :class:`UnsupportedAPIError` naming the API, the argument and the reason, at
the kernel's file and line. Simulator modules call each other directly, never through the guard.
"""
from __future__ import annotations

import ast
import dis
import functools
import inspect
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import yaml

from accelopt_nb.errors import UnsupportedAPIError
from accelopt_nb.sim.api import generations as _generations
from accelopt_nb.sim.api import isa as _isa
from accelopt_nb.sim.core import dtypes as _dt
from accelopt_nb.sim.core.context import active

API_FILE = Path(__file__).with_name("nki_api.yaml")
FRONT_END_PREFIX = {"neuronxcc": "neuronxcc.nki", "nki": "nki"}
SHORT = {"language": "nl", "isa": "nisa"}


@dataclass(frozen=True)
class Limit:
    """A documented parameter the simulator does not model: only its default (or ``allowed``) runs."""

    reason: str
    allowed: tuple[Any, ...] = ()
    accepts: Callable[[Any], bool] | None = None  # a value test for what the simulator does model
    while_unread: bool = False                      # lifts once the simulator's function reads the parameter


IGNORED = Limit("the simulator ignores this argument")


# Documented parameters that cannot change what a kernel computes: accepted and dropped.
NO_EFFECT: dict[str, str] = {
    "name": "an instruction/tensor name for debugging",
    "priority": "DMA queue priority (scheduling only)",
    "dge_mode": "which DMA descriptor generator runs the copy (scheduling only)",
}

# Per-API documented parameters that cannot change a result there, by "module.api".
# (Loop hints are used by AWS's own kernels without being in the API reference.)
NO_EFFECT_FOR: dict[str, dict[str, str]] = {
    "isa.dma_copy": {"engine": "which engine's DMA queue issues the copy (scheduling only)"},
    "language.affine_range": {"precise_schedule": "a compiler scheduling hint"},
}


# Documented parameters the simulator reads but models only in part, or forwards to code that ignores
# them, by "module.api" (both front ends). Parameters it never reads need no entry (see _unread).
LIMITS: dict[str, dict[str, Limit]] = {
}

# Why a documented API is not simulated, where there is a reason beyond "not yet" (by "module.api"): the refusal
# and docs/nki_coverage.md say it.
_TRN3 = "NeuronCore-v4 (trn3) only; the simulator models trn1/trn2"
_LNC = "synchronizes the NeuronCores of an LNC=2 launch; the simulator runs SPMD programs one after another"
_RNG = "the hardware random number streams are not documented bit-exactly"
MISSING_WHY: dict[str, str] = {
    **{f"isa.{n}": _TRN3 for n in ("nc_matmul_mx", "quantize_mx", "activate2", "exponential",
                                    "tensor_scalar_cumulative", "rand2")},
    **{f"isa.{n}": _LNC for n in ("core_barrier", "sendrecv")},
    **{f"isa.{n}": _RNG for n in ("rng", "rand_set_state", "rand_get_state", "set_rng_seed")},
    "isa.topk": "the docs do not say where each of the K results lands in val_dst / idx_dst (their text says per "
                "partition, the input is a 16-partition snake, and the NKI library's gpsimd_topk de-snakes the "
                "outputs): a guessed layout would give silently wrong values",
    "isa.NkiInstruction": "instruction handles (.depends_on scheduling edges) are not modelled: the simulator's "
                          "nki.isa calls return None",
}

# Documented parameter names the simulator's function spells differently (doc name -> simulator name),
# by "module.api": the standalone nki docs renamed some parameters of the same operation.
ALIASES: dict[str, dict[str, str]] = {
    "language.copy": {"x": "src"},
    "language.broadcast_to": {"x": "src"},
    "language.zeros_like": {"x": "a"},
    "language.empty_like": {"x": "a"},
    "language.expand_dims": {"x": "data"},
    "language.device_print": {"print_prefix": "prefix", "tensor": "x"},
}

# Helpers the simulator's modules import for themselves: not NKI, so not part of any facade.
INTERNAL = frozenset({"IndexExpr", "Mask", "ParDim", "Tensor", "View", "Operand", "as_view", "current", "op_name",
                      "operand", "read", "write", "combine_written", "field"})


class UnknownNameError(UnsupportedAPIError, AttributeError):
    """A name a facade module does not have: an AttributeError (hasattr works) that names the API."""


# ---- value checks ----------------------------------------------------------------------------------
NKI_DTYPES = frozenset(list(_dt.FLOAT_WIDTH) + ["int8", "int16", "int32", "uint8", "uint16", "uint32"])


def _check_dtype(api: str, arg: str, value: Any) -> None:
    if value is None:
        return
    try:
        known = _dt.name(value) in NKI_DTYPES
    except _dt.UnknownDTypeError as exc:
        if isinstance(value, _dt.NC4Only):
            raise _refuse(api, arg, exc.message) from None
        known = False
    except TypeError:
        known = False
    if not known:
        raise _refuse(api, arg, f"unknown dtype {value!r} (NKI dtypes: nl.float32, nl.bfloat16, nl.float16, "
                                "nl.tfloat32, nl.float8_e4m3, nl.float8_e4m3fn, nl.float8_e5m2, nl.int8/16/32, "
                                "nl.uint8/16/32, nl.bool_)") from None


def _check_engine(api: str, arg: str, value: Any) -> None:
    engine = _isa.engine
    if value is None or isinstance(value, engine):
        return
    try:
        engine(int(value))
    except (TypeError, ValueError):
        raise _refuse(api, arg, f"unknown engine {value!r} (engines: "
                                f"{', '.join('nisa.' + e.name + '_engine' for e in engine)})") from None


VALUE_CHECKS: dict[str, Callable[[str, str, Any], None]] = {"dtype": _check_dtype, "engine": _check_engine}


def _refuse(api: str, arg: str | None, reason: str,
            cls: type[UnsupportedAPIError] = UnsupportedAPIError) -> UnsupportedAPIError:
    what = f"argument '{arg}': " if arg else ""
    err = cls(f"{what}{reason}", api=api)
    rt = active()
    if rt is not None:
        err.locate(*rt.location())
    return err


# ---- the documented API ------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def api_file() -> dict:
    """nki_api.yaml as it is: per front end, the docs release and source, and the APIs per module."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(API_FILE.read_text(), Loader=loader)  # noqa: S506 - a safe loader


@functools.lru_cache(maxsize=1)
def documented() -> dict:
    """front end -> module -> {name: api entry}."""
    return {fe: {mod: {a["name"]: a for a in m["apis"]} for mod, m in entry["modules"].items()}
            for fe, entry in api_file()["front_ends"].items()}


def doc_signature(entry: dict | None) -> inspect.Signature | None:
    """The documented signature as an inspect.Signature whose defaults are source strings."""
    if not entry or entry.get("kind") != "function":
        return None
    return _parse_signature(entry["signature"])


@functools.lru_cache(maxsize=None)
def _parse_signature(text: str) -> inspect.Signature:  # many APIs share one signature text
    fn = ast.parse(f"def f({text}): pass").body[0]
    a = fn.args  # type: ignore[attr-defined]
    params: list[inspect.Parameter] = []
    positional = a.posonlyargs + a.args
    pos_defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    for arg, d in zip(positional, pos_defaults):
        params.append(inspect.Parameter(arg.arg, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                        default=inspect.Parameter.empty if d is None else ast.unparse(d)))
    if a.vararg is not None:
        params.append(inspect.Parameter(a.vararg.arg, inspect.Parameter.VAR_POSITIONAL))
    for arg, d in zip(a.kwonlyargs, a.kw_defaults):
        params.append(inspect.Parameter(arg.arg, inspect.Parameter.KEYWORD_ONLY,
                                        default=inspect.Parameter.empty if d is None else ast.unparse(d)))
    if a.kwarg is not None:
        params.append(inspect.Parameter(a.kwarg.arg, inspect.Parameter.VAR_KEYWORD))
    return inspect.Signature(params)


_UNRESOLVED = object()


def resolve_default(text: Any, namespace: dict[str, Any]) -> Any:
    """A documented default (source text) as a value: a literal, or a name in the facade module."""
    if not isinstance(text, str):
        return text
    ok, value = _literal(text)
    if ok:
        return value
    if text in ("bool", "float", "int"):
        return {"bool": bool, "float": float, "int": int}[text]
    head, *rest = text.split(".")
    obj = np if head in ("np", "numpy") else namespace.get(head, _UNRESOLVED)
    for part in rest:
        obj = getattr(obj, part, _UNRESOLVED)
        if obj is _UNRESOLVED:
            break
    return obj


@functools.lru_cache(maxsize=None)
def _literal(text: str) -> tuple[bool, Any]:
    try:
        return True, ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return False, None


# ---- the guard ---------------------------------------------------------------------------------------
_LOADS = frozenset({"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_DEREF", "LOAD_CLOSURE"})


def _unread(fn: Callable) -> frozenset[str]:
    """Parameters of the simulator function that its code never reads: accepted, then ignored.

    Parameters a wrapper forwards through ``*args``/``**kwargs`` are looked up in the function it
    wraps (``__wrapped__``).
    """
    unread: set[str] = set()
    seen: set[str] = set()
    while fn is not None and hasattr(fn, "__code__"):
        code = fn.__code__
        n = code.co_argcount + code.co_kwonlyargcount
        params = [p for p in code.co_varnames[:n] if p not in seen]
        loaded = {i.argval for i in dis.get_instructions(code) if i.opname in _LOADS}
        unread |= {p for p in params if p not in loaded}
        seen |= set(code.co_varnames[:n])
        fn = getattr(fn, "__wrapped__", None)
    return frozenset(unread)


def public_params(sig: inspect.Signature) -> dict[str, inspect.Parameter]:
    return {n: p for n, p in sig.parameters.items() if not n.startswith("_")
            and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


def _positional(sig: inspect.Signature) -> list[str] | None:
    """Names of the positional parameters, or None when *args takes any number."""
    if any(p.kind == p.VAR_POSITIONAL for p in sig.parameters.values()):
        return None
    return [n for n, p in sig.parameters.items() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            and not n.startswith("_")]


@dataclass(frozen=True)
class Arg:
    """How one argument (by its documented name) reaches the simulator."""

    target: str | None                      # simulator parameter, or None: dropped
    check: Callable[[str, str, Any], None] | None
    limit: Limit | None
    defaults: tuple[Any, ...]               # values that pass a limit


@dataclass
class Spec:
    """One guarded API: how positionals and keywords of a documented call map onto the simulator."""

    api: str
    signature: inspect.Signature            # the simulator function's (to tell a bad call from a failure)
    direct: int | None                      # leading positionals passed as they are (None: any number)
    remapped: tuple[str, ...]               # documented positional names after those, passed by keyword
    args: dict[str, Arg]                    # every keyword a call may use
    by_position: tuple[str, ...]            # documented names the simulator takes through *args only
    positional_names: tuple[str, ...]       # documented names of the direct positionals
    positional_args: tuple[Arg | None, ...]  # the Arg of each direct positional (for checks and limits)
    min_nc_version: int | None = None       # the docs' first NeuronCore generation of the API (generations.py)


def build_spec(api: str, key: str, impl: inspect.Signature, doc: inspect.Signature | None,
               namespace: dict[str, Any], unread: frozenset[str] = frozenset()) -> Spec:
    impl_params = public_params(impl)
    doc_params = public_params(doc) if doc is not None else {}
    aliases = ALIASES.get(key, {})
    limits = LIMITS.get(key, {})
    no_effect = {**NO_EFFECT, **NO_EFFECT_FOR.get(key, {})}
    impl_pos = _positional(impl)
    doc_pos = _positional(doc) if doc is not None else None
    by_position = tuple(doc_pos) if impl_pos is None and doc_pos else ()

    def arg_for(doc_name: str) -> Arg:
        target = aliases.get(doc_name, doc_name)
        limit = limits.get(doc_name)
        if target in impl_params and target not in unread and limit is not None and limit.while_unread:
            limit = None  # the simulator models it now
        if limit is None and target in unread and doc_name not in no_effect:
            limit = IGNORED
        candidates: list[Any] = []
        if doc_name in doc_params and doc_params[doc_name].default is not inspect.Parameter.empty:
            candidates.append(resolve_default(doc_params[doc_name].default, namespace))
        if target in impl_params and impl_params[target].default is not inspect.Parameter.empty:
            candidates.append(impl_params[target].default)
        if doc_name in by_position:  # reaches the simulator's *args
            return Arg("*", VALUE_CHECKS.get(doc_name), limit, tuple(candidates))
        if target not in impl_params:
            if doc_name in no_effect:
                return Arg(None, VALUE_CHECKS.get(doc_name), None, ())
            limit = limit or Limit("not implemented by the simulator")
            target = None
        if limit is not None:
            candidates += list(limit.allowed)
        return Arg(target, VALUE_CHECKS.get(doc_name), limit, tuple(c for c in candidates if c is not _UNRESOLVED))

    args = {n: arg_for(n) for n in doc_params}
    for n in list(impl_params) + list(no_effect):  # simulator extensions beyond the docs; name= anywhere
        if n not in args:
            args[n] = arg_for(n)
    if impl_pos is None:
        direct, remapped = None, ()
    elif doc_pos is None:
        direct, remapped = len(impl_pos), ()
    else:
        direct = 0
        while (direct < min(len(doc_pos), len(impl_pos))
               and aliases.get(doc_pos[direct], doc_pos[direct]) == impl_pos[direct]):
            direct += 1
        remapped = tuple(doc_pos[direct:])
    names = tuple((doc_pos if doc_pos is not None else impl_pos or [])[:direct or 0])
    return Spec(api, impl, direct, remapped, args, by_position, names, tuple(args.get(n) for n in names))


def _passes(value: Any, defaults: tuple[Any, ...]) -> bool:
    for d in defaults:
        if value is d:
            return True
        if isinstance(value, (bool, int, float, str, tuple, type(None))) and type(value) is type(d) and value == d:
            return True
        if isinstance(value, np.dtype) or isinstance(d, np.dtype):
            try:
                if _dt.name(value) == _dt.name(d):
                    return True
            except TypeError:
                pass
    return False


def _check_arg(spec: Spec, name: str, arg: Arg, value: Any) -> None:
    if arg.limit is not None and not _passes(value, arg.defaults) and not (
            arg.limit.accepts is not None and arg.limit.accepts(value)):
        raise _refuse(spec.api, name, f"{arg.limit.reason} (got {value!r})")
    if arg.check is not None:
        arg.check(spec.api, name, value)


def guarded(fn: Callable, spec: Spec) -> Callable:
    """``fn`` behind the boundary checks of ``spec``."""
    direct, remapped, args_map, by_position = spec.direct, spec.remapped, spec.args, spec.by_position
    checked_positions = tuple((i, spec.positional_names[i], a) for i, a in enumerate(spec.positional_args)
                              if a is not None and (a.limit is not None or a.check is not None))

    min_nc = spec.min_nc_version

    @functools.wraps(fn)
    def api(*args, **kwargs):
        if min_nc is not None:
            rt = active()
            if rt is not None and rt.target is not None and rt.target.nc_version < min_nc:
                err = _generations.refusal(spec.api, "this API", min_nc, rt.target,
                                           f"its API reference: 'Available only on NeuronCore-v{min_nc} and newer'")
                raise err.locate(*rt.location())
        if direct is not None and len(args) > direct:
            extra = args[direct:]
            if len(extra) > len(remapped):
                raise _refuse(spec.api, None, f"takes at most {direct + len(remapped)} positional arguments, "
                                              f"got {len(args)}")
            for name, value in zip(remapped, extra):
                if name in kwargs:
                    raise _refuse(spec.api, name, "given both by position and by keyword")
                kwargs[name] = value
            args = args[:direct]
        for i, name, a in checked_positions:
            if i < len(args):
                _check_arg(spec, name, a, args[i])
        if by_position and kwargs:  # documented keywords of a *args function: put them in place
            args = list(args)
            for n in by_position[len(args):]:
                if n not in kwargs:
                    break
                args.append(kwargs.pop(n))
            for n in by_position:
                if n in kwargs:
                    raise _refuse(spec.api, n, "pass the earlier positional arguments too (the simulator takes "
                                               "them by position)")
        if kwargs:
            passed = {}
            for k, v in kwargs.items():
                a = args_map.get(k)
                if a is None:
                    known = ", ".join(args_map) or "none"
                    raise _refuse(spec.api, k, f"unknown keyword (the documented and simulated keywords are: {known})")
                if a.limit is not None or a.check is not None:
                    _check_arg(spec, k, a, v)
                if a.target is not None:
                    passed[a.target] = v
            kwargs = passed
        rt = active()
        if rt is not None and rt.calls is not None:   # the program hash (core/hooks.py, core/program.py)
            rt.calls.call(spec.api, args, kwargs)
        try:
            return fn(*args, **kwargs)
        except TypeError:
            try:  # the kernel's call does not fit the function: the kernel's error, not the simulator's
                spec.signature.bind(*args, **kwargs)
            except TypeError as bad:
                raise _refuse(spec.api, None, f"bad arguments: {bad}") from None
            raise

    api.__nki_spec__ = spec  # type: ignore[attr-defined]
    return api


def _is_nki_name(name: str, obj: Any, kind: str) -> bool:
    """Whether a facade attribute belongs there: documented NKI, or a public simulator definition."""
    if any(name in mods.get(kind, {}) for mods in documented().values()):
        return True
    owner = getattr(obj, "__module__", None) or getattr(type(obj), "__module__", "")
    return (not inspect.ismodule(obj) and str(owner).startswith("accelopt_nb.sim") and name not in INTERNAL
            and not name.startswith("_"))


def guard_module(module: types.ModuleType, front_end: str, kind: str) -> None:
    """Wrap every simulator function of a facade module; documented-but-missing names raise on use."""
    docs = documented().get(front_end, {}).get(kind, {})
    prefix = f"{FRONT_END_PREFIX[front_end]}.{kind}"
    namespace = dict(module.__dict__)
    undocumented = frozenset(module.__dict__.get("__nki_undocumented__", ()))   # names real kernels use anyway
    for name, obj in list(module.__dict__.items()):
        if name.startswith("__"):
            continue
        if name not in undocumented and not _is_nki_name(name, obj, kind):
            delattr(module, name)  # a helper the simulator imported for itself
            continue
        if not inspect.isfunction(obj) or not obj.__module__.startswith("accelopt_nb.sim"):
            continue
        spec = build_spec(f"{prefix}.{name}", f"{kind}.{name}", inspect.signature(obj),
                          doc_signature(docs.get(name)), namespace, _unread(obj))
        spec.min_nc_version = (docs.get(name) or {}).get("min_nc_version")
        setattr(module, name, guarded(obj, spec))
    missing = frozenset(n for n in docs if n not in module.__dict__)

    def __getattr__(name: str) -> Any:
        if name in missing:
            why = MISSING_WHY.get(f"{kind}.{name}")
            raise _refuse(f"{prefix}.{name}", None, "documented NKI API that the simulator does not implement"
                          + (f" ({why})" if why else ""), UnknownNameError)
        raise _refuse(f"{prefix}.{name}", None, f"module {module.__name__!r} has no attribute {name!r} (not an NKI "
                      "API of this front end)", UnknownNameError)

    module.__getattr__ = __getattr__  # type: ignore[attr-defined]
