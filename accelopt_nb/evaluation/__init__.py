"""The evaluation service: is a candidate kernel correct, and how fast is it?

>>> from accelopt_nb.evaluation import evaluate
>>> result = evaluate("silu", kernel_source)             # doctest: +SKIP
>>> result.status, result.latency_ms                     # doctest: +SKIP

Modules, in the order an evaluation flows through them:

* :mod:`.static_check` refuses kernels that reach beyond NumPy, math and NKI;
* :mod:`.sandbox` / :mod:`.worker` run the evaluation in a limited, separate process;
* :mod:`.engine` runs the seeds and adversarial inputs and decides the status
  (:mod:`.correctness` holds the checks), on :mod:`.simulator` or :mod:`.neuron` (hardware);
* :mod:`.api` ties these together (``evaluate``), :mod:`.cache` remembers results and
  :mod:`.executors` evaluates many kernels at once, locally or on Dask.

Importing this package stays light (no NumPy-heavy or Dask imports): the sandbox worker imports
it on every start.
"""
from __future__ import annotations

from typing import Any

from accelopt_nb.evaluation.job import (EVALUATOR_VERSION, PAPER_SEEDS, EvalJob, EvalOptions,
                                        NeuronOptions, ProblemRef)
from accelopt_nb.evaluation.result import CheckResult, EvalResult, Status

__all__ = [
    "EVALUATOR_VERSION", "PAPER_SEEDS", "EvalJob", "EvalOptions", "NeuronOptions", "ProblemRef",
    "CheckResult", "EvalResult", "Status", "evaluate", "evaluate_task_file", "make_job", "run_job",
    "EvalCache", "LocalPoolEvaluator", "DaskEvaluator", "evaluate_many", "check_kernel_source",
]

_LAZY = {
    "evaluate": "api", "evaluate_task_file": "api", "make_job": "api", "run_job": "api",
    "EvalCache": "cache", "LocalPoolEvaluator": "executors", "DaskEvaluator": "executors",
    "evaluate_many": "executors", "check_kernel_source": "static_check",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib
        module = importlib.import_module(f"accelopt_nb.evaluation.{_LAZY[name]}")
        return getattr(module, name)
    raise AttributeError(f"module 'accelopt_nb.evaluation' has no attribute {name!r}")
