"""Whose fault is a Python exception raised while a kernel runs: the kernel's, or the simulator's.

Deliberate errors are KernelErrors and carry their rule. Anything else (an IndexError, a
ValueError, ...) is classified by where it was raised: when simulator code ran below the innermost
kernel frame of the traceback, the kernel called an API and the API's own code failed, which is a
simulator bug (:class:`SimulatorBugError`, with the kernel line that triggered it); otherwise the
kernel's own code, or a library it called directly, raised it.
"""
from __future__ import annotations

import traceback
from pathlib import Path

from accelopt_nb.errors import KernelError, SimulatorBugError, UnsupportedAPIError

# Python errors a kernel or the simulator's code can raise while tracing (not MemoryError, which the
# evaluation reports as out_of_memory, nor exceptions injected from outside such as timeouts).
PYTHON_ERRORS = (TypeError, ValueError, LookupError, AttributeError, ArithmeticError, NameError, AssertionError,
                 RuntimeError)

SIM_DIR = str(Path(__file__).parents[1])   # the simulator's own code (accelopt_nb/sim and its wings), as imported
_SIM_DIR = Path(__file__).resolve().parents[1]


def python_error(exc: Exception, files: set[str], location: tuple[str | None, int | None]) -> KernelError:
    """The KernelError to raise for ``exc``; ``location`` is the innermost kernel frame (file, line)."""
    file, line = location
    sim_frame = simulator_frame_below(exc, files)
    if sim_frame is not None:
        where = f"{Path(sim_frame.filename).resolve().relative_to(_SIM_DIR).as_posix()}:{sim_frame.lineno} in " \
                f"{sim_frame.name}"
        internal = f"{type(exc).__name__}: {exc} (raised in accelopt_nb/sim/{where})"
        return SimulatorBugError(f"the simulator failed on this kernel line with {internal}", file=file,
                                 line=line, internal=internal)
    if isinstance(exc, AttributeError) and "module" in str(exc) and ("nl" in str(exc) or "isa" in str(exc)):
        return UnsupportedAPIError(str(exc), file=file, line=line)
    return KernelError(f"{type(exc).__name__}: {exc}", file=file, line=line,
                       rule="kernel raised a Python error while tracing")


def simulator_frame_below(exc: BaseException, files: set[str]) -> traceback.FrameSummary | None:
    """The innermost simulator frame below the innermost kernel frame, if simulator code raised."""
    frames = traceback.extract_tb(exc.__traceback__)
    last_kernel = max((i for i, f in enumerate(frames) if f.filename in files), default=-1)
    ours = [f for f in frames[last_kernel + 1:] if Path(f.filename).resolve().is_relative_to(_SIM_DIR)]
    return ours[-1] if ours else None
