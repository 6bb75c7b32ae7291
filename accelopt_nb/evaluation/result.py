"""What one evaluation returns: a status, the reason, per-input correctness details and the profile.

Everything here is plain data that round-trips through JSON (``to_dict`` / ``from_dict``), because
results cross process and machine boundaries (sandbox worker, Dask) and are cached on disk.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from typing import Any


class Status(str, Enum):
    """The verdict of one evaluation, from earliest failure to success."""

    REJECTED = "rejected"            # refused by the static check, never ran
    BUILD_FAILED = "build_failed"    # did not load, trace or compile (syntax, NKI rule, API misuse)
    CRASHED = "crashed"              # the sandboxed process died or the runtime failed
    TIMEOUT = "timeout"              # ran past the wall-time limit
    OUT_OF_MEMORY = "out_of_memory"  # ran past the memory limit
    INCORRECT = "incorrect"          # ran, but failed a seed (values, shape, coverage, precision, rules)
    CHEAT = "cheat"                  # passed every seed but failed an adversarial input
    CORRECT = "correct"              # passed every seed and every adversarial input
    PROFILED = "profiled"            # fidelity "trace": profiled from a trace-only run, correctness not checked

    def __str__(self) -> str:
        return self.value


# Statuses that depend on the machine's load or limits rather than on the kernel alone: never cached.
TRANSIENT_STATUSES = frozenset({Status.TIMEOUT, Status.OUT_OF_MEMORY, Status.CRASHED})


@dataclass
class CheckResult:
    """The outcome of running the kernel on one input set (one seed or one adversarial input)."""

    kind: str                               # "seed" | "adversarial"
    index: int                              # the seed, or the position in get_adversarial_inputs()
    passed: bool
    rel_errors: list[float | None] = field(default_factory=list)  # per output; None when not computed
    reason: str | None = None               # why it failed, in one sentence
    error: dict[str, Any] | None = None     # the kernel error, when the run raised

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["rel_errors"] = [_json_float(x) for x in self.rel_errors]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CheckResult":
        d = dict(d)
        d["rel_errors"] = [_from_json_float(x) for x in d.get("rel_errors", [])]
        return cls(**{k: v for k, v in d.items() if k in _field_names(cls)})


@dataclass
class EvalResult:
    """The result of evaluating one kernel on one problem."""

    status: Status
    message: str                            # one readable line: what happened
    problem: str
    preset: str
    backend: str
    hw: str
    kernel_sha256: str
    evaluator_version: str
    error: dict[str, Any] | None = None     # KernelError.to_dict()-shaped: type, message, api, file, line, rule
    checks: list[CheckResult] = field(default_factory=list)
    tolerance: float | None = None
    dtypes_used: list[str] = field(default_factory=list)
    profile: dict[str, Any] | None = None
    latency_ms: float | None = None
    compile_time_s: float | None = None     # simulator: load + first trace/run; neuron: first compile+run
    wall_time_s: float = 0.0
    log: list[str] = field(default_factory=list)  # device_print lines and notes, truncated
    label: str | None = None                # the caller's name for this job (batch evaluation)
    cached: bool = False
    fidelity: str = "full"                  # the job's fidelity level (job.FIDELITIES)
    checked_preset: str | None = None       # the shape preset correctness was checked at
    # fidelity "identify"/"identify_screen": the kernel's program hash (sim.program_fingerprint) at
    # ``identity["preset"]``, why it has none, and (identify_screen) the job shape's program hash ("stream")
    identity: dict[str, Any] | None = None
    inherited_from: str | None = None       # the label of the kernel whose verdict this is (the same program)

    @property
    def correct(self) -> bool:
        return self.status is Status.CORRECT

    @property
    def line(self) -> int | None:
        """The kernel line the error points at, if any."""
        return (self.error or {}).get("line")

    def seed_checks(self) -> list[CheckResult]:
        return [c for c in self.checks if c.kind == "seed"]

    def adversarial_checks(self) -> list[CheckResult]:
        return [c for c in self.checks if c.kind == "adversarial"]

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["status"] = self.status.value
        d["checks"] = [c.to_dict() for c in self.checks]
        d["tolerance"] = _json_float(self.tolerance)
        d["latency_ms"] = _json_float(self.latency_ms)
        d["profile"] = _jsonable(self.profile)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "EvalResult":
        d = dict(d)
        d["status"] = Status(d["status"])
        d["checks"] = [CheckResult.from_dict(c) for c in d.get("checks", [])]
        d["tolerance"] = _from_json_float(d.get("tolerance"))
        d["latency_ms"] = _from_json_float(d.get("latency_ms"))
        return cls(**{k: v for k, v in d.items() if k in _field_names(cls)})

    def summary(self) -> str:
        """A short multi-line report for people (the CLI's default output)."""
        checked = (f", checked at {self.checked_preset}"
                   if self.checked_preset not in (None, self.preset) else "")
        lines = [f"status: {self.status.value}  ({self.problem}, preset {self.preset}{checked}, "
                 f"{self.backend}/{self.hw}, fidelity {self.fidelity})", f"  {self.message}"]
        if self.error:
            e = self.error
            where = f"{e.get('file') or 'kernel'}:{e.get('line') if e.get('line') is not None else '?'}"
            lines.append(f"  error: {e.get('type')} at {where}: {e.get('message')}")
            if e.get("rule"):
                lines.append(f"  rule: {e['rule']}")
        for c in self.checks:
            errs = ", ".join("-" if x is None else f"{x:.3g}" for x in c.rel_errors)
            mark = "pass" if c.passed else "FAIL"
            what = f"seed {c.index}" if c.kind == "seed" else f"adversarial #{c.index}"
            tail = f" - {c.reason}" if c.reason and not c.passed else ""
            lines.append(f"  {mark} {what:<16} rel. L2 error [{errs}]{tail}")
        if self.latency_ms is not None:
            lines.append(f"  latency: {self.latency_ms:.4g} ms")
        if self.compile_time_s is not None:
            lines.append(f"  compile/trace time: {self.compile_time_s * 1e3:.3g} ms")
        lines.append(f"  wall time: {self.wall_time_s:.2f} s{'  (cached)' if self.cached else ''}")
        return "\n".join(lines)


def _field_names(cls: type) -> set[str]:
    return {f.name for f in fields(cls)}


def _json_float(x: float | None) -> float | str | None:
    """JSON has no inf/nan; keep them as strings so a failed check still round-trips."""
    if x is None:
        return None
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def _from_json_float(x: Any) -> float | None:
    if x is None:
        return None
    return float(x)


def _jsonable(obj: Any) -> Any:
    """Convert NumPy scalars, tuples and non-finite floats in a profile dict to plain JSON values."""
    if obj is None or isinstance(obj, (str, bool, int)):
        return obj
    if isinstance(obj, float):
        return _json_float(obj)
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if hasattr(obj, "item"):  # numpy scalar
        return _jsonable(obj.item())
    return str(obj)
