"""Backends as plug-ins: a name maps to ``"module:Factory"``, imported only where a kernel runs.

``Factory(job, workdir)`` (a class or function) returns a :class:`~.base.Backend`. The built-in
ones are the CPU simulator and real Trainium (``neuron``); :func:`register_backend` adds more
(register it in a module the evaluation workers import, e.g. through ``ACCELOPT_EVAL_PRELOAD``).
Importing this package is light: names only, no backend code.
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from accelopt_nb.errors import ConfigError, EvaluationError

BUILTIN_BACKENDS: dict[str, str] = {
    "simulator": "accelopt_nb.evaluation.backends.simulator:SimulatorBackend.for_job",
    "neuron": "accelopt_nb.evaluation.backends.neuron:NeuronBackend.for_job",
}
_REGISTRY: dict[str, str] = dict(BUILTIN_BACKENDS)
# Backends whose trace-only profile is the profile of a run with values: the simulator's performance model
# reads only the instruction stream, which does not depend on the values. A search may then confirm a
# screened kernel for correctness only and keep its screening profile. Real hardware measures: not here.
_EXACT_TRACE_PROFILE: set[str] = {"simulator"}


def register_backend(name: str, target: str, *, exact_trace_profile: bool = False) -> None:
    """Make ``name`` a backend built by ``target`` (``"module:callable"``, called with job, workdir);
    ``exact_trace_profile``: its trace-only profile equals the profile of a run with values."""
    if ":" not in target:
        raise ConfigError(f"backend target {target!r} must be 'module:callable'")
    _REGISTRY[name] = target
    (_EXACT_TRACE_PROFILE.add if exact_trace_profile else _EXACT_TRACE_PROFILE.discard)(name)


def exact_trace_profile(name: str) -> bool:
    """Whether backend ``name``'s trace-only profile is the profile of a run with values."""
    return name in _EXACT_TRACE_PROFILE


def backend_names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def make_backend(job: Any, workdir: Path) -> Any:
    """The backend for ``job.backend``, built for this job (called in the runner process)."""
    target = _REGISTRY.get(job.backend)
    if target is None:
        raise EvaluationError(f"unknown backend {job.backend!r} (known: {', '.join(_REGISTRY)})")
    module_name, attr = target.split(":")
    factory: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        factory = getattr(factory, part)
    return factory(job, Path(workdir))
