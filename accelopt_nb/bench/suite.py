"""The benchmark itself: one evaluation job per problem, through the evaluation service, one row each.

A :class:`BenchCase` is a problem and the :class:`~accelopt_nb.evaluation.EvalJob` that checks
and profiles its kernel; :func:`run_bench` hands the jobs to an
:class:`~accelopt_nb.evaluation.service.EvalService` and turns each result into a table row with
the problem's peak (% of peak, bound, traffic efficiency). Where the jobs run is the service's
executor: in this process by default on the simulator (trusted kernels: fast), warm sandboxed
workers with ``workers > 1`` or ``sandbox=True``, one sandbox per kernel on real Trainium.
"""
from __future__ import annotations

import time
from concurrent.futures import Future, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from accelopt_nb.errors import AccelOptError, BackendUnavailableError, ConfigError
from accelopt_nb.evaluation import EvalJob, EvalOptions, EvalResult, ProblemRef, Status
from accelopt_nb.evaluation.api import make_job
from accelopt_nb.evaluation.backends import backend_names
from accelopt_nb.evaluation.job import PAPER_SEEDS, PROFILE_SEED
from accelopt_nb.evaluation.profile import latency_ms_from_profile
from accelopt_nb.evaluation.service import EvalService
from accelopt_nb.perf.hardware import presets as hardware_names

__all__ = ["COLUMNS", "ENGINE_FIELDS", "BenchCase", "bench_service", "make_cases", "row", "run_bench",
           "summarize"]

#: Profile fields copied into the table (neuron-profile summary-json names, fractions in [0, 1]).
ENGINE_FIELDS = {"tensor_active": "tensor_engine_active_time_percent",
                 "vector_active": "vector_engine_active_time_percent",
                 "scalar_active": "scalar_engine_active_time_percent",
                 "gpsimd_active": "gpsimd_engine_active_time_percent",
                 "dma_active": "dma_active_time_percent"}

COLUMNS = ["problem", "preset", "hw", "backend", "status", "correct", "max_rel_error", "tolerance",
           "latency_ms", "latency_low_ms", "latency_high_ms", "kernel_class", "peak_ms", "bound", "pct_peak",
           "profile_bound", "estimate_note", *ENGINE_FIELDS,
           "hbm_read_bytes", "hbm_write_bytes", "hbm_bytes", "min_hbm_bytes", "traffic_efficiency",
           "spill_save_bytes", "spill_reload_bytes", "instructions", "checks", "wall_s", "message"]


@dataclass
class BenchCase:
    """One kernel on one problem instance: the problem (for its peak) and the job that evaluates it."""

    problem: Any                       # nkibench.Problem or nkibench.ExternalProblem
    job: EvalJob
    preset: Any = "small"              # preset name, or a mapping of shape values

    @property
    def name(self) -> str:
        return str(self.problem.name)


def _resolve(problems: Iterable[Any] | None) -> list[Any]:
    import nkibench
    if problems is None:
        return [nkibench.get_problem(n) for n in nkibench.list_problems()]
    return [nkibench.get_problem(p) if isinstance(p, str) else p for p in problems]


def _task_ref(problem: Any, preset: Any) -> ProblemRef:
    """The problem as its task source, so any process evaluates it (registered or external problems,
    shape mappings) without the registry of this one."""
    if hasattr(problem, "task_source"):      # an NKIBench problem: bind the preset's shapes
        return ProblemRef(kind="task", name=problem.name, source=problem.task_source(preset))
    return ProblemRef(kind="task", name=problem.name, source=Path(problem.task_path).read_text())


def make_cases(problems: Iterable[Any] | None = None, *, preset: Any = "small", hw: str = "trn1",
               backend: str = "simulator", seeds: Sequence[int] | None = None, trace_only: bool = False,
               adversarial: bool | None = None,
               kernels: Mapping[str, str | Path] | None = None) -> list[BenchCase]:
    """The cases ``run_bench`` evaluates. ``kernels`` maps problem names to kernel files that replace
    the baselines (to benchmark your own kernels on the same table).

    Seeds: the paper's five on the small preset; seed 42 (the one the paper profiles) on the paper
    preset, where a float64 reference of a 4096x12288x5120 matmul takes a while on a laptop.
    ``trace_only``: no correctness check and no arithmetic, the profile of a trace-only run."""
    if hw not in hardware_names():
        raise ConfigError(f"unknown hardware {hw!r}; choose one of {', '.join(hardware_names())}")
    if backend not in backend_names():
        raise ConfigError(f"unknown backend {backend!r}; choose one of {', '.join(backend_names())}")
    if trace_only and backend != "simulator":
        raise ConfigError("trace-only profiling needs the simulator backend")
    if seeds is None:
        seeds = PAPER_SEEDS if preset != "paper" else (PROFILE_SEED,)
    if adversarial is None:
        adversarial = preset != "paper"
    kernels = dict(kernels or {})
    cases = []
    for problem in _resolve(problems):
        kpath = Path(kernels.pop(problem.name)) if problem.name in kernels else Path(problem.baseline_path)
        if not kpath.is_file():
            raise ConfigError(f"kernel file for {problem.name!r} not found: {kpath}")
        options = EvalOptions(seeds=tuple(int(s) for s in seeds), adversarial=bool(adversarial),
                              tolerance=float(problem.tolerance), kernel_filename=kpath.name)
        job = make_job(_task_ref(problem, preset), kpath.read_text(), backend=backend, hw=hw,
                       preset=problem.preset_label(preset), options=options, label=problem.name,
                       fidelity="trace" if trace_only else "full")
        cases.append(BenchCase(problem=problem, job=job, preset=preset))
    if kernels:
        raise ConfigError(f"kernels given for problems not in the run: {', '.join(sorted(kernels))}")
    return cases


def bench_service(backend: str = "simulator", *, workers: int = 1, sandbox: bool = False,
                  cache: Any = False) -> EvalService:
    """The service a benchmark runs on: in this process (the simulator, one worker, trusted kernels),
    warm sandboxed workers (``workers > 1`` or ``sandbox``), or one sandbox per kernel (Trainium)."""
    from accelopt_nb.evaluation.executors import InProcessEvaluator, LocalPoolEvaluator, SandboxEvaluator

    if backend != "simulator":
        return EvalService(SandboxEvaluator(), cache=cache, dedupe=False)
    if workers > 1 or sandbox:
        return EvalService(LocalPoolEvaluator(workers), cache=cache, dedupe=False)
    return EvalService(InProcessEvaluator(), cache=cache, dedupe=False)


def run_bench(problems: Iterable[Any] | None = None, *, preset: Any = "small", hw: str = "trn1",
              backend: str = "simulator", seeds: Sequence[int] | None = None, trace_only: bool = False,
              adversarial: bool | None = None, kernels: Mapping[str, str | Path] | None = None,
              progress: bool = True, on_error: str = "record", workers: int = 1, sandbox: bool = False,
              service: EvalService | None = None) -> pd.DataFrame:
    """Benchmark kernels (the baselines unless ``kernels`` says otherwise); one row per problem.

    ``problems``: names or Problem/ExternalProblem objects (default: every registered problem).
    ``service``: the evaluation service to use (default: :func:`bench_service` of ``backend``,
    ``workers`` and ``sandbox``, closed at the end). ``on_error``: "record" puts an evaluation that
    raised (a broken task, say) in the row's ``message`` with status ``error``; "raise" re-raises.
    Rows keep the problem order whatever order they finish in. The returned DataFrame carries
    ``df.attrs["summary"]`` (see :func:`summarize`).
    """
    if on_error not in ("record", "raise"):
        raise ConfigError("on_error must be 'record' or 'raise'")
    cases = make_cases(problems, preset=preset, hw=hw, backend=backend, seeds=seeds, trace_only=trace_only,
                       adversarial=adversarial, kernels=kernels)
    own = service is None
    service = service or bench_service(backend, workers=workers, sandbox=sandbox)
    t0 = time.monotonic()
    try:
        results = _evaluate(cases, service, progress, on_error)
    finally:
        if own:
            service.close()
    df = pd.DataFrame([row(case, result) for case, result in zip(cases, results)], columns=COLUMNS)
    df.attrs["summary"] = summarize(df)
    df.attrs["summary"]["wall_s"] = time.monotonic() - t0
    return df


def _evaluate(cases: list[BenchCase], service: EvalService, progress: bool,
              on_error: str) -> list[EvalResult | str]:
    """Each case's result (or, with ``on_error="record"``, the error it raised), in case order."""
    from tqdm.auto import tqdm

    futures: dict[Future, int] = {}
    out: list[EvalResult | str] = [""] * len(cases)
    bar = tqdm(total=len(cases), desc="nkibench", unit="kernel", disable=not progress)

    def collect(fut: Future) -> None:
        i = futures.pop(fut)
        try:
            out[i] = fut.result()
        except BackendUnavailableError:
            raise
        except AccelOptError as exc:
            if on_error == "raise":
                raise
            out[i] = f"{type(exc).__name__}: {exc}"
        bar.set_postfix_str(cases[i].name)
        bar.update(1)

    try:
        for i, case in enumerate(cases):
            bar.set_postfix_str(case.name)
            fut = service.submit(case.job)
            futures[fut] = i
            if fut.done():      # an in-process service evaluates at submit: count it now, not at the end
                collect(fut)
        for fut in as_completed(list(futures)):
            collect(fut)
    finally:
        bar.close()
    return out


def row(case: BenchCase, result: EvalResult | str) -> dict[str, Any]:
    """A table row: the result's verdict, checks and profile, against the problem's peak."""
    if isinstance(result, str):   # the evaluation raised: the row says why
        return {**dict.fromkeys(COLUMNS), "problem": case.name, "preset": case.problem.preset_label(case.preset),
                "hw": case.job.hw, "backend": case.job.backend, "status": "error", "checks": {},
                "tolerance": float(case.problem.tolerance), "wall_s": 0.0, "message": result}
    prof = result.profile or {}
    peak = case.problem.peak(case.preset, case.job.hw)
    latency_ms = latency_ms_from_profile(prof)
    read, write = prof.get("hbm_read_bytes"), prof.get("hbm_write_bytes")
    hbm = (read or 0) + (write or 0) if read is not None or write is not None else None
    errors, failed = _check_errors(result)
    correct = None if result.status is Status.PROFILED else result.correct
    # the model's error bar (perf.uncertainty): the measured latency lies in [low, high] x the estimate
    unc = prof.get("uncertainty") or {}
    return {
        "problem": case.name, "preset": case.problem.preset_label(case.preset), "hw": case.job.hw,
        "backend": case.job.backend, "status": result.status.value, "correct": correct,
        "max_rel_error": max(errors.values()) if errors else None, "tolerance": float(case.problem.tolerance),
        "latency_ms": latency_ms, "latency_low_ms": latency_ms * unc["low"] if latency_ms and unc.get("low") else None,
        "latency_high_ms": latency_ms * unc["high"] if latency_ms and unc.get("high") else None,
        "kernel_class": unc.get("kernel_class"),
        "peak_ms": peak.ms if peak else None, "bound": peak.bound if peak else None,
        "pct_peak": 100.0 * peak.ms / latency_ms if peak and latency_ms else None,
        "profile_bound": prof.get("bound"), "estimate_note": prof.get("estimate_note"),
        **{col: prof.get(f) for col, f in ENGINE_FIELDS.items()},
        "hbm_read_bytes": read, "hbm_write_bytes": write, "hbm_bytes": hbm,
        "min_hbm_bytes": peak.hbm_bytes if peak else None,
        "traffic_efficiency": peak.hbm_bytes / hbm if peak and hbm else None,
        "spill_save_bytes": prof.get("spill_save_bytes"), "spill_reload_bytes": prof.get("spill_reload_bytes"),
        "instructions": prof.get("instruction_count"), "checks": errors, "wall_s": result.wall_time_s,
        "message": "" if result.correct or correct is None else (
            f"{failed}: {result.message}" if failed else result.message),
    }


def _check_errors(result: EvalResult) -> tuple[dict[str, float], str | None]:
    """The worst relative error of each input set ("seed 0", "adversarial 1"), and the first that failed."""
    errors: dict[str, float] = {}
    failed = None
    for check in result.checks:
        label = f"{'seed' if check.kind == 'seed' else 'adversarial'} {check.index}"
        errs = [e for e in check.rel_errors if e is not None]
        if errs:
            errors[label] = max(errs)
        if not check.passed and failed is None:
            failed = label
    return errors, failed


def summarize(df: pd.DataFrame) -> dict[str, Any]:
    """Suite summary: the paper's geometric-mean % of peak over correct, profiled problems."""
    ok = df[(df["correct"] != False) & df["pct_peak"].notna()]  # noqa: E712 - None (trace-only) counts
    pct = ok["pct_peak"].astype(float)
    return {
        "problems": int(len(df)),
        "correct": int((df["correct"] == True).sum()),  # noqa: E712
        "profiled": int(len(ok)),
        "geomean_pct_peak": float(np.exp(np.mean(np.log(pct)))) if len(pct) else None,
        "mean_pct_peak": float(pct.mean()) if len(pct) else None,
    }
