"""The simulator backend: run kernels on the accelopt_nb CPU simulator, profile with the perf model."""
from __future__ import annotations

import importlib
import time
from pathlib import Path
from typing import Any

import numpy as np

from accelopt_nb.evaluation.backends.base import RunOutput


class SimulatorBackend:
    """Loads a kernel file into the simulator and runs it on NumPy inputs."""

    def __init__(self, hw: str = "trn1") -> None:
        self.hw = hw
        self.kernel: Any = None
        from accelopt_nb import sim  # imported here: the runner pays for it, the caller does not
        self._sim = sim

    @classmethod
    def for_job(cls, job: Any, workdir: Path) -> "SimulatorBackend":
        return cls(hw=job.hw)

    def load(self, kernel_path: Path, kernel_name: str) -> None:
        self.kernel = self._sim.load_kernel(str(kernel_path), name=kernel_name)

    def run(self, nki_inputs: list[np.ndarray]) -> RunOutput:
        t0 = time.perf_counter()
        res = self._sim.simulate(self.kernel, *nki_inputs)
        seconds = time.perf_counter() - t0
        return RunOutput(outputs=tuple(np.asarray(o) for o in res.outputs), trace=res.trace,
                         log=list(getattr(res, "log", []) or []), seconds=seconds)

    def dtype_trace(self, nki_inputs: list[np.ndarray]) -> Any:
        return None  # every run already records its trace

    def profile(self, run: RunOutput, nki_inputs: list[np.ndarray]) -> dict[str, Any] | None:
        """The performance model's estimate for the run's instruction stream (None when the
        performance model is not installed)."""
        return self._estimate(run.trace)

    def trace_profile(self, nki_inputs: list[np.ndarray]) -> dict[str, Any] | None:
        """Profile without arithmetic: a trace-only run (shapes and instruction stream only)."""
        res = self._sim.simulate(self.kernel, *nki_inputs,
                                 options=self._sim.SimOptions(trace_only=True))
        return self._estimate(res.trace)

    def _estimate(self, trace: Any) -> dict[str, Any] | None:
        try:
            perf = importlib.import_module("accelopt_nb.perf")
        except ImportError:
            return None
        estimate = getattr(perf, "estimate", None)
        if estimate is None or trace is None:
            return None
        report = estimate(trace, hw=self.hw)
        return report.to_dict() if hasattr(report, "to_dict") else dict(report)

    def close(self) -> None:
        self.kernel = None
