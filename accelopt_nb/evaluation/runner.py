"""The runner: the only process that executes the kernel, and all it does is run it.

The judge (:mod:`accelopt_nb.evaluation.engine`) forks one runner per job. The runner drops into
its own process group and directory, limits its address space, file sizes and core dumps, loads
the kernel into the backend and then serves the judge's requests over a socket, one JSON line
each way: ``load``, ``run`` (inputs from an input-set directory, outputs written as plain
``.npy`` files next to a coverage file of the output write regions), ``profile`` (of a run),
``trace_profile`` (a trace-only run), or ``trace`` (a trace-only run, kept; its stream's
fingerprint) then ``estimate_trace``. It never sees a reference and decides nothing: whatever the
kernel does to NumPy, ``math`` or the simulator in this process, the judge, which never ran it,
loads the ``.npy`` files without pickle and checks them itself.

A fork of a warm (pre-imported) parent costs a few milliseconds, against 0.35-0.8 s for a fresh
interpreter. :class:`InProcessRunner` serves the same requests without a process, for trusted
callers (``accelopt bench`` on the simulator).
"""
from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from accelopt_nb.errors import KernelError, KernelLoadError
from accelopt_nb.evaluation.sandbox import describe_exit
from accelopt_nb.evaluation.worker import is_memory_error

MAX_LOG_LINES = 50


@dataclass
class RunnerLimits:
    """Limits of one runner process (the job's sandbox limits)."""

    timeout_s: float = 180.0               # total time the judge waits on this runner
    memory_mb: int | None = 4096           # address-space limit (RLIMIT_AS)
    file_size_mb: int = 1024               # largest file it may write


class RunnerTimeout(Exception):
    """The runner ran past its wall-time budget (its process group was killed)."""


class RunnerDied(Exception):
    """The runner died or ran out of memory before answering."""

    def __init__(self, message: str, *, out_of_memory: bool = False,
                 error: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.out_of_memory, self.error = out_of_memory, error


# ------------------------------------------------------------------------------ the judge's side
class ForkRunner:
    """A runner forked from this process. Use from a single-threaded process (a worker)."""

    def __init__(self, job: Any, workdir: Path, limits: RunnerLimits) -> None:
        self.limits = limits
        self.budget_s = float(limits.timeout_s)
        self.pid, self.sock = _fork(job, Path(workdir), limits)
        self._buf = b""
        self.returncode: int | None = None

    def request(self, msg: dict[str, Any]) -> dict[str, Any]:
        t0 = time.monotonic()
        try:
            self.sock.sendall((json.dumps(msg) + "\n").encode())
        except OSError:
            self._died()
        while b"\n" not in self._buf:
            left = self.budget_s - (time.monotonic() - t0)
            ready, _, _ = select.select([self.sock], [], [], max(0.0, left))
            if not ready:
                self.budget_s = 0.0
                self.kill()
                raise RunnerTimeout(f"exceeded the wall-time limit of {self.limits.timeout_s:g} s")
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                self._died()
            self._buf += chunk
        self.budget_s -= time.monotonic() - t0
        line, self._buf = self._buf.split(b"\n", 1)
        reply = json.loads(line)
        if reply.get("out_of_memory"):
            self.kill()
            raise RunnerDied(reply.get("message", "MemoryError"), out_of_memory=True,
                             error=reply.get("error"))
        return reply

    def _died(self) -> None:
        raise RunnerDied(f"the kernel's process {describe_exit(self._wait())} without an answer")

    def _wait(self) -> int | None:
        if self.returncode is None:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            for target in (lambda: os.killpg(self.pid, signal.SIGKILL),
                           lambda: os.kill(self.pid, signal.SIGKILL)):
                try:
                    target()
                    break
                except (ProcessLookupError, PermissionError):
                    continue
            self._wait()

    def close(self) -> None:
        if self.returncode is None:
            try:
                self.sock.sendall(b'{"op": "exit"}\n')
                ready, _, _ = select.select([self.sock], [], [], 2.0)
            except OSError:
                pass
            self.kill()
        self.sock.close()


def _fork(job: Any, workdir: Path, limits: RunnerLimits) -> tuple[int, socket.socket]:
    parent, child = socket.socketpair()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the runner: never returns
        code = 1
        try:
            parent.close()
            code = _child_main(child, job, workdir, limits)
        finally:
            os._exit(code)
    child.close()
    return pid, parent


class InProcessRunner:
    """The same requests served in this process: no isolation, for trusted kernels only."""

    def __init__(self, job: Any, workdir: Path, limits: RunnerLimits | None = None) -> None:
        Path(workdir).mkdir(parents=True, exist_ok=True)
        self.server = _Server(job, Path(workdir))

    def request(self, msg: dict[str, Any]) -> dict[str, Any]:
        reply = json.loads(json.dumps(self.server.handle(msg)))
        if reply.get("out_of_memory"):
            raise RunnerDied("MemoryError", out_of_memory=True, error=reply.get("error"))
        return reply

    def close(self) -> None:
        self.server.close()


# ------------------------------------------------------------------------------ the runner's side
def _child_main(sock: socket.socket, job: Any, workdir: Path, limits: RunnerLimits) -> int:
    try:
        os.setpgid(0, 0)
    except OSError:
        pass
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    # A warm worker's answer stream stays the worker's: its death must reach the pool as
    # end-of-stream whatever runners are alive. (Other inherited descriptors are left alone:
    # closing them under live Python objects would let a reused number be closed twice.)
    from accelopt_nb.evaluation import worker
    if worker.PROTOCOL_FD is not None:
        os.close(worker.PROTOCOL_FD)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    f = sock.makefile("rb")
    workdir.mkdir(parents=True, exist_ok=True)
    os.chdir(workdir)
    # The kernel's prints go to a file.
    out = os.open(workdir / "runner_output.txt", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(out, 1)
    os.dup2(out, 2)
    from accelopt_nb.evaluation.worker import _limit_resources
    _limit_resources(limits.memory_mb, limits.file_size_mb)
    # Backstop if the judge itself dies: a runner never outlives its CPU budget.
    import resource
    cpu = int(limits.timeout_s) + 30
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
    server = _Server(job, workdir)
    for line in f:
        msg = json.loads(line)
        if msg.get("op") == "exit":
            break
        try:
            reply = server.handle(msg)
        except MemoryError:
            reply = {"out_of_memory": True, "message": "MemoryError"}
        data = (json.dumps(reply) + "\n").encode()
        sock.sendall(data)
        if reply.get("out_of_memory"):
            break
    server.close()
    return 0


class _Server:
    """Serves one job's requests; holds the backend and the runs a profile may ask for."""

    def __init__(self, job: Any, workdir: Path) -> None:
        self.job, self.workdir = job, workdir
        self.kernel_path = workdir / "kernel.py"
        self.backend: Any = None
        self.runs: dict[str, tuple[Any, list[np.ndarray]]] = {}

    def close(self) -> None:
        if self.backend is not None:
            self.backend.close()

    def handle(self, msg: dict[str, Any]) -> dict[str, Any]:
        op = msg.get("op")
        try:
            if op == "load":
                return self._load()
            if op == "run":
                return self._run(msg)
            if op == "profile":
                run, inputs = self.runs[msg["tag"]]
                return {"ok": True, "profile": _plain(self.backend.profile(run, inputs))}
            if op == "trace_profile":
                return {"ok": True, "profile": _plain(self.backend.trace_profile(_inputs(msg)))}
            if op == "trace":   # None: this backend does not fingerprint its streams (ask trace_profile)
                trace = getattr(self.backend, "trace", None)
                return {"ok": True, "fingerprint": None if trace is None else str(trace(_inputs(msg)))}
            if op == "program":   # None: this backend cannot write its programs down
                program = getattr(self.backend, "program", None)
                found = (None, "this backend has no program hash") if program is None else program(_inputs(msg))
                return {"ok": True, "program": found[0], "why": found[1]}
            if op == "estimate_trace":
                return {"ok": True, "profile": _plain(self.backend.estimate_trace())}
            return {"ok": False, "error": {"type": "EvaluationError", "message": f"unknown op {op!r}"},
                    "classes": ["accelopt_nb.errors.EvaluationError"]}
        except BaseException as exc:  # noqa: BLE001 - report anything the kernel does
            if is_memory_error(exc):
                return {"out_of_memory": True, "message": "MemoryError",
                        "error": self._error_dict(exc)}
            return {"ok": False, "error": self._error_dict(exc),
                    "classes": [f"{c.__module__}.{c.__name__}" for c in type(exc).__mro__]}

    def _load(self) -> dict[str, Any]:
        from accelopt_nb.evaluation.backends import make_backend
        self.kernel_path.write_text(self.job.kernel_source)
        t0 = time.perf_counter()
        self.backend = make_backend(self.job, self.workdir)
        self.backend.load(self.kernel_path, self.job.options.kernel_name)
        return {"ok": True, "seconds": time.perf_counter() - t0}

    def _run(self, msg: dict[str, Any]) -> dict[str, Any]:
        inputs = _inputs(msg)
        out = self.backend.run([np.array(x, copy=True) for x in inputs])
        outdir = Path(msg["out"])
        outdir.mkdir(parents=True, exist_ok=True)
        for i, o in enumerate(out.outputs):
            np.save(outdir / f"out_{i}.npy", np.asarray(o), allow_pickle=False)
        trace = out.trace
        if trace is None and msg.get("want_dtypes"):
            try:
                trace = self.backend.dtype_trace(inputs)
            except Exception:  # noqa: BLE001 - best effort on hardware; the judge notes it
                trace = None
        coverage = _coverage(out.trace, outdir)
        self.runs = {msg["tag"]: (out, inputs)} if msg.get("keep") else self.runs
        return {"ok": True, "n_outputs": len(out.outputs), "seconds": out.seconds,
                "log": [str(x) for x in out.log[:MAX_LOG_LINES]], "coverage": coverage,
                "dtypes_used": sorted(trace.dtypes_used()) if trace is not None else None}

    def _error_dict(self, exc: BaseException) -> dict[str, Any]:
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
            d["file"] = self.job.options.kernel_filename
        d["message"] = str(d.get("message", ""))[:2000]
        return {k: (v if isinstance(v, (str, int, float, bool, type(None))) else str(v))
                for k, v in d.items()}


def _inputs(msg: dict[str, Any]) -> list[np.ndarray]:
    # copy-on-write maps: the kernel may scribble on its inputs without touching the shared files
    return [np.load(Path(msg["inputs"]) / f"nki_{i}.npy", mmap_mode="c", allow_pickle=False)
            for i in range(int(msg["n_inputs"]))]


def _coverage(trace: Any, outdir: Path) -> list[dict[str, Any]] | None:
    """Write regions of each output tensor, saved as (n, 2, ndim) lo/hi arrays for the judge."""
    if trace is None:
        return None
    from accelopt_nb.evaluation.correctness import output_write_regions
    report = []
    for n, (name, shape, boxes) in enumerate(output_write_regions(trace)):
        path = outdir / f"cov_{n}.npy"
        np.save(path, boxes, allow_pickle=False)
        report.append({"name": str(name), "shape": [int(s) for s in shape], "file": path.name})
    return report


def _plain(obj: Any) -> Any:
    from accelopt_nb.evaluation.result import _jsonable
    return _jsonable(obj)


def _same_file(a: str | None, b: str) -> bool:
    if not a:
        return False
    try:
        return Path(a).resolve() == Path(b).resolve()
    except OSError:
        return a == b
