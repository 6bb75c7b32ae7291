"""What a backend is: the interface the evaluation's runner drives, and what one run returns.

A backend only loads and runs kernels (in the sandboxed runner process, never in the judge);
every verdict is decided by the judge (:mod:`accelopt_nb.evaluation.engine`), the same way for
every backend. Backends are looked up by name in :mod:`accelopt_nb.evaluation.backends`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np


@dataclass
class RunOutput:
    """One kernel launch: its outputs (kernel layout), instruction stream and device_print log."""

    outputs: tuple[np.ndarray, ...]
    trace: Any = None
    log: list[str] = field(default_factory=list)
    seconds: float = 0.0
    artifacts: dict[str, str] = field(default_factory=dict)  # e.g. the NEFF/NTFF of a hardware run


class Backend(Protocol):
    """What the runner needs from a backend. ``profile`` and ``trace_profile`` return a raw
    profile dict; :func:`accelopt_nb.evaluation.profile.profile_record` turns it into the contract."""

    def load(self, kernel_path: Path, kernel_name: str) -> None: ...
    def run(self, nki_inputs: list[np.ndarray]) -> RunOutput: ...
    def dtype_trace(self, nki_inputs: list[np.ndarray]) -> Any: ...
    def profile(self, run: RunOutput, nki_inputs: list[np.ndarray]) -> dict[str, Any] | None: ...
    def trace_profile(self, nki_inputs: list[np.ndarray]) -> dict[str, Any] | None: ...
    def close(self) -> None: ...
