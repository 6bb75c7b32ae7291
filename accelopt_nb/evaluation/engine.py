"""The evaluation itself, as it runs inside the sandbox worker.

Load the task and the kernel, run the kernel on every seed (the paper's contract), then on every
adversarial input, check each run (values, shapes, coverage, precision, the simulator's rules) and
profile a correct kernel. The backend (simulator or neuron) only loads and runs kernels; every
verdict is decided here, the same way for both.
"""
from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from accelopt_nb.errors import (EvaluationError, KernelError, KernelLoadError,
                                KernelRuntimeError, LoopCarriedDependencyError, OpaqueTensorError,
                                ProblemError, SimulatorBugError, UninitializedReadError)
from accelopt_nb.evaluation.correctness import compare_outputs, lowered_dtypes, unwritten_outputs
from accelopt_nb.evaluation.job import EVALUATOR_VERSION, PROFILE_SEED, EvalJob
from accelopt_nb.evaluation.problems import load_problem
from accelopt_nb.evaluation.result import CheckResult, EvalResult, Status
from accelopt_nb.taskfile import TaskModule

# Kernel errors that mean "ran, but broke a correctness rule" rather than "did not build".
CORRECTNESS_RULE_ERRORS = (UninitializedReadError, OpaqueTensorError, LoopCarriedDependencyError)
MAX_LOG_LINES = 50


@dataclass
class RunOutput:
    """One kernel launch: its outputs (kernel layout), instruction stream and device_print log."""

    outputs: tuple[np.ndarray, ...]
    trace: Any = None
    log: list[str] = field(default_factory=list)
    seconds: float = 0.0
    artifacts: dict[str, str] = field(default_factory=dict)  # e.g. the NEFF/NTFF of a hardware run


class Backend(Protocol):
    """What the engine needs from a backend."""

    def load(self, kernel_path: Path, kernel_name: str) -> None: ...
    def run(self, nki_inputs: list[np.ndarray]) -> RunOutput: ...
    def dtype_trace(self, nki_inputs: list[np.ndarray]) -> Any: ...
    def profile(self, run: RunOutput, nki_inputs: list[np.ndarray]) -> dict[str, Any] | None: ...
    def close(self) -> None: ...


def make_backend(job: EvalJob, workdir: Path) -> Backend:
    if job.backend == "simulator":
        from accelopt_nb.evaluation.simulator import SimulatorBackend
        return SimulatorBackend(hw=job.hw)
    if job.backend == "neuron":
        from accelopt_nb.evaluation.neuron import NeuronBackend
        return NeuronBackend(hw=job.hw, workdir=workdir, options=job.options.neuron,
                             visible_cores=job.visible_cores)
    raise EvaluationError(f"unknown backend {job.backend!r} (expected 'simulator' or 'neuron')")


def run_job_payload(payload: dict[str, Any]) -> dict[str, Any]:
    """Sandbox entry point (``accelopt_nb.evaluation.engine:run_job_payload``)."""
    job = EvalJob.from_dict(payload)
    return evaluate_job(job, Path.cwd()).to_dict()


def evaluate_job(job: EvalJob, workdir: Path) -> EvalResult:
    """Evaluate one job in this process (the sandbox worker calls this)."""
    t0 = time.perf_counter()
    run = _Run(job, Path(workdir))
    try:
        result = run.execute()
    finally:
        run.close()
    result.wall_time_s = time.perf_counter() - t0
    return result


class _Failure(Exception):
    """Internal: one input set failed; carries the category that decides the status."""

    def __init__(self, category: Status, check: CheckResult) -> None:
        super().__init__(check.reason)
        self.category = category
        self.check = check


class _Run:
    def __init__(self, job: EvalJob, workdir: Path) -> None:
        self.job, self.opts, self.workdir = job, job.options, workdir
        self.kernel_path = workdir / "kernel.py"
        self.task: TaskModule | None = None
        self.backend: Backend | None = None
        self.result = EvalResult(status=Status.CORRECT, message="", problem=job.problem.name,
                                 preset=job.preset if job.problem.kind == "nkibench" else "task",
                                 backend=job.backend, hw=job.hw, kernel_sha256=job.kernel_sha256,
                                 evaluator_version=EVALUATOR_VERSION, label=job.label)
        self.input_float_dtypes: list[str] = []
        self.precision_checked = False
        self.profile_run: tuple[RunOutput, list[np.ndarray]] | None = None

    def close(self) -> None:
        if self.backend is not None:
            self.backend.close()

    # -- the flow -----------------------------------------------------------------------------
    def execute(self) -> EvalResult:
        res = self.result
        self.task, tol = load_problem(self.job.problem, self.job.preset, self.workdir / "task")
        res.tolerance = float(self.opts.tolerance if self.opts.tolerance is not None else tol)
        self.kernel_path.write_text(self.job.kernel_source)
        self.backend = make_backend(self.job, self.workdir)

        t_load = time.perf_counter()
        try:
            self.backend.load(self.kernel_path, self.opts.kernel_name)
        except Exception as exc:  # noqa: BLE001 - every load failure is the kernel's
            _reraise_memory(exc)
            return self._finish(Status.BUILD_FAILED, error=self._error_dict(exc),
                                message=f"kernel failed to load: {_short(exc)}")
        load_s = time.perf_counter() - t_load

        failure: _Failure | None = None
        for seed in self.opts.seeds:
            try:
                self._check("seed", seed, self.task.get_inputs(seed), first=res.compile_time_s is None,
                            load_s=load_s)
            except _Failure as f:
                failure = failure or f
                if self.opts.fail_fast or f.category is not Status.INCORRECT:
                    break
        if failure is not None:
            what = f"seed {failure.check.index}"
            return self._finish(failure.category, error=failure.check.error,
                                message=_failure_message(failure.category, what, failure.check))

        adversarial = self.task.adversarial_inputs() if self.opts.adversarial else []
        if self.opts.adversarial and not adversarial:
            self._note("the task defines no adversarial inputs (get_adversarial_inputs)")
        for i, inputs in enumerate(adversarial):
            try:
                self._check("adversarial", i, inputs)
            except _Failure as f:
                failure = failure or f
                if self.opts.fail_fast:
                    break
        self._profile()  # a cheat is profiled too: it shows the speed it faked
        if failure is not None:
            return self._finish(Status.CHEAT, error=failure.check.error, message=(
                f"passes all {len(self.opts.seeds)} seeds but fails adversarial input "
                f"#{failure.check.index}: {failure.check.reason}"))
        errs = [e for c in res.checks for e in c.rel_errors if e is not None]
        worst = f"max rel. L2 error {max(errs):.3g}, " if errs else ""
        return self._finish(Status.CORRECT, message=(
            f"passes {len(self.opts.seeds)} seeds and {len(adversarial)} adversarial input(s) "
            f"({worst}tolerance {res.tolerance:.3g})"))

    def _finish(self, status: Status, *, message: str, error: dict | None = None) -> EvalResult:
        self.result.status, self.result.message, self.result.error = status, message, error
        return self.result

    def _note(self, line: str) -> None:
        if len(self.result.log) < MAX_LOG_LINES:
            self.result.log.append(f"[evaluator] {line}")

    # -- one input set ------------------------------------------------------------------------
    def _check(self, kind: str, index: int, inputs: list[np.ndarray], *, first: bool = False,
               load_s: float = 0.0) -> None:
        assert self.task is not None and self.backend is not None
        try:
            ref = self.task.forward(*[np.array(x, copy=True) for x in inputs])
            nki_inputs = self.task.to_nki([np.array(x, copy=True) for x in inputs])
        except Exception as exc:  # the task, not the kernel, is broken
            raise ProblemError(f"task {self.task.name}: computing the reference for {kind} {index} "
                               f"failed: {type(exc).__name__}: {exc}") from exc
        if not self.input_float_dtypes:
            self.input_float_dtypes = [str(np.asarray(x).dtype) for x in nki_inputs]

        check = CheckResult(kind=kind, index=index, passed=False)
        self.result.checks.append(check)
        try:
            out = self.backend.run([np.array(x, copy=True) for x in nki_inputs])
        except Exception as exc:  # noqa: BLE001 - classify every kernel failure
            _reraise_memory(exc)
            category = self._classify(exc)
            check.error = self._error_dict(exc)
            check.reason = _short(exc)
            raise _Failure(category, check) from None
        if first:
            self.result.compile_time_s = load_s + out.seconds
        for line in out.log:
            if len(self.result.log) < MAX_LOG_LINES:
                self.result.log.append(str(line))

        if not self.precision_checked and self.opts.check_precision:
            self.precision_checked = True
            self._check_precision(out, nki_inputs, check)

        missing = unwritten_outputs(out.trace)
        if missing:
            name, n, total = missing[0]
            check.reason = (f"partial output write: {n} of {total} elements of output '{name}' are "
                            f"never written")
            raise _Failure(Status.INCORRECT, check)

        k_res: Any = out.outputs[0] if len(out.outputs) == 1 else tuple(out.outputs)
        try:
            actual = self.task.from_nki(k_res, ref)
        except Exception as exc:  # noqa: BLE001 - a wrong output shape usually fails the reshape
            shapes = [tuple(np.shape(o)) for o in out.outputs]
            check.reason = (f"the kernel's outputs (shapes {shapes}) do not fit the reference: "
                            f"transform_nki_outputs raised {type(exc).__name__}: {exc}")
            raise _Failure(Status.INCORRECT, check) from None
        passed, errors, reason = compare_outputs(actual, ref, self.result.tolerance or 0.0)
        check.rel_errors = errors
        if not passed:
            check.reason = reason
            raise _Failure(Status.INCORRECT, check)
        check.passed = True
        if kind == "seed" and (index == PROFILE_SEED or self.profile_run is None):
            self.profile_run = (out, nki_inputs)

    def _check_precision(self, out: RunOutput, nki_inputs: list[np.ndarray],
                         check: CheckResult) -> None:
        trace = out.trace
        if trace is None:
            try:
                trace = self.backend.dtype_trace(nki_inputs)
            except Exception as exc:  # noqa: BLE001 - best effort on hardware
                self._note(f"precision check skipped: could not trace the kernel's dtypes ({exc})")
                return
        if trace is None:
            self._note("precision check skipped: no instruction stream for this backend")
            return
        used = sorted(trace.dtypes_used())
        self.result.dtypes_used = used
        low = lowered_dtypes(used, self.input_float_dtypes)
        if low:
            check.reason = (f"precision lowering: the kernel uses {', '.join(low)} but the problem's "
                            f"inputs are {', '.join(sorted(set(self.input_float_dtypes)))}")
            raise _Failure(Status.INCORRECT, check)

    # -- profile ------------------------------------------------------------------------------
    def _profile(self) -> None:
        if not self.opts.profile or self.profile_run is None or self.backend is None:
            return
        run, nki_inputs = self.profile_run
        try:
            profile = self.backend.profile(run, nki_inputs)
        except Exception as exc:  # noqa: BLE001 - a profiling failure must not hide the verdict
            _reraise_memory(exc)
            self._note(f"profiling failed: {type(exc).__name__}: {exc}")
            return
        if profile is None:
            return
        self.result.profile = profile
        self.result.latency_ms = latency_ms_from_profile(profile)

    # -- errors -------------------------------------------------------------------------------
    def _classify(self, exc: BaseException) -> Status:
        if isinstance(exc, (KernelRuntimeError, SimulatorBugError)):
            return Status.CRASHED
        if isinstance(exc, CORRECTNESS_RULE_ERRORS):
            return Status.INCORRECT
        if isinstance(exc, (ProblemError, EvaluationError)):
            raise exc  # infrastructure: not the kernel's verdict
        return Status.BUILD_FAILED

    def _error_dict(self, exc: BaseException) -> dict[str, Any]:
        if isinstance(exc, (ProblemError, EvaluationError)):
            raise exc
        if isinstance(exc, KernelError):
            d = exc.to_dict()
        elif isinstance(exc, SyntaxError):
            d = KernelLoadError(f"syntax error: {exc.msg}", line=exc.lineno).to_dict()
        else:
            d = {"type": type(exc).__name__, "message": str(exc), "api": None, "file": None,
                 "line": None, "rule": None}
        kernel_file = str(self.kernel_path)
        if d.get("line") is None or d.get("file") in (None, kernel_file):
            frames = [f for f in traceback.extract_tb(exc.__traceback__)
                      if _same_file(f.filename, kernel_file)]
            if frames and d.get("line") is None:
                d["line"] = frames[-1].lineno
        if d.get("file") is None or _same_file(d["file"], kernel_file):
            d["file"] = self.opts.kernel_filename
        d["message"] = str(d.get("message", ""))[:2000]
        return d


def latency_ms_from_profile(profile: dict[str, Any]) -> float | None:
    """The latency in ms from a profile dict, whatever unit its producer used."""
    for key, scale in (("latency_ms", 1.0), ("total_time_ms", 1.0), ("latency_us", 1e-3),
                       ("total_time_us", 1e-3), ("latency_s", 1e3), ("total_time", 1e3)):
        value = profile.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value) * scale
    return None


def _failure_message(category: Status, what: str, check: CheckResult) -> str:
    if (check.error or {}).get("type") == SimulatorBugError.__name__:
        return f"simulator bug (not the kernel's fault) on {what}: {check.reason}"
    lead = {Status.BUILD_FAILED: "kernel failed to build/trace",
            Status.CRASHED: "kernel crashed while running",
            Status.INCORRECT: "incorrect"}.get(category, category.value)
    return f"{lead} on {what}: {check.reason}"


def _short(exc: BaseException) -> str:
    text = exc.message if isinstance(exc, KernelError) else str(exc)
    return f"{type(exc).__name__}: {text}"[:500]


def _same_file(a: str | None, b: str) -> bool:
    if not a:
        return False
    try:
        return Path(a).resolve() == Path(b).resolve()
    except OSError:
        return a == b


def _reraise_memory(exc: BaseException) -> None:
    """Let a MemoryError anywhere in the chain reach the worker, which reports out_of_memory."""
    cur: BaseException | None = exc
    seen: set[int] = set()
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, MemoryError):
            raise cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
