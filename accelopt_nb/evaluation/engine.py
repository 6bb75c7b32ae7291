"""The judge: the evaluation itself, in a process where the kernel never runs.

The judge loads the task, takes each input set (seeds, then adversarial inputs) from the shared
input cache, has the runner (:mod:`.runner`, a forked, limited child) run the kernel on it, loads
the runner's plain output arrays (``.npy`` without pickle; numeric dtypes only) and checks them
here: values against the reference, coverage, precision and the simulator's rules. Whatever the
kernel rebinds in its own process, none of these checks run there.

Fidelity (``job.fidelity``): ``full`` and ``confirm`` check every seed and adversarial input at
the job's preset and profile the seed-42 run; ``screen`` checks them at the small preset and
takes the latency from a trace-only run at the job's preset; ``trace`` checks nothing and only
profiles a trace-only run at the job's preset (status ``profiled``). A kernel that cannot run at the small
shape (it raises there, or its outputs do not have the small shape) is screened at the job's shape
with one seed plus the adversarial inputs instead.

A trace-only profile is estimated once per instruction stream: the runner returns the stream's
fingerprint and the judge takes the profile from :class:`.datacache.ProfileCache` when another
kernel had that stream (same stream, same model: the same profile). Correctness is never shared by
stream: two kernels with one stream may compute different values. (Verdicts are shared by program,
in the service: fidelities ``identify``/``identify_screen`` below only hash the program.)
"""
from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from accelopt_nb.errors import (BackendUnavailableError, ConfigError, EvaluationError,
                                ProblemError)
from accelopt_nb.evaluation.correctness import compare_outputs, lowered_dtypes, unwritten_regions
from accelopt_nb.evaluation.datacache import InputCache, InputSet, ProfileCache
from accelopt_nb.evaluation.job import (EVALUATOR_VERSION, PROFILE_SEED, SCREEN_PRESET, EvalJob,
                                        default_limits)
from accelopt_nb.evaluation.problems import load_problem, task_key
from accelopt_nb.evaluation.profile import latency_ms_from_profile, profile_record
from accelopt_nb.evaluation.result import CheckResult, EvalResult, Status
from accelopt_nb.evaluation.runner import (ForkRunner, InProcessRunner, RunnerDied, RunnerLimits,
                                           RunnerTimeout)
from accelopt_nb.taskfile import TaskModule

__all__ = ["evaluate_job", "run_job_payload", "latency_ms_from_profile", "job_limits"]

# Kernel errors (by class name: they cross from the runner as data) that mean "ran, but broke a
# correctness rule" rather than "did not build", and those that are the runtime's crash.
# Qualified, so a kernel cannot pass its own class of the same name off as one of these.
CORRECTNESS_RULE_ERRORS = ("accelopt_nb.errors.UninitializedReadError",
                           "accelopt_nb.errors.OpaqueTensorError",
                           "accelopt_nb.errors.LoopCarriedDependencyError")
# A fault inside the simulator's own code is a crash the kernel did not cause (reported as such).
RUNTIME_ERRORS = ("accelopt_nb.errors.KernelRuntimeError", "accelopt_nb.errors.SimulatorBugError")
INFRA_ERRORS: dict[str, type[Exception]] = {
    "ProblemError": ProblemError, "EvaluationError": EvaluationError,
    "BackendUnavailableError": BackendUnavailableError, "ConfigError": ConfigError,
}
MAX_LOG_LINES = 50
MAX_OUTPUTS = 16
NUMERIC_KINDS = "biufc"


def job_limits(job: EvalJob) -> RunnerLimits:
    """The job's sandbox limits: its options, else the preset's defaults."""
    from accelopt_nb.evaluation.run import FILE_SIZE_MB
    timeout_s, memory_mb = default_limits(job.preset)
    opts = job.options
    return RunnerLimits(timeout_s=opts.timeout_s if opts.timeout_s is not None else timeout_s,
                        memory_mb=opts.memory_mb if opts.memory_mb is not None else memory_mb,
                        file_size_mb=FILE_SIZE_MB.get(job.backend, 1024))


def run_job_payload(payload: dict[str, Any]) -> dict[str, Any]:
    """Sandbox entry point (``accelopt_nb.evaluation.engine:run_job_payload``): the judge of one
    job in a fresh worker process; ``payload`` is ``{"job": ..., "input_cache": dir or None}``."""
    job = EvalJob.from_dict(payload["job"])
    workdir = Path(tempfile.mkdtemp(prefix="job-", dir=Path.cwd()))
    try:
        return evaluate_job(job, workdir, input_cache=payload.get("input_cache")).to_dict()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def evaluate_job(job: EvalJob, workdir: Path, *, input_cache: str | Path | None = None,
                 isolated: bool = True) -> EvalResult:
    """Judge one job in this process, the kernel running in a forked runner (``isolated``) or,
    for trusted kernels only, in this process. Raises only for infrastructure errors."""
    t0 = time.perf_counter()
    judge = _Judge(job, Path(workdir), InputCache(input_cache), isolated, ProfileCache.beside(input_cache))
    try:
        result = judge.execute()
    finally:
        judge.close()
    result.wall_time_s = time.perf_counter() - t0
    return result


class _Failure(Exception):
    """Internal: one input set failed; carries the category that decides the status."""

    def __init__(self, category: Status, check: CheckResult, *, cannot_run: bool = False) -> None:
        super().__init__(check.reason)
        self.category, self.check, self.cannot_run = category, check, cannot_run


@dataclass
class _Shape:
    """One shape preset's task, as the judge uses it."""

    preset: str
    task: TaskModule
    key: str
    adversarial: list | None = None     # the task's adversarial inputs, once computed

    def adversarial_inputs(self) -> list:
        if self.adversarial is None:
            self.adversarial = list(self.task.adversarial_inputs())
        return self.adversarial


class _Judge:
    def __init__(self, job: EvalJob, workdir: Path, cache: InputCache, isolated: bool,
                 profiles: ProfileCache | None = None) -> None:
        self.job, self.opts, self.workdir, self.cache = job, job.options, workdir, cache
        self.profiles = profiles or ProfileCache(None)
        self.isolated = isolated
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.runner: ForkRunner | InProcessRunner | None = None
        self.result = EvalResult(status=Status.CORRECT, message="", problem=job.problem.name,
                                 preset=job.preset if job.problem.kind == "nkibench" else "task",
                                 backend=job.backend, hw=job.hw, kernel_sha256=job.kernel_sha256,
                                 evaluator_version=EVALUATOR_VERSION, label=job.label,
                                 fidelity=job.fidelity)
        self.tolerance = 0.0
        self.precision_checked = False
        self.profile_tag: str | None = None
        self.n_runs = 0

    def close(self) -> None:
        if self.runner is not None:
            self.runner.close()

    # -- the flow -----------------------------------------------------------------------------
    def execute(self) -> EvalResult:
        try:
            return self._execute()
        except RunnerTimeout as exc:
            return self._finish(Status.TIMEOUT, message=str(exc))
        except RunnerDied as exc:
            if exc.out_of_memory:
                limit = self.runner.limits.memory_mb if isinstance(self.runner, ForkRunner) else None
                return self._finish(Status.OUT_OF_MEMORY, error=exc.error, message=(
                    f"exceeded the memory limit of {f'{limit} MiB' if limit else 'the machine'}"))
            return self._finish(Status.CRASHED, message=f"the evaluation process crashed: {exc}")

    def _execute(self) -> EvalResult:
        job, opts, res = self.job, self.opts, self.result
        target = self._shape(job.preset)
        res.tolerance = self.tolerance = float(opts.tolerance if opts.tolerance is not None
                                               else target[1])
        limits = job_limits(job)
        runner_dir = self.workdir / "runner"
        self.runner = (ForkRunner(job, runner_dir, limits) if self.isolated
                       else InProcessRunner(job, runner_dir, limits))
        reply = self.runner.request({"op": "load"})
        if not reply.get("ok"):
            err = self._kernel_error(reply)
            return self._finish(Status.BUILD_FAILED, error=err,
                                message=f"kernel failed to load: {err['type']}: {err['message']}"[:600])
        load_s = float(reply.get("seconds", 0.0))
        if job.fidelity == "trace":
            return self._trace_only(target[0], load_s)
        if job.fidelity in ("identify", "identify_screen"):
            return self._identify(target[0], load_s)

        screen = (job.fidelity == "screen" and job.problem.kind == "nkibench"
                  and job.preset != SCREEN_PRESET)
        if not screen:
            res.checked_preset = res.preset
            return self._verdict(target[0], opts.seeds, load_s, profile="run")
        small = self._shape(SCREEN_PRESET)[0]
        res.checked_preset = SCREEN_PRESET
        verdict = self._correctness(small, opts.seeds, load_s)
        if isinstance(verdict, _Failure) and verdict.cannot_run:
            self._note(f"cannot run at the {SCREEN_PRESET} shape ({verdict.check.reason}); "
                       f"screened at the {job.preset} shape with one seed and the adversarial inputs")
            res.checks.clear()
            res.checked_preset = job.preset
            seed = PROFILE_SEED if PROFILE_SEED in opts.seeds else opts.seeds[0]
            return self._verdict(target[0], (seed,), load_s, profile="trace", trace_shape=target[0])
        return self._conclude(verdict, opts.seeds, profile="trace", trace_shape=target[0])

    def _trace_only(self, shape: _Shape, load_s: float) -> EvalResult:
        """Fidelity ``trace``: the profile of a trace-only run at the job's shape, no correctness check."""
        self.result.checked_preset = None
        self.result.compile_time_s = load_s
        error = self._trace_profile(shape)
        if error is not None:
            return self._finish(Status.BUILD_FAILED, error=error,
                                message=f"kernel failed to trace: {error['type']}: {error['message']}"[:600])
        return self._finish(Status.PROFILED, message=f"profiled from a trace-only run at the {shape.preset} "
                                                      f"shape; correctness not checked")

    def _identify(self, shape: _Shape, load_s: float) -> EvalResult:
        """Fidelities ``identify`` and ``identify_screen``: what the verdict of a full check (the program at
        the job's shape) or of a screen (the program at the small shape, and the program at the job's shape,
        which decides the latency) depends on; nothing is checked."""
        self.result.checked_preset = None
        self.result.compile_time_s = load_s
        screen = self.job.fidelity == "identify_screen" and self.job.problem.kind == "nkibench"
        at = self._shape(SCREEN_PRESET)[0] if screen and self.job.preset != SCREEN_PRESET else shape
        identity: dict[str, Any] = {"preset": at.preset, "program": None, "why": None}
        self.result.identity = identity
        where = self._profile_inputs(at)
        if self.opts.adversarial and self._adversarial_shapes_differ(at, where):
            identity["why"] = "adversarial inputs of other shapes than the seeds' (one program hash covers one)"
            return self._finish(Status.PROFILED, message=f"identified: no program ({identity['why']})")
        reply = self.runner.request({"op": "program", **where})
        if not reply.get("ok"):
            identity["why"] = f"{self._kernel_error(reply).get('type')}"
        else:
            identity["program"], identity["why"] = reply.get("program"), reply.get("why")
        if screen and identity["program"] is not None:
            # the latency's part: the program at the job's shape (its calls, statements and scheduling settings
            # make the trace), with loop replay as cheap as the trace-only run, and no fingerprint of 10^5 records
            reply = self.runner.request({"op": "program", **self._profile_inputs(shape)})
            identity["stream"] = reply.get("program") if reply.get("ok") else None
            if identity["stream"] is None:
                identity["program"], identity["why"] = None, "no program hash at the job's shape"
        return self._finish(Status.PROFILED, message=f"identified: program at the {at.preset} shape "
                                                      f"{identity['program'] or 'none'} ({identity['why']})")

    def _adversarial_shapes_differ(self, shape: _Shape, seed_inputs: dict[str, Any]) -> bool:
        """Whether an adversarial input set has other shapes or dtypes than the seeds' (then the verdict covers
        programs at two shapes and the seeds' program hash does not stand for it)."""
        def signature(directory: Path, n: int) -> list[tuple]:
            arrays = (np.load(directory / f"nki_{i}.npy", mmap_mode="r", allow_pickle=False) for i in range(n))
            return [(a.shape, a.dtype.str) for a in arrays]
        seed = signature(Path(seed_inputs["inputs"]), seed_inputs["n_inputs"])
        for i in range(self._adversarial_count(shape)):
            adv = self._input_set(shape, "adversarial", i, lambda i=i: shape.adversarial_inputs()[i])
            if signature(Path(adv.directory), adv.n_inputs) != seed:
                return True
        return False

    def _profile_inputs(self, shape: _Shape) -> dict[str, Any]:
        """The runner's message fields for the seed-42 inputs at ``shape`` (no reference computed)."""
        inputs = self._input_set(shape, "profile", PROFILE_SEED, lambda: shape.task.get_inputs(PROFILE_SEED),
                                 reference=False)
        return {"inputs": str(inputs.directory), "n_inputs": inputs.n_inputs}

    def _verdict(self, shape: _Shape, seeds: tuple[int, ...], load_s: float, *, profile: str,
                 trace_shape: _Shape | None = None) -> EvalResult:
        return self._conclude(self._correctness(shape, seeds, load_s), seeds, profile=profile,
                              trace_shape=trace_shape)

    def _correctness(self, shape: _Shape, seeds: tuple[int, ...], load_s: float
                     ) -> "_Failure | tuple[_Failure | None, int]":
        """Seeds then adversarial inputs at one shape: a seed failure, or (adversarial failure
        or None, number of adversarial inputs)."""
        failure: _Failure | None = None
        for seed in seeds:
            try:
                self._check(shape, "seed", seed, lambda s=seed: shape.task.get_inputs(s),
                            first=self.result.compile_time_s is None, load_s=load_s)
            except _Failure as f:
                failure = failure or f
                if self.opts.fail_fast or f.category is not Status.INCORRECT:
                    break
        if failure is not None:
            return failure
        if not self.opts.adversarial:
            return None, 0
        n_adv = self._adversarial_count(shape)
        if n_adv == 0:
            self._note("the task defines no adversarial inputs (get_adversarial_inputs)")
        for i in range(n_adv):
            try:
                self._check(shape, "adversarial", i, lambda i=i: shape.adversarial_inputs()[i])
            except _Failure as f:
                failure = failure or f
                if self.opts.fail_fast:
                    break
        return failure, n_adv

    def _conclude(self, verdict: "_Failure | tuple[_Failure | None, int]", seeds: tuple[int, ...],
                  *, profile: str, trace_shape: _Shape | None = None) -> EvalResult:
        res = self.result
        if isinstance(verdict, _Failure):
            what = f"seed {verdict.check.index}"
            return self._finish(verdict.category, error=verdict.check.error,
                                message=_failure_message(verdict.category, what, verdict.check))
        failure, n_adv = verdict
        # a cheat is profiled too: it shows the speed it faked
        if profile == "trace" and trace_shape is not None:
            self._trace_profile(trace_shape)
        else:
            self._profile()
        if failure is not None:
            return self._finish(Status.CHEAT, error=failure.check.error, message=(
                f"passes all {len(seeds)} seeds but fails adversarial input "
                f"#{failure.check.index}: {failure.check.reason}"))
        errs = [e for c in res.checks for e in c.rel_errors if e is not None]
        worst = f"max rel. L2 error {max(errs):.3g}, " if errs else ""
        at = f" at the {res.checked_preset} shape" if res.checked_preset != res.preset else ""
        return self._finish(Status.CORRECT, message=(
            f"passes {len(seeds)} seed(s) and {n_adv} adversarial input(s){at} "
            f"({worst}tolerance {res.tolerance:.3g})"))

    def _finish(self, status: Status, *, message: str, error: dict | None = None) -> EvalResult:
        self.result.status, self.result.message, self.result.error = status, message, error
        return self.result

    def _note(self, line: str) -> None:
        if len(self.result.log) < MAX_LOG_LINES:
            self.result.log.append(f"[evaluator] {line}")

    # -- tasks and input sets -----------------------------------------------------------------
    def _shape(self, preset: str) -> tuple[_Shape, float]:
        task, tol = load_problem(self.job.problem, preset, self.workdir / f"task-{preset}")
        return _Shape(preset, task, task_key(self.job.problem, preset)), tol

    def _adversarial_count(self, shape: _Shape) -> int:
        return self.cache.count(f"{shape.key}|{shape.preset}", "adversarial", lambda: len(
            self._task_call(shape, "adversarial inputs", shape.adversarial_inputs)))

    def _input_set(self, shape: _Shape, kind: str, index: int,
                   make_inputs: Callable[[], list[np.ndarray]], *, reference: bool = True) -> InputSet:
        def compute() -> tuple[list[np.ndarray], Any]:
            inputs = self._task_call(shape, f"the inputs of {kind} {index}", make_inputs)
            ref = self._task_call(shape, f"the reference for {kind} {index}",
                                  lambda: shape.task.forward(*[np.array(x, copy=True) for x in inputs])
                                  ) if reference else None
            nki = self._task_call(shape, f"the NKI inputs of {kind} {index}",
                                  lambda: shape.task.to_nki([np.array(x, copy=True) for x in inputs]))
            return list(nki), ref
        return self.cache.get(shape.task, f"{shape.key}|{shape.preset}", kind, index,
                              self.workdir, compute)

    def _task_call(self, shape: _Shape, what: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception as exc:  # the task, not the kernel, is broken
            raise ProblemError(f"task {shape.task.name}: computing {what} failed: "
                               f"{type(exc).__name__}: {exc}") from exc

    # -- one input set ------------------------------------------------------------------------
    def _check(self, shape: _Shape, kind: str, index: int,
               make_inputs: Callable[[], list[np.ndarray]], *, first: bool = False,
               load_s: float = 0.0) -> None:
        assert self.runner is not None
        inputs = self._input_set(shape, kind, index, make_inputs)
        check = CheckResult(kind=kind, index=index, passed=False)
        self.result.checks.append(check)
        self.n_runs += 1
        tag = f"{shape.preset}-{kind}-{index}"
        outdir = self.workdir / f"out-{self.n_runs}"
        # the runner keeps the run (and its instruction stream) only for a profile to come
        keep = self.opts.profile and kind == "seed" and (index == PROFILE_SEED or self.profile_tag is None)
        reply = self.runner.request({
            "op": "run", "inputs": str(inputs.directory), "n_inputs": inputs.n_inputs,
            "out": str(outdir), "tag": tag, "keep": keep,
            "want_dtypes": self.opts.check_precision and not self.precision_checked})
        if not reply.get("ok"):
            err = self._kernel_error(reply)
            classes = set(reply.get("classes") or [])
            category = (Status.CRASHED if classes & set(RUNTIME_ERRORS) else Status.INCORRECT
                        if classes & set(CORRECTNESS_RULE_ERRORS) else Status.BUILD_FAILED)
            check.error, check.reason = err, f"{err['type']}: {err['message']}"[:500]
            raise _Failure(category, check, cannot_run=category is not Status.INCORRECT)
        if first:
            self.result.compile_time_s = load_s + float(reply.get("seconds") or 0.0)
        for line in reply.get("log") or []:
            if len(self.result.log) < MAX_LOG_LINES:
                self.result.log.append(str(line))

        outputs = self._load_outputs(outdir, reply, check)
        if not self.precision_checked and self.opts.check_precision:
            self.precision_checked = True
            self._check_precision(reply.get("dtypes_used"), inputs.input_dtypes, check)
        missing = unwritten_regions(_load_coverage(outdir, reply.get("coverage")))
        if missing:
            name, n, total = missing[0]
            check.reason = (f"partial output write: {n} of {total} elements of output '{name}' are "
                            f"never written")
            raise _Failure(Status.INCORRECT, check)

        ref = inputs.reference
        k_res: Any = outputs[0] if len(outputs) == 1 else tuple(outputs)
        try:
            actual = shape.task.from_nki(k_res, ref)
        except Exception as exc:  # noqa: BLE001 - a wrong output shape usually fails the reshape
            shapes = [tuple(np.shape(o)) for o in outputs]
            check.reason = (f"the kernel's outputs (shapes {shapes}) do not fit the reference: "
                            f"transform_nki_outputs raised {type(exc).__name__}: {exc}")
            raise _Failure(Status.INCORRECT, check, cannot_run=True) from None
        passed, errors, reason = compare_outputs(actual, ref, self.tolerance)
        check.rel_errors = errors
        if not passed:
            check.reason = reason
            raise _Failure(Status.INCORRECT, check, cannot_run=None in errors)
        check.passed = True
        if keep:
            self.profile_tag = tag

    def _load_outputs(self, outdir: Path, reply: dict[str, Any], check: CheckResult
                      ) -> list[np.ndarray]:
        """The runner's outputs as plain numeric arrays (no pickle, no object arrays)."""
        n = reply.get("n_outputs")
        if not isinstance(n, int) or not 0 < n <= MAX_OUTPUTS:
            check.reason = f"the kernel returned {n!r} outputs (expected 1 to {MAX_OUTPUTS})"
            raise _Failure(Status.INCORRECT, check)
        outputs = []
        for i in range(n):
            try:
                arr = np.load(outdir / f"out_{i}.npy", allow_pickle=False)
            except (OSError, ValueError) as exc:
                check.reason = f"output {i} is not a plain array: {exc}"
                raise _Failure(Status.INCORRECT, check) from None
            if not isinstance(arr, np.ndarray) or arr.dtype.kind not in NUMERIC_KINDS:
                check.reason = f"output {i} has the non-numeric dtype {arr.dtype}"
                raise _Failure(Status.INCORRECT, check)
            outputs.append(arr)
        return outputs

    def _check_precision(self, used: Any, input_dtypes: list[str], check: CheckResult) -> None:
        if used is None:
            self._note("precision check skipped: no instruction stream for this backend")
            return
        used = sorted(str(u) for u in used)
        self.result.dtypes_used = used
        low = lowered_dtypes(used, input_dtypes)
        if low:
            check.reason = (f"precision lowering: the kernel uses {', '.join(low)} but the problem's "
                            f"inputs are {', '.join(sorted(set(input_dtypes)))}")
            raise _Failure(Status.INCORRECT, check)

    # -- profile ------------------------------------------------------------------------------
    def _profile(self) -> None:
        if not self.opts.profile or self.profile_tag is None:
            return
        self._take_profile({"op": "profile", "tag": self.profile_tag})

    def _trace_profile(self, shape: _Shape) -> dict[str, Any] | None:
        """Profile a trace-only run at ``shape`` (its inputs only matter by shape: no reference is
        computed for them); returns the kernel's error if the run failed."""
        if not self.opts.profile:
            return None
        inputs = self._input_set(shape, "profile", PROFILE_SEED, lambda: shape.task.get_inputs(PROFILE_SEED),
                                 reference=False)
        where = {"inputs": str(inputs.directory), "n_inputs": inputs.n_inputs}
        assert self.runner is not None
        reply = self.runner.request({"op": "trace", **where})
        if reply.get("ok") and reply.get("fingerprint") is None:
            error = self._take_profile({"op": "trace_profile", **where})   # a backend without fingerprints
        elif not reply.get("ok"):
            error = self._kernel_error(reply)   # raises for an infrastructure error
            self._note(f"profiling failed: {error.get('type')}: {error.get('message')}")
        else:
            error = self._profile_of_stream(str(reply["fingerprint"]))
        if error is None:
            self._note(f"latency from a trace-only run at the {shape.preset} shape")
        return error

    def _profile_of_stream(self, fingerprint: str) -> dict[str, Any] | None:
        """The profile of the kept trace-only stream: an earlier kernel's, if its stream had this
        fingerprint (the model would give the same profile), else the model's, remembered."""
        key = ProfileCache.key(fingerprint, self.job.hw)
        raw = self.profiles.get(key)
        if raw is not None:
            self._note("the same trace-only instruction stream as an earlier kernel: its profile, not re-estimated")
            self._set_profile(raw)
            return None
        reply = self.runner.request({"op": "estimate_trace"})
        error = self._take_profile(reply=reply)
        raw = reply.get("profile")
        if error is None and isinstance(raw, dict):
            self.profiles.put(key, raw)
        return error

    def _take_profile(self, msg: dict[str, Any] | None = None, *,
                      reply: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """Ask the runner for a profile (or read its ``reply``); returns the kernel's error when it has none."""
        assert self.runner is not None
        reply = reply if reply is not None else self.runner.request(msg or {})
        if not reply.get("ok"):
            err = self._kernel_error(reply)   # raises for an infrastructure error
            self._note(f"profiling failed: {err.get('type')}: {err.get('message')}")
            return err
        raw = reply.get("profile")
        if isinstance(raw, dict):
            self._set_profile(raw)
        return None

    def _set_profile(self, raw: dict[str, Any]) -> None:
        record = profile_record(raw, source=self.job.backend, hw=self.job.hw)
        self.result.profile = record.to_dict()
        self.result.latency_ms = record.latency_ms

    # -- errors -------------------------------------------------------------------------------
    def _kernel_error(self, reply: dict[str, Any]) -> dict[str, Any]:
        err = dict(reply.get("error") or {})
        if (err.get("type") in INFRA_ERRORS
                and f"accelopt_nb.errors.{err['type']}" in (reply.get("classes") or [])):
            raise INFRA_ERRORS[err["type"]](str(err.get("message")))
        err.setdefault("type", "Error")
        err.setdefault("message", "")
        return err


def _load_coverage(outdir: Path, report: Any) -> list[tuple[str, tuple[int, ...], np.ndarray]]:
    if not isinstance(report, list):
        return []
    out = []
    for item in report:
        regions = np.load(outdir / Path(str(item["file"])).name, allow_pickle=False)
        out.append((str(item["name"]), tuple(int(s) for s in item["shape"]), regions))
    return out


def _failure_message(category: Status, what: str, check: CheckResult) -> str:
    if (check.error or {}).get("type") == "SimulatorBugError":
        return f"simulator bug (not the kernel's fault) on {what}: {check.reason}"
    lead = {Status.BUILD_FAILED: "kernel failed to build/trace",
            Status.CRASHED: "kernel crashed while running",
            Status.INCORRECT: "incorrect"}.get(category, category.value)
    return f"{lead} on {what}: {check.reason}"
