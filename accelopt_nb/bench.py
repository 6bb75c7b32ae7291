"""NKIBench benchmark: correctness and profile of kernels, scored as a percentage of peak.

>>> from accelopt_nb.bench import run_bench
>>> df = run_bench(preset="small", hw="trn1")            # the 14 baselines on the simulator
>>> df[["problem", "latency_ms", "pct_peak", "bound"]]   # doctest: +SKIP

How one kernel is evaluated is a parameter (``evaluate=``): any callable taking a
:class:`BenchCase` and returning a :class:`CaseOutcome`. Two are provided:

* :func:`simulate_case` (the default for ``backend="simulator"``): runs the kernel in this process
  on the CPU simulator, checks it against the task's float64 reference with the paper's metric,
  and estimates its profile with :func:`accelopt_nb.perf.estimate`. Fast; meant for trusted
  kernels such as our baselines.
* :func:`service_evaluator` (the default for ``backend="neuron"``): the evaluation service
  (:mod:`accelopt_nb.evaluation`): sandboxed, cached, and able to run on real Trainium.

Seeds and presets: on the ``small`` preset every kernel is checked on the paper's five seeds
[0, 21, 42, 63, 84] (plus the problem's adversarial inputs, unless ``adversarial=False``). On the
``paper`` preset one seed (42, the seed the paper profiles) is checked by default, because a
float64 reference of a 4096x12288x5120 matmul takes a while on a laptop; ``trace_only=True`` skips
correctness and arithmetic entirely and only records the instruction stream for the profile.
"""
from __future__ import annotations

import json
import math
import platform
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from accelopt_nb.errors import AccelOptError, BackendUnavailableError, ConfigError, KernelError
from accelopt_nb.evaluation.backends import backend_names
from accelopt_nb.evaluation.job import PAPER_SEEDS, PROFILE_SEED
from accelopt_nb.evaluation.profile import latency_ms_from_profile
from accelopt_nb.perf.hardware import presets as hardware_names

#: Profile fields copied into the table (neuron-profile summary-json names, fractions in [0, 1]).
ENGINE_FIELDS = {"tensor_active": "tensor_engine_active_time_percent",
                 "vector_active": "vector_engine_active_time_percent",
                 "scalar_active": "scalar_engine_active_time_percent",
                 "gpsimd_active": "gpsimd_engine_active_time_percent",
                 "dma_active": "dma_active_time_percent"}

COLUMNS = ["problem", "preset", "hw", "backend", "status", "correct", "max_rel_error", "tolerance",
           "latency_ms", "peak_ms", "bound", "pct_peak", "profile_bound", "estimate_note", *ENGINE_FIELDS,
           "hbm_read_bytes", "hbm_write_bytes", "hbm_bytes", "min_hbm_bytes", "traffic_efficiency",
           "spill_save_bytes", "spill_reload_bytes", "instructions", "checks", "wall_s", "message"]


@dataclass
class BenchCase:
    """One kernel to evaluate on one problem instance."""

    problem: Any                       # nkibench.Problem or nkibench.ExternalProblem
    kernel_source: str
    preset: Any = "small"              # preset name, or a mapping of shape values
    hw: str = "trn1"
    backend: str = "simulator"
    seeds: tuple[int, ...] = PAPER_SEEDS
    check: bool = True                 # False: trace-only, profile without correctness
    adversarial: bool = True
    kernel_path: Path | None = None    # for error messages and the simulator's tracebacks
    check_precision: bool = True       # False: only the numbers decide (isolates what adversarial inputs catch)

    @property
    def name(self) -> str:
        return str(self.problem.name)

    @property
    def tolerance(self) -> float:
        return float(self.problem.tolerance)


@dataclass
class CaseOutcome:
    """What an evaluator reports for one case."""

    status: str                        # "correct" | "incorrect" | "cheat" | "error" | "profiled" | ...
    correct: bool | None               # None when correctness was not checked (trace-only)
    errors: dict[str, float] = field(default_factory=dict)   # "seed 0" / "adversarial 1" -> max L2 rel err
    profile: dict[str, Any] | None = None                     # neuron-profile style fields
    message: str = ""
    wall_s: float = 0.0

    @property
    def max_error(self) -> float | None:
        return max(self.errors.values()) if self.errors else None


Evaluator = Callable[[BenchCase], CaseOutcome]


# --------------------------------------------------------------------------------------- evaluators
def simulate_case(case: BenchCase) -> CaseOutcome:
    """Evaluate in this process on the CPU simulator with the evaluation service's checks, unsandboxed.

    Correctness is the service's own (``evaluation.engine.evaluate_job``: seeds, adversarial inputs,
    coverage, precision), so ``accelopt bench`` and ``accelopt evaluate`` give one verdict; only the
    sandbox is skipped. A trace-only case (``check=False``) just estimates the profile.
    """
    import tempfile

    from accelopt_nb.evaluation import EvalOptions, make_job
    from accelopt_nb.evaluation.engine import evaluate_job
    from accelopt_nb.evaluation.backends.simulator import raw_profile, trace_profile
    from accelopt_nb.evaluation.profile import profile_record
    from accelopt_nb.sim import load_kernel

    if case.backend != "simulator":
        raise ConfigError(f"simulate_case runs the simulator only, not backend {case.backend!r}")
    t0 = time.monotonic()
    if not case.check:
        task = case.problem.task(case.preset)
        try:
            kernel = load_kernel(str(case.kernel_path) if case.kernel_path else None, source=case.kernel_source)
            inputs = task.get_inputs(PROFILE_SEED)
            profile = trace_profile(kernel, task.to_nki(inputs), case.hw)
        except KernelError as exc:
            return CaseOutcome("error", None, {}, None, str(exc), time.monotonic() - t0)
        record = profile_record(raw_profile(profile), source="simulator", hw=case.hw)
        return CaseOutcome("profiled", None, {}, record.to_dict(), "", time.monotonic() - t0)
    with tempfile.TemporaryDirectory(prefix="accelopt-bench-") as tmp:
        # the task as a file: works for built-in, user-registered and external problems, in any process
        if hasattr(case.problem, "export_task"):   # an NKIBench problem: bind the preset's shapes
            task_file = case.problem.export_task(case.preset, Path(tmp) / f"{case.name}_task.py")
        else:                                      # an external task file has fixed shapes
            task_file = Path(case.problem.task_path)
        options = EvalOptions(seeds=tuple(case.seeds), adversarial=case.adversarial, tolerance=case.tolerance,
                              check_precision=case.check_precision,
                              kernel_filename=case.kernel_path.name if case.kernel_path else "kernel.py")
        job = make_job(task_file, case.kernel_source, backend="simulator", hw=case.hw, options=options)
        result = evaluate_job(job, Path(tmp), isolated=False)
    return _outcome(result, t0)


def _outcome(result: Any, t0: float) -> CaseOutcome:
    """An evaluation-service result as a benchmark row's outcome."""
    errors: dict[str, float] = {}
    failed = None
    for check in result.checks:
        label = f"{'seed' if check.kind == 'seed' else 'adversarial'} {check.index}"
        errs = [e for e in check.rel_errors if e is not None]
        if errs:
            errors[label] = max(errs)
        if not check.passed and failed is None:
            failed = label
    status = getattr(result.status, "value", str(result.status))
    message = "" if result.correct else (f"{failed}: {result.message}" if failed else result.message)
    return CaseOutcome(status, bool(result.correct), errors, result.profile, message, time.monotonic() - t0)


def service_evaluator(**service_kwargs: Any) -> Evaluator:
    """An evaluator backed by the evaluation service (sandboxed; simulator or real Neuron hardware).

    ``service_kwargs`` go to :func:`accelopt_nb.evaluation.evaluate` (e.g. ``cache=False``).
    """
    def evaluate_with_service(case: BenchCase) -> CaseOutcome:
        try:
            from accelopt_nb.evaluation import EvalOptions, evaluate
        except ImportError as exc:   # pragma: no cover - the service ships with the package
            raise BackendUnavailableError(f"the evaluation service is not installed: {exc}") from exc
        if not isinstance(case.preset, str):
            raise ConfigError("the evaluation service takes preset names only ('small' or 'paper')")
        options = EvalOptions(seeds=tuple(case.seeds), adversarial=case.adversarial, profile=True)
        t0 = time.monotonic()
        result = evaluate(case.name, case.kernel_source, backend=case.backend, hw=case.hw, preset=case.preset,
                          options=options, **service_kwargs)
        return _outcome(result, t0)

    return evaluate_with_service


def default_evaluator(backend: str) -> Evaluator:
    if backend == "simulator":
        return simulate_case
    if backend in backend_names():   # real hardware or a registered plug-in: through the evaluation service
        return service_evaluator()
    raise ConfigError(f"unknown backend {backend!r}; choose one of {', '.join(backend_names())}")


# --------------------------------------------------------------------------------------- the benchmark
def _resolve(problems: Iterable[Any] | None) -> list[Any]:
    import nkibench
    if problems is None:
        return [nkibench.get_problem(n) for n in nkibench.list_problems()]
    out = []
    for p in problems:
        out.append(nkibench.get_problem(p) if isinstance(p, str) else p)
    return out


def make_cases(problems: Iterable[Any] | None = None, *, preset: Any = "small", hw: str = "trn1",
               backend: str = "simulator", seeds: Sequence[int] | None = None, trace_only: bool = False,
               adversarial: bool | None = None,
               kernels: Mapping[str, str | Path] | None = None) -> list[BenchCase]:
    """The cases ``run_bench`` evaluates. ``kernels`` maps problem names to kernel files that replace
    the baselines (to benchmark your own kernels on the same table)."""
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
        cases.append(BenchCase(problem=problem, kernel_source=kpath.read_text(), preset=preset, hw=hw,
                               backend=backend, seeds=tuple(int(s) for s in seeds), check=not trace_only,
                               adversarial=bool(adversarial), kernel_path=kpath))
    if kernels:
        raise ConfigError(f"kernels given for problems not in the run: {', '.join(sorted(kernels))}")
    return cases


def _row(case: BenchCase, outcome: CaseOutcome) -> dict[str, Any]:
    prof = outcome.profile or {}
    peak = case.problem.peak(case.preset, case.hw)
    latency_ms = latency_ms_from_profile(prof)   # the profile contract: ms under `latency_ms`
    read, write = prof.get("hbm_read_bytes"), prof.get("hbm_write_bytes")
    hbm = (read or 0) + (write or 0) if read is not None or write is not None else None
    row: dict[str, Any] = {
        "problem": case.name, "preset": case.problem.preset_label(case.preset), "hw": case.hw,
        "backend": case.backend, "status": outcome.status, "correct": outcome.correct,
        "max_rel_error": outcome.max_error, "tolerance": case.tolerance, "latency_ms": latency_ms,
        "peak_ms": peak.ms if peak else None, "bound": peak.bound if peak else None,
        "pct_peak": 100.0 * peak.ms / latency_ms if peak and latency_ms else None,
        "profile_bound": prof.get("bound"), "estimate_note": prof.get("estimate_note"),
        **{col: prof.get(f) for col, f in ENGINE_FIELDS.items()},
        "hbm_read_bytes": read, "hbm_write_bytes": write, "hbm_bytes": hbm,
        "min_hbm_bytes": peak.hbm_bytes if peak else None,
        "traffic_efficiency": peak.hbm_bytes / hbm if peak and hbm else None,
        "spill_save_bytes": prof.get("spill_save_bytes"), "spill_reload_bytes": prof.get("spill_reload_bytes"),
        "instructions": prof.get("instruction_count"), "checks": dict(outcome.errors),
        "wall_s": outcome.wall_s, "message": outcome.message,
    }
    return row


def run_bench(problems: Iterable[Any] | None = None, *, preset: Any = "small", hw: str = "trn1",
              backend: str = "simulator", seeds: Sequence[int] | None = None, trace_only: bool = False,
              adversarial: bool | None = None, evaluate: Evaluator | None = None,
              kernels: Mapping[str, str | Path] | None = None, progress: bool = True,
              on_error: str = "record", workers: int = 1) -> pd.DataFrame:
    """Benchmark kernels (the baselines unless ``kernels`` says otherwise); one row per problem.

    ``problems``: names or Problem/ExternalProblem objects (default: every registered problem).
    ``evaluate``: the per-kernel evaluator (default: :func:`default_evaluator` of ``backend``).
    ``on_error``: "record" puts an evaluator failure in the row's ``message``; "raise" re-raises.
    ``workers``: problems simulated at once in separate processes (the simulator backend's default
    evaluator only); rows keep the problem order whatever order they finish in.
    The returned DataFrame carries ``df.attrs["summary"]`` (see :func:`summarize`).
    """
    if on_error not in ("record", "raise"):
        raise ConfigError("on_error must be 'record' or 'raise'")
    cases = make_cases(problems, preset=preset, hw=hw, backend=backend, seeds=seeds, trace_only=trace_only,
                       adversarial=adversarial, kernels=kernels)
    parallel = workers > 1 and evaluate is None and backend == "simulator" and len(cases) > 1
    evaluate = evaluate or default_evaluator(backend)
    t0 = time.monotonic()
    outcomes = _run_parallel(cases, workers, progress, on_error) if parallel else \
        _run_serial(cases, evaluate, progress, on_error)
    rows = [_row(case, outcome) for case, outcome in zip(cases, outcomes)]
    df = pd.DataFrame(rows, columns=COLUMNS)
    df.attrs["summary"] = summarize(df)
    df.attrs["summary"]["wall_s"] = time.monotonic() - t0
    return df


def _guarded(evaluate: Evaluator, case: BenchCase, on_error: str) -> CaseOutcome:
    try:
        return evaluate(case)
    except BackendUnavailableError:
        raise
    except AccelOptError as exc:
        if on_error == "raise":
            raise
        return CaseOutcome("error", None, message=f"{type(exc).__name__}: {exc}")
    except Exception as exc:  # an evaluator bug should not lose the other rows of a long run
        if on_error == "raise":
            raise
        return CaseOutcome("error", None, message=f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}")


def _run_serial(cases: list[BenchCase], evaluate: Evaluator, progress: bool, on_error: str) -> list[CaseOutcome]:
    outcomes = []
    bar = _progress(cases, progress)
    for case in bar:
        if hasattr(bar, "set_postfix_str"):
            bar.set_postfix_str(case.name)
        outcomes.append(_guarded(evaluate, case, on_error))
    return outcomes


def _run_parallel(cases: list[BenchCase], workers: int, progress: bool, on_error: str) -> list[CaseOutcome]:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    outcomes: list[CaseOutcome | None] = [None] * len(cases)
    bar = _progress(cases, progress) if progress else None
    # spawn: a clean interpreter per worker (no forked BLAS threads or notebook state)
    with ProcessPoolExecutor(max_workers=min(workers, len(cases)),
                             mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(_guarded, simulate_case, case, on_error): i for i, case in enumerate(cases)}
        for fut in as_completed(futures):
            i = futures[fut]
            outcomes[i] = fut.result()
            if bar is not None:
                bar.set_postfix_str(cases[i].name)
                bar.update(1)
    if bar is not None:
        bar.close()
    return outcomes  # type: ignore[return-value]


def _progress(cases: list[BenchCase], enabled: bool):
    if not enabled:
        return cases
    from tqdm.auto import tqdm
    return tqdm(cases, desc="nkibench", unit="kernel")


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


# --------------------------------------------------------------------------------------- output
def format_table(df: pd.DataFrame) -> str:
    """A compact text table for terminals and notebooks."""
    def num(v, fmt):
        width = int(fmt.split(".")[0])
        return f"{'-':>{width}s}" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)

    def mb(v):
        return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v / 1e6:.1f}"

    header = (f"{'problem':24s} {'status':10s} {'max err':>9s} {'lat ms':>9s} {'peak ms':>9s} {'bound':>6s} "
              f"{'%peak':>6s} {'PE':>5s} {'DVE':>5s} {'ACT':>5s} {'DMA':>5s} {'HBM MB':>8s} {'spill MB':>8s}")
    lines = [header, "-" * len(header)]
    for r in df.to_dict("records"):
        spill = None if r["spill_reload_bytes"] is None else (r["spill_save_bytes"] or 0) + r["spill_reload_bytes"]
        lines.append(
            f"{r['problem'][:24]:24s} {str(r['status'])[:10]:10s} {num(r['max_rel_error'], '9.2e')} "
            f"{num(r['latency_ms'], '9.4f')} {num(r['peak_ms'], '9.4f')} {str(r['bound'] or '-'):>6s} "
            f"{num(r['pct_peak'], '6.1f')} {num(r['tensor_active'], '5.2f')} {num(r['vector_active'], '5.2f')} "
            f"{num(r['scalar_active'], '5.2f')} {num(r['dma_active'], '5.2f')} {mb(r['hbm_bytes']):>8s} "
            f"{mb(spill):>8s}")
    s = df.attrs.get("summary") or summarize(df)
    if s.get("geomean_pct_peak") is not None:
        checked = int(df["correct"].notna().sum())
        verdict = (f"{s['correct']}/{checked} correct" if checked else "trace-only: correctness not checked")
        lines.append(f"geometric mean % of peak over {s['profiled']} problem(s): {s['geomean_pct_peak']:.1f}"
                     f"   ({verdict})")
    notes = sorted({n for n in df.get("estimate_note", pd.Series(dtype=object)).dropna()})
    if notes:   # latencies from the performance model, not a Trainium
        lines.append(f"latency and %peak are {' / '.join(notes)}")
    return "\n".join(lines)


def plot_pct_peak(df: pd.DataFrame, ax=None, title: str | None = None):
    """Bar chart of % of peak per problem, coloured by the roofline bound (like the paper's figure)."""
    if ax is None:
        import matplotlib.pyplot as plt   # notebooks get their inline backend
        _, ax = plt.subplots(figsize=_figsize(df))
    colors = {"mm": "#4C72B0", "vec": "#DD8452", "memory": "#55A868"}
    d = df.reset_index(drop=True)
    vals = d["pct_peak"].astype(float).fillna(0.0)
    bars = ax.bar(range(len(d)), vals, color=[colors.get(b, "#999999") for b in d["bound"]])
    for i, r in d.iterrows():
        if r["correct"] is False:
            bars[i].set_hatch("//")
            bars[i].set_edgecolor("red")
    ax.set_xticks(range(len(d)))
    ax.set_xticklabels(d["problem"], rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("% of peak throughput")
    # room above 100% for the legend, which sits in one row at the top
    ax.set_ylim(0, max(100.0, float(vals.max()) if len(vals) else 100.0) * 1.18)
    ax.axhline(100.0, color="grey", linewidth=0.6)
    s = df.attrs.get("summary") or summarize(df)
    if s.get("geomean_pct_peak"):
        ax.axhline(s["geomean_pct_peak"], color="black", linestyle="--", linewidth=1,
                   label=f"geomean {s['geomean_pct_peak']:.1f}%")
    from matplotlib.patches import Patch
    handles = [Patch(color=c, label=f"{b}-bound") for b, c in colors.items() if b in set(d["bound"])]
    handles += ax.get_legend_handles_labels()[0]
    ax.legend(handles=handles, fontsize=8, loc="upper left", ncol=len(handles), frameon=False)
    if title is None and len(d):
        title = f"NKIBench baselines: {d['hw'].iloc[0]}, {d['preset'].iloc[0]} preset, {d['backend'].iloc[0]}"
    ax.set_title(title or "", fontsize=10)
    ax.figure.tight_layout()
    return ax


def write_outputs(df: pd.DataFrame, out_dir: str | Path, *, stem: str | None = None,
                  meta: Mapping[str, Any] | None = None) -> dict[str, Path]:
    """Write ``<stem>.csv``, ``<stem>.json`` and ``<stem>.png`` (the % of peak chart) into ``out_dir``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if stem is None:
        first = df.iloc[0] if len(df) else None
        stem = "nkibench" if first is None else f"nkibench_{first['preset']}_{first['hw']}_{first['backend']}"
    paths = {"csv": out_dir / f"{stem}.csv", "json": out_dir / f"{stem}.json", "png": out_dir / f"{stem}.png"}
    flat = df.copy()
    flat["checks"] = flat["checks"].map(lambda c: json.dumps(c, default=_json_default))
    flat.to_csv(paths["csv"], index=False)
    doc = {"summary": df.attrs.get("summary") or summarize(df), "meta": {**_meta(), **dict(meta or {})},
           "rows": json.loads(df.to_json(orient="records", default_handler=str))}
    paths["json"].write_text(json.dumps(doc, indent=2, default=_json_default))
    from matplotlib.figure import Figure   # no pyplot: works headless and leaves notebook state alone
    fig = Figure(figsize=_figsize(df))
    plot_pct_peak(df, ax=fig.add_subplot())
    fig.savefig(paths["png"], dpi=130)
    return paths


def _figsize(df: pd.DataFrame) -> tuple[float, float]:
    return (max(6.0, 0.55 * len(df) + 2), 4.0)


def _meta() -> dict[str, Any]:
    return {"python": platform.python_version(), "machine": platform.machine(),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S")}


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, float) and not math.isfinite(o):
        return str(o)
    return str(o)


__all__ = ["BenchCase", "CaseOutcome", "Evaluator", "PAPER_SEEDS", "PROFILE_SEED",
           "default_evaluator", "format_table", "make_cases", "plot_pct_peak", "run_bench", "service_evaluator",
           "simulate_case", "summarize", "write_outputs"]
