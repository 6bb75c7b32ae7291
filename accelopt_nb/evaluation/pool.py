"""Warm workers: long-lived, pre-imported judge processes, so a job costs a fork, not a Python start.

A :class:`WarmWorker` is ``python -m accelopt_nb.evaluation.worker --serve`` started with the
sandbox's scrubbed environment (:func:`.sandbox.worker_env`). It imports NumPy, the simulator, the
performance model, NKIBench and the judge once; every job then runs in it as a judge that forks a
fresh, limited runner for the kernel (:mod:`.runner`), so each job is as isolated as before and
the kernel never runs in the worker itself. A worker that dies or stops answering is reported as
that job's ``crashed``/``timeout`` outcome and replaced on the next job.

A worker nobody closed (a pool that was not shut down) still goes away: a finalizer ends its
process and removes its directory when the worker is garbage-collected or the interpreter exits.
"""
from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path
from typing import Any

from accelopt_nb.evaluation.sandbox import SandboxOutcome, worker_env

PRELOAD = ("numpy", "accelopt_nb.sim.api.loader", "accelopt_nb.perf", "nkibench",
           "accelopt_nb.evaluation.engine", "accelopt_nb.evaluation.backends.simulator")
PRELOAD_ENV = "ACCELOPT_EVAL_PRELOAD"    # extra modules, comma-separated (e.g. a backend plug-in)
START_TIMEOUT_S = 120.0


class WarmWorker:
    """One warm judge process; ``run(target, payload, timeout_s)`` -> :class:`SandboxOutcome`."""

    def __init__(self, *, python: str | None = None) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="accelopt-eval-warm-"))
        extra = [m for m in os.environ.get(PRELOAD_ENV, "").split(",") if m.strip()]
        self._stderr = open(self.dir / "stderr.txt", "wb")
        try:
            self.proc = subprocess.Popen(
                [python or sys.executable, "-m", "accelopt_nb.evaluation.worker", "--serve",
                 *PRELOAD, *extra],
                cwd=self.dir, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                env=worker_env(self.dir, None, ()), start_new_session=True)
        except BaseException:
            _reap(None, self._stderr, self.dir)
            raise
        # Holds no reference to self, so an unclosed worker is still collected (and reaped).
        self._finalizer = weakref.finalize(self, _reap, self.proc, self._stderr, self.dir)
        self.jobs = 0
        ready = self._read_line(START_TIMEOUT_S)
        if not ready or json.loads(ready).get("kind") != "ready":
            self.close()
            raise RuntimeError(f"the evaluation worker did not start: {self._stderr_tail()}")

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def run(self, target: str, payload: Any, timeout_s: float) -> SandboxOutcome:
        """Call ``target(payload)`` in the worker (``timeout_s``: its answer's backstop)."""
        t0 = time.monotonic()
        self.jobs += 1
        try:
            assert self.proc.stdin is not None
            request = {"target": target, "payload": payload}
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass
        line = self._read_line(timeout_s)
        wall = time.monotonic() - t0
        if not line:            # None: no answer in time; b"": the worker closed its end (died)
            timed_out = line is None
            self.close()
            kind = "timeout" if timed_out else "crashed"
            return SandboxOutcome(kind=kind, returncode=self.proc.returncode, wall_time_s=wall,
                                  stderr_tail=self._stderr_tail(),
                                  notes=["the warm evaluation worker stopped answering"
                                         if timed_out else "the warm evaluation worker died"])
        data = json.loads(line)
        return SandboxOutcome(kind=data["kind"], value=data.get("value"), error=data.get("error"),
                              wall_time_s=wall)

    def _read_line(self, timeout_s: float) -> bytes | None:
        """One line; b"" at end of stream, None when ``timeout_s`` passes first."""
        out = self.proc.stdout
        assert out is not None
        deadline = time.monotonic() + timeout_s
        buf = b""
        fd = out.fileno()
        while not buf.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return b""
            buf += chunk
        return buf

    def _stderr_tail(self) -> str:
        try:
            return (self.dir / "stderr.txt").read_bytes()[-4000:].decode("utf-8", "replace")
        except OSError:
            return ""

    def close(self) -> None:
        """End the process (politely, then by killing its group) and remove the directory."""
        self._finalizer()


def _reap(proc: "subprocess.Popen[bytes] | None", stderr: Any, directory: Path) -> None:
    if proc is not None and proc.poll() is None:
        try:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                proc.kill()
            proc.wait()
    stderr.close()
    shutil.rmtree(directory, ignore_errors=True)
