"""What the core interpreter tells an observer: the one seam between the core and the replay wing.

The core never imports the replay wing. A launch that replays loops has an :class:`Observer` on its runtime
(``Runtime.observer``, set by whoever starts the launch); the core calls it at the points below and otherwise
runs exactly as without one. Two more slots gate the hot paths, so that an access costs one attribute test
when nobody listens: ``Runtime.watching`` is the observer while it wants every index, region and mask
comparison (a loop is probing), ``Runtime.recording`` while it also wants every primitive call (probing
with values, see :mod:`accelopt_nb.sim.core.prims`). ``Runtime.calls`` is the observer that wants the launch's
program: every guarded NKI call, tile operator, assignment, loop event and the returned outputs (the program hash,
:mod:`accelopt_nb.sim.core.program`); a new NKI API is seen there through its guard (``api/guard.py``), so one
declaration serves replay and the hash.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator


class Observer:
    """The protocol; every method does nothing here."""

    # ---- the launch (Runtime.observer) ---------------------------------------------------------------
    def loop(self, rt: Any, frame: Any, values: range, caller: Any) -> Iterator[int]:
        """Iterate ``values`` for the kernel frame ``caller`` (``Runtime.loop`` hands every loop over)."""
        for i in values:
            yield rt.iterate(frame, i)

    def storage(self, array: Any) -> None:
        """``array`` is the storage of a live tensor (or of other memory the runtime keeps, by identity)."""

    # ---- while watching (Runtime.watching) --------------------------------------------------------------
    def key(self, key: tuple, shape: tuple[int, ...]) -> None:
        """A tensor of ``shape`` was indexed with the normalized ``key``."""

    def view_key(self, key: list[Any], lengths: list[int]) -> None:
        """A view was indexed again with ``key``, relative to its sliced axes of ``lengths``."""

    def region(self, region: Any, shape: tuple[int, ...], clamped: list[tuple[int, int, int]] | None) -> None:
        """A trace region was made for a view of ``shape``; ``clamped``: its index arrays' (lo, hi, size) before
        they were clamped to the tensor, when one was."""

    def mask(self, op: Any, lhs: Any, rhs: Any, result: Any) -> None:
        """A mask comparison ``op(lhs, rhs)`` gave ``result``."""

    # ---- while recording (Runtime.recording) ------------------------------------------------------------
    def record(self, fn: Callable[..., Any], args: tuple, params: dict[str, Any], result: Any) -> None:
        """The primitive ``fn(*args, **params)`` ran (or was done by its caller) and returned ``result``."""

    def fail(self, reason: str) -> None:
        """Memory changed in a way no recorded call repeats."""

    # ---- the program (Runtime.calls) --------------------------------------------------------------------
    def call(self, api: str, args: tuple, kwargs: dict[str, Any]) -> None:
        """The NKI API ``api`` is called with these bound arguments (its guard, ``api/guard.py``)."""

    def op(self, name: str, *operands: Any) -> None:
        """A tile operator or method (``a + b``, ``-a``, ``a.astype(t)``) with its operands."""

    def store(self, kind: str, dest: Any, value: Any) -> None:
        """``dest[...] = value`` (``kind`` "assign") or ``dest[...] += value`` ("accumulate")."""

    def begin(self, kind: str, start: int, step: int, count: int, no_reorder: bool) -> None:
        """A kernel loop begins (before its first iteration)."""

    def iteration(self, i: int) -> None:
        """An iteration of the innermost running loop begins (one loop replay extrapolates is not run)."""

    def end(self) -> None:
        """The innermost running loop ends."""

    def outputs(self, outputs: Any) -> None:
        """The kernel returned ``outputs``."""

    def setting(self, name: str, value: Any) -> None:
        """A launch setting that changes the trace but no call's arguments changed: ``no_reorder`` (the depth of
        ``nl.no_reorder`` blocks, on entering and leaving one), ``force_auto_alloc`` (a kernel's directive)."""

    def agree(self, probes: int, known: Any) -> tuple[str | None, Any]:
        """Loop replay would extrapolate the innermost loop from its last ``probes`` iterations: why the program's
        records of them do not extrapolate (None: they do), and their step (``known``: an earlier instance's)."""
        return None, None

    def replayed(self, count: int, step: Any) -> None:
        """Loop replay extrapolated ``count`` iterations of the innermost loop, each by ``step`` (:meth:`agree`)."""

    def unrecordable(self, reason: str) -> None:
        """Something the program cannot be written down by happened (a value read from memory moves an index, a
        launch inside the launch)."""
