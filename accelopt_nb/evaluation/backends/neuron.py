"""The real-hardware backend: every piece of Neuron-specific code lives in this module.

How a kernel is evaluated on a NeuronCore
-----------------------------------------
* **Toolchain**: ``neuronx-cc`` and ``neuron-profile`` on PATH, and a Python that imports
  ``neuronxcc.nki`` (``NeuronOptions.python``, else ``$ACCELOPT_NEURON_PYTHON``, else ours).
  Anything missing raises :class:`BackendUnavailableError` naming it.
* **Driver**: one long-lived subprocess, ``python -m accelopt_nb.evaluation.backends.neuron driver``, run
  by that Python. It imports the kernel once and, per input set, calls
  ``nki.baremetal(kernel, save_neff_name=, save_trace_name=, additional_compile_opt=)`` (compile +
  run on the pinned core), saving outputs, the NEFF and the NTFF. It speaks one JSON line per
  request on its own copy of stdout; anything the kernel or compiler prints goes to stderr.
  A failure before the NEFF exists is a compile failure (``build_failed``); after, a runtime
  failure (``crashed``). The first call's time (compile + one run) is the compile time.
* **Latency**, the paper's protocol: re-run the already-compiled NEFF with ``neuron-profile
  capture`` (2 warm-ups, then 10 timed runs, each read back with ``neuron-profile view
  --output-format summary-json``: ``total_time`` seconds), and repeat the round while
  (max - min) / min exceeds 1 % on trn1 or 4 % on trn2, for at most 10 rounds; the round with the
  smallest spread is kept. Reusing the NEFF avoids the original's recompile per timed run.
* **Profile fields**: the summary-json of the seed-42 run. Metrics sit under the first top-level
  key (or in the first element of a list there); ``*_percent`` fields are fractions in [0, 1].
* **Environment**: ``NEURON_CC_FLAGS=--auto-cast=none`` (no silent down-casting), and either
  ``NEURON_RT_VISIBLE_CORES`` (the executor's lease) or ``NEURON_RT_NUM_CORES=1``.
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from accelopt_nb.errors import (BackendUnavailableError, KernelError, KernelLoadError,
                                KernelRuntimeError)
from accelopt_nb.evaluation.job import LATENCY_SPREAD, NeuronOptions

NEURONX_CC = "neuronx-cc"
NEURON_PROFILE = "neuron-profile"
NEURON_LS = "neuron-ls"
COMPILE_RULE = "the kernel must compile with neuronx-cc (nki.baremetal)"
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


# ---------------------------------------------------------------------------------------------
# toolchain
# ---------------------------------------------------------------------------------------------
@dataclass
class Toolchain:
    neuronx_cc: str
    neuron_profile: str
    python: str
    compiler_version: str = ""


def find_toolchain(options: NeuronOptions | None = None) -> Toolchain:
    """Locate the Neuron tools or raise :class:`BackendUnavailableError` saying what is missing."""
    options = options or NeuronOptions()
    cc, prof = shutil.which(NEURONX_CC), shutil.which(NEURON_PROFILE)
    python = options.python or os.environ.get("ACCELOPT_NEURON_PYTHON") or sys.executable
    missing = [name for name, path in ((NEURONX_CC, cc), (NEURON_PROFILE, prof)) if not path]
    if missing:
        raise BackendUnavailableError(
            f"the neuron backend needs the AWS Neuron SDK, but {' and '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not on PATH; run on a Trainium instance with "
            f"the Neuron SDK (or use backend='simulator')")
    version = ""
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=60)
        version = (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr) else ""
    except (OSError, subprocess.TimeoutExpired):
        pass
    return Toolchain(neuronx_cc=cc or "", neuron_profile=prof or "", python=python,
                     compiler_version=version)


def detect_neuron_cores() -> int | None:
    """NeuronCores on this machine: ``$ACCELOPT_NEURON_CORES``, else ``neuron-ls --json-output``."""
    env = os.environ.get("ACCELOPT_NEURON_CORES")
    if env:
        return int(env)
    exe = shutil.which(NEURON_LS)
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "--json-output"], capture_output=True, text=True, timeout=60)
        devices = json.loads(out.stdout)
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None
    total = sum(int(d.get("nc_count", 0)) for d in devices if isinstance(d, dict))
    return total or None


# ---------------------------------------------------------------------------------------------
# neuron-profile summary-json and the latency protocol
# ---------------------------------------------------------------------------------------------
def parse_summary_json(text: str) -> dict[str, Any]:
    """The metrics of ``neuron-profile view --output-format summary-json``: the dict under the
    first top-level key (or the first element of a list there), numeric strings made numbers.
    ``*_percent`` fields are kept as the fractions the tool writes."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise KernelRuntimeError(f"neuron-profile printed no valid summary-json ({exc}): "
                                 f"{text[:200]!r}", api="neuron-profile view") from None
    if not isinstance(data, dict) or not data:
        raise KernelRuntimeError("neuron-profile summary-json is empty", api="neuron-profile view")
    metrics = data[next(iter(data))]
    if isinstance(metrics, list):
        metrics = metrics[0] if metrics else {}
    if not isinstance(metrics, dict):
        raise KernelRuntimeError("neuron-profile summary-json has no metrics dict under its first "
                                 "key", api="neuron-profile view")
    return {str(k): _number(v) for k, v in metrics.items()}


def _number(v: Any) -> Any:
    if isinstance(v, str):
        try:
            f = float(v)
        except ValueError:
            return v
        return int(f) if f.is_integer() and "." not in v and "e" not in v.lower() else f
    return v


@dataclass
class LatencyStats:
    """One measurement round (the kept one) of the paper's latency protocol."""

    mean_ms: float
    min_ms: float
    max_ms: float
    rel_diff: float                     # (max - min) / min
    rounds: int = 1                     # rounds run in total
    stable: bool = True                 # rel_diff within the threshold
    samples_ms: list[float] = field(default_factory=list)

    @classmethod
    def from_samples(cls, seconds: list[float]) -> "LatencyStats":
        ms = [s * 1e3 for s in seconds]
        lo, hi = min(ms), max(ms)
        return cls(mean_ms=statistics.fmean(ms), min_ms=lo, max_ms=hi,
                   rel_diff=(hi - lo) / lo if lo > 0 else float("inf"), samples_ms=ms)


def measure_latency(run_once: Callable[[], float], *, warmup: int = 2, iters: int = 10,
                    spread: float = 0.01, max_rounds: int = 10, pause_s: float = 1.0,
                    sleep: Callable[[float], None] = time.sleep,
                    warm_once: Callable[[], Any] | None = None) -> LatencyStats:
    """The paper's protocol. ``run_once`` runs the kernel once and returns its device time in s;
    ``warm_once`` (default ``run_once``) runs it once untimed."""
    warm_once = warm_once or run_once
    if iters < 1 or max_rounds < 1:
        raise ValueError("iters and max_rounds must be at least 1")
    best: LatencyStats | None = None
    rounds = 0
    for rounds in range(1, max_rounds + 1):
        for _ in range(warmup):
            warm_once()
        stats = LatencyStats.from_samples([run_once() for _ in range(iters)])
        if best is None or stats.rel_diff < best.rel_diff:
            best = stats
        if stats.rel_diff <= spread:
            break
        if rounds < max_rounds:
            sleep(pause_s)
    assert best is not None
    best.rounds = rounds
    best.stable = best.rel_diff <= spread
    return best


# ---------------------------------------------------------------------------------------------
# the backend (host side, inside the sandbox worker)
# ---------------------------------------------------------------------------------------------
class NeuronBackend:
    """Compile and run kernels on a NeuronCore through the driver subprocess."""

    def __init__(self, hw: str, workdir: Path, options: NeuronOptions | None = None,
                 visible_cores: str | None = None) -> None:
        self.hw = hw
        self.options = options or NeuronOptions()
        self.tool = find_toolchain(self.options)
        self.dir = Path(workdir) / "neuron"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.visible_cores = visible_cores
        self.kernel_path: Path | None = None
        self.kernel_name = "kernel"
        self._proc: subprocess.Popen | None = None
        self._stderr_path = self.dir / "driver_stderr.txt"
        self._runs = 0
        self._bench = 0

    @classmethod
    def for_job(cls, job: Any, workdir: Path) -> "NeuronBackend":
        return cls(hw=job.hw, workdir=workdir, options=job.options.neuron,
                   visible_cores=job.visible_cores)

    # -- environment --------------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["NEURON_CC_FLAGS"] = "--auto-cast=none"
        if self.visible_cores is not None:
            env["NEURON_RT_VISIBLE_CORES"] = str(self.visible_cores)
            env.pop("NEURON_RT_NUM_CORES", None)
        else:
            env.setdefault("NEURON_RT_NUM_CORES", "1")
        paths = [PACKAGE_ROOT, *self.options.pythonpath]
        if env.get("PYTHONPATH"):
            paths.append(env["PYTHONPATH"])
        env["PYTHONPATH"] = os.pathsep.join(paths)
        return env

    # -- driver protocol ----------------------------------------------------------------------
    def _start(self) -> None:
        err = open(self._stderr_path, "ab")
        self._proc = subprocess.Popen(
            [self.tool.python, "-m", "accelopt_nb.evaluation.backends.neuron", "driver"], cwd=self.dir,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=self.env(), text=True)
        err.close()

    def _request(self, req: dict[str, Any]) -> dict[str, Any]:
        if self._proc is None:
            self._start()
        assert self._proc is not None and self._proc.stdin and self._proc.stdout
        try:
            self._proc.stdin.write(json.dumps(req) + "\n")
            self._proc.stdin.flush()
            line = self._proc.stdout.readline()
        except (BrokenPipeError, OSError):
            line = ""
        if not line:
            rc = self._proc.poll()
            raise KernelRuntimeError(f"the neuron driver process died (exit status {rc}): "
                                     f"{_tail(self._stderr_path)}", api="nki.baremetal")
        return json.loads(line)

    def load(self, kernel_path: Path, kernel_name: str) -> None:
        self.kernel_path, self.kernel_name = Path(kernel_path), kernel_name
        reply = self._request({"cmd": "load", "kernel": str(kernel_path), "name": kernel_name})
        if reply.get("ok"):
            return
        err = reply.get("error", {})
        if reply.get("phase") == "toolchain":
            raise BackendUnavailableError(f"{self.tool.python} cannot import neuronxcc.nki: "
                                          f"{err.get('message')}")
        raise KernelLoadError(f"{err.get('type')}: {err.get('message')}", line=err.get("line"))

    def run(self, nki_inputs: list[np.ndarray]) -> "RunOutput":
        from accelopt_nb.evaluation.backends.base import RunOutput

        n = self._runs = self._runs + 1
        in_path, out_path = self.dir / f"in_{n}.npz", self.dir / f"out_{n}.npz"
        neff, ntff = self.dir / f"run_{n}.neff", self.dir / f"run_{n}.ntff"
        np.savez(in_path, *nki_inputs)
        reply = self._request({"cmd": "run", "inputs": str(in_path), "outputs": str(out_path),
                               "neff": str(neff), "ntff": str(ntff),
                               "compile_opts": self.options.compile_opts})
        if not reply.get("ok"):
            err = reply.get("error", {})
            msg = f"{err.get('type')}: {err.get('message')}"
            if reply.get("phase") == "compile":
                raise KernelError(msg, api="nki.baremetal", line=err.get("line"), rule=COMPILE_RULE)
            raise KernelRuntimeError(msg, api="nki.baremetal", line=err.get("line"))
        with np.load(out_path) as data:
            outputs = tuple(np.array(data[f"arr_{i}"]) for i in range(int(reply["n_outputs"])))
        return RunOutput(outputs=outputs, trace=None, seconds=float(reply["seconds"]),
                         artifacts={"neff": str(neff), "ntff": str(ntff)})

    def dtype_trace(self, nki_inputs: list[np.ndarray]) -> Any:
        """The dtypes a kernel uses come from a trace-only simulator run (hardware gives none)."""
        from accelopt_nb import sim
        assert self.kernel_path is not None
        kern = sim.load_kernel(str(self.kernel_path), name=self.kernel_name)
        return sim.simulate(kern, *nki_inputs, options=sim.SimOptions(trace_only=True, hw=self.hw)).trace

    def _profile_cmd(self, *args: str) -> str:
        proc = subprocess.run([self.tool.neuron_profile, *args], cwd=self.dir, env=self.env(),
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise KernelRuntimeError(f"'neuron-profile {' '.join(args[:1])}' failed with status "
                                     f"{proc.returncode}: {(proc.stderr or proc.stdout)[-500:]}",
                                     api="neuron-profile")
        return proc.stdout

    def view(self, neff: str, ntff: str) -> dict[str, Any]:
        return parse_summary_json(self._profile_cmd("view", "-n", neff, "-s", ntff,
                                                    "--output-format", "summary-json"))

    def capture(self, neff: str) -> str:
        """Execute the compiled NEFF once under neuron-profile; returns the NTFF path."""
        self._bench += 1
        ntff = str(self.dir / f"bench_{self._bench}.ntff")
        self._profile_cmd("capture", "-n", neff, "-s", ntff)
        return ntff

    def timed_run(self, neff: str) -> float:
        """Execute the NEFF once and read its device time (seconds) back from the profile."""
        total = self.view(neff, self.capture(neff)).get("total_time")
        if not isinstance(total, (int, float)):
            raise KernelRuntimeError("neuron-profile summary-json has no numeric total_time",
                                     api="neuron-profile view")
        return float(total)

    def profile(self, run: "RunOutput", nki_inputs: list[np.ndarray]) -> dict[str, Any]:
        neff, ntff = run.artifacts["neff"], run.artifacts["ntff"]
        fields = self.view(neff, ntff)
        opts = self.options
        spread = opts.spread if opts.spread is not None else LATENCY_SPREAD.get(self.hw, 0.01)
        stats = measure_latency(lambda: self.timed_run(neff), warmup=opts.warmup, iters=opts.iters,
                                spread=spread, max_rounds=opts.max_rounds,
                                pause_s=opts.round_pause_s, warm_once=lambda: self.capture(neff))
        return {**fields, "latency_ms": stats.mean_ms, "latency_stats": asdict(stats),
                "compiler_version": self.tool.compiler_version}

    def trace_profile(self, nki_inputs: list[np.ndarray]) -> dict[str, Any]:
        """Hardware has no trace-only mode: run once and measure."""
        return self.profile(self.run(nki_inputs), nki_inputs)

    def close(self) -> None:
        if self._proc is not None:
            try:
                if self._proc.stdin:
                    self._proc.stdin.close()
                self._proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
                self._proc.wait()
            self._proc = None


def _tail(path: Path, n: int = 1500) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


# ---------------------------------------------------------------------------------------------
# the driver (runs under the Neuron Python: python -m accelopt_nb.evaluation.backends.neuron driver)
# ---------------------------------------------------------------------------------------------
def _kernel_line(exc: BaseException, kernel_file: str | None) -> int | None:
    if not kernel_file:
        return None
    target = os.path.realpath(kernel_file)
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__)
             if os.path.realpath(f.filename) == target]
    return lines[-1] if lines else None


def _driver_error(exc: BaseException, kernel_file: str | None) -> dict[str, Any]:
    return {"type": type(exc).__name__, "message": str(exc)[:2000],
            "line": _kernel_line(exc, kernel_file)}


def _driver_main() -> int:
    import importlib.util

    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # kernel and compiler prints go to stderr, never into the protocol
    state: dict[str, Any] = {}
    for line in sys.stdin:
        req = json.loads(line)
        try:
            if req["cmd"] == "load":
                try:
                    from neuronxcc import nki  # noqa: F401 - the toolchain check
                except Exception as exc:  # noqa: BLE001
                    reply = {"ok": False, "phase": "toolchain", "error": _driver_error(exc, None)}
                else:
                    state["nki"] = nki
                    spec = importlib.util.spec_from_file_location("accelopt_kernel_under_test",
                                                                  req["kernel"])
                    module = importlib.util.module_from_spec(spec)
                    try:
                        spec.loader.exec_module(module)
                        state["kernel"] = getattr(module, req["name"])
                        state["file"] = req["kernel"]
                        reply = {"ok": True}
                    except Exception as exc:  # noqa: BLE001
                        reply = {"ok": False, "phase": "load",
                                 "error": _driver_error(exc, req["kernel"])}
            elif req["cmd"] == "run":
                reply = _driver_run(state, req)
            else:
                reply = {"ok": False, "phase": "protocol",
                         "error": {"type": "ValueError", "message": f"unknown command {req['cmd']}"}}
        except Exception as exc:  # noqa: BLE001 - the driver must always answer
            reply = {"ok": False, "phase": "run", "error": _driver_error(exc, state.get("file"))}
        proto.write(json.dumps(reply) + "\n")
    return 0


def _driver_run(state: dict[str, Any], req: dict[str, Any]) -> dict[str, Any]:
    nki, kernel = state["nki"], state["kernel"]
    with np.load(req["inputs"]) as data:
        inputs = [np.array(data[f"arr_{i}"]) for i in range(len(data.files))]
    neff = Path(req["neff"])
    t0 = time.perf_counter()
    try:
        fn = nki.baremetal(kernel, save_neff_name=str(neff), save_trace_name=req["ntff"],
                           additional_compile_opt=req["compile_opts"])
        result = fn(*inputs)
    except Exception as exc:  # noqa: BLE001
        phase = "run" if neff.exists() else "compile"
        return {"ok": False, "phase": phase, "error": _driver_error(exc, state.get("file"))}
    seconds = time.perf_counter() - t0
    outs = result if isinstance(result, (tuple, list)) else (result,)
    np.savez(req["outputs"], *[np.asarray(o) for o in outs])
    return {"ok": True, "seconds": seconds, "n_outputs": len(outs)}


if __name__ == "__main__":
    if sys.argv[1:2] == ["driver"]:
        sys.exit(_driver_main())
    print("usage: python -m accelopt_nb.evaluation.backends.neuron driver", file=sys.stderr)
    sys.exit(2)
