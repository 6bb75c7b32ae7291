"""The running launch of this thread: NKI APIs find their runtime here (``current``); outside a launch they raise a
clear error instead of silently doing NumPy math."""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator

from accelopt_nb.errors import KernelError

_state = threading.local()


def current() -> Any:
    """The runtime of the launch running in this thread (a KernelError outside one)."""
    rt = getattr(_state, "runtime", None)
    if rt is None:
        raise KernelError("NKI APIs can only run inside a kernel launched by the accelopt_nb simulator "
                          "(call the @nki.jit kernel, or accelopt_nb.sim.simulate)",
                          rule="NKI API called outside a kernel")
    return rt


def active() -> Any:
    """The runtime of the launch running in this thread, or None."""
    return getattr(_state, "runtime", None)


@contextlib.contextmanager
def running(rt: Any) -> Iterator[Any]:
    prev = getattr(_state, "runtime", None)
    _state.runtime = rt
    try:
        yield rt
    finally:
        _state.runtime = prev
