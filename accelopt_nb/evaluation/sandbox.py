"""Run one function in a separate, limited process, so untrusted kernels never take the caller down.

``run_sandboxed("pkg.module:function", payload, limits)`` starts ``python -m
accelopt_nb.evaluation.worker`` in a fresh temporary directory, with a scrubbed environment (no API
keys), a wall-time limit (the whole process group is killed), an address-space limit
(``RLIMIT_AS``, set by the worker before it imports anything heavy), a file-size limit and no core
dumps. The function gets the JSON ``payload`` and returns a JSON value. Whatever happens, the caller
gets a :class:`SandboxOutcome`: ``ok``, ``error`` (the function raised), ``out_of_memory``,
``timeout`` or ``crashed`` (the process died without a result).

A subprocess rather than ``multiprocessing``: it can be killed as a group, it starts from a clean
interpreter (no state inherited from a notebook kernel), and it needs no pickling of the caller's
objects.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import accelopt_nb

# The directory holding the accelopt_nb (and nkibench) packages, so the worker imports this code
# even when the project is used from a checkout without being installed.
PACKAGE_ROOT = str(Path(accelopt_nb.__file__).resolve().parent.parent)

# Environment variables passed through to the worker; everything else (API keys, tokens) is dropped.
PASSTHROUGH_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "LD_LIBRARY_PATH", "TZ",
                   "NKIBENCH_PATH")  # problem folders of ours: a worker judges them by name too
PASSTHROUGH_PREFIXES = ("NEURON_", "ACCELOPT_NEURON_")
TAIL_BYTES = 4000


@dataclass
class SandboxLimits:
    """Resource limits of one sandboxed run."""

    timeout_s: float = 180.0
    memory_mb: int | None = 4096       # address-space limit; None for no limit
    file_size_mb: int = 1024           # largest file the process may write (stdout included)


@dataclass
class SandboxOutcome:
    """What happened to one sandboxed run."""

    kind: str                          # "ok" | "error" | "out_of_memory" | "timeout" | "crashed"
    value: Any = None                  # the function's return value, when kind == "ok"
    error: dict[str, Any] | None = None  # {"type", "message", "traceback"} for error/out_of_memory
    returncode: int | None = None
    stdout_tail: str = ""
    stderr_tail: str = ""
    wall_time_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.kind == "ok"

    def describe(self) -> str:
        """One readable sentence about a failed run."""
        if self.kind == "timeout":
            return f"timed out after {self.wall_time_s:.1f} s (process group killed)"
        if self.kind == "out_of_memory":
            return f"ran out of memory: {(self.error or {}).get('message', 'MemoryError')}"
        if self.kind == "error":
            e = self.error or {}
            return f"{e.get('type', 'error')}: {e.get('message', '')}"
        if self.kind == "crashed":
            return f"process {describe_exit(self.returncode)}"
        return "ok"


def describe_exit(returncode: int | None) -> str:
    """How a process ended, for a person: 'was killed by SIGKILL (possibly ...)' or 'exited with status N'."""
    if returncode is not None and returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        extra = " (possibly the system OOM killer)" if -returncode == signal.SIGKILL else ""
        return f"was killed by {name}{extra}"
    return f"exited with status {returncode}"


def run_sandboxed(target: str, payload: Any, limits: SandboxLimits | None = None, *,
                  env: Mapping[str, str] | None = None, extra_pythonpath: Sequence[str] = (),
                  keep_workdir: bool = False, python: str | None = None) -> SandboxOutcome:
    """Call ``target`` (``"module:function"``) with ``payload`` in a sandboxed worker process."""
    limits = limits or SandboxLimits()
    workdir = Path(tempfile.mkdtemp(prefix="accelopt-eval-"))
    job_path, result_path = workdir / "job.json", workdir / "result.json"
    job_path.write_text(json.dumps({"target": target, "payload": payload,
                                    "memory_mb": limits.memory_mb,
                                    "file_size_mb": limits.file_size_mb}))
    out_path, err_path = workdir / "stdout.txt", workdir / "stderr.txt"
    cmd = [python or sys.executable, "-m", "accelopt_nb.evaluation.worker", str(job_path),
           str(result_path)]
    t0 = time.monotonic()
    try:
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen(cmd, cwd=workdir, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=err, env=worker_env(workdir, env, extra_pythonpath),
                                    start_new_session=True)
            try:
                returncode: int | None = proc.wait(timeout=limits.timeout_s)
                timed_out = False
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill_group(proc)
                returncode = proc.wait()
            except BaseException:  # KeyboardInterrupt in the caller: never leave the child running
                _kill_group(proc)
                proc.wait()
                raise
        wall = time.monotonic() - t0
        outcome = _read_outcome(result_path, returncode, timed_out)
        outcome.wall_time_s = wall
        outcome.stdout_tail = _tail(out_path)
        outcome.stderr_tail = _tail(err_path)
        return outcome
    finally:
        if not keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)


def worker_env(workdir: Path, overrides: Mapping[str, str] | None,
                extra_pythonpath: Sequence[str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k in PASSTHROUGH_ENV or k.startswith(PASSTHROUGH_PREFIXES)}
    env.update({
        "HOME": str(workdir), "TMPDIR": str(workdir),
        "PYTHONPATH": os.pathsep.join([PACKAGE_ROOT, *map(str, extra_pythonpath)]),
        "PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0",
        "MPLBACKEND": "Agg",
        # One BLAS/OpenMP thread per worker: the pool already uses every core, and each extra
        # thread reserves address space that counts against RLIMIT_AS.
        "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
    })
    env.setdefault("PATH", os.defpath)
    if overrides:
        env.update(overrides)
    return env


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            proc.kill()
        except ProcessLookupError:
            pass


def _read_outcome(result_path: Path, returncode: int | None, timed_out: bool) -> SandboxOutcome:
    if timed_out:
        return SandboxOutcome(kind="timeout", returncode=returncode)
    if result_path.is_file():
        try:
            data = json.loads(result_path.read_text())
            return SandboxOutcome(kind=data["kind"], value=data.get("value"),
                                  error=data.get("error"), returncode=returncode)
        except (ValueError, KeyError) as exc:
            return SandboxOutcome(kind="crashed", returncode=returncode,
                                  notes=[f"unreadable worker result: {exc}"])
    return SandboxOutcome(kind="crashed", returncode=returncode)


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - TAIL_BYTES))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
