"""The evaluation service: is a candidate kernel correct, and how fast is it?

>>> from accelopt_nb.evaluation import evaluate
>>> result = evaluate("silu", kernel_source)             # doctest: +SKIP
>>> result.status, result.latency_ms                     # doctest: +SKIP

Modules, in the order an evaluation flows through them:

* :mod:`.static_check` refuses kernels that reach beyond NumPy, math and NKI or rebind them;
* :mod:`.sandbox` / :mod:`.worker` start the judge in a limited, separate process (or
  :mod:`.pool` keeps warm ones);
* :mod:`.engine` is the judge: it takes each input set from :mod:`.datacache`, has the kernel run
  by :mod:`.runner` (a forked, limited child, the only process that executes it) on a backend
  from :mod:`.backends` (simulator or neuron), checks the plain outputs itself
  (:mod:`.correctness`) and decides the status; :mod:`.profile` is the profile contract;
* :mod:`.run` runs one job now (static check, then the judge in a sandbox); :mod:`.executors`
  decide where jobs run (a local pool, Dask, this process); :mod:`.service` is the one way every
  caller evaluates: the result cache (:mod:`.cache`), dedupe and the fidelity rules over an
  executor; :mod:`.api` is the front door (``make_job``, ``evaluate``).

Importing this package stays light (no NumPy-heavy or Dask imports): the sandbox worker imports
it on every start.
"""
from __future__ import annotations

from typing import Any

from accelopt_nb.evaluation.job import (EVALUATOR_VERSION, FIDELITIES, PAPER_SEEDS, EvalJob,
                                        EvalOptions, Fidelity, NeuronOptions, ProblemRef)
from accelopt_nb.evaluation.result import CheckResult, EvalResult, Status

__all__ = [
    "EVALUATOR_VERSION", "FIDELITIES", "Fidelity", "PAPER_SEEDS", "EvalJob", "EvalOptions", "NeuronOptions", "ProblemRef",
    "CheckResult", "EvalResult", "Status", "evaluate", "evaluate_task_file", "make_job", "run_job",
    "EvalCache", "EvalService", "LocalPoolEvaluator", "DaskEvaluator", "InProcessEvaluator", "evaluate_many",
    "check_kernel_source",
    "ProfileRecord", "register_backend",
]

_LAZY = {
    "evaluate": "api", "evaluate_task_file": "api", "make_job": "api", "run_job": "api",
    "EvalCache": "cache", "EvalService": "service", "LocalPoolEvaluator": "executors",
    "DaskEvaluator": "executors", "InProcessEvaluator": "executors", "evaluate_many": "service",
    "check_kernel_source": "static_check",
    "ProfileRecord": "profile", "register_backend": "backends",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib
        module = importlib.import_module(f"accelopt_nb.evaluation.{_LAZY[name]}")
        return getattr(module, name)
    raise AttributeError(f"module 'accelopt_nb.evaluation' has no attribute {name!r}")
