"""The replay wing's state for one launch, and the observer through which the core talks to it (``core.hooks``).

Loop replay keeps per launch: the probes of the loops whose probe iterations are running, what trace replay learned
about each loop site and the records it flattened, and for value replay the compiled programs and the memory it
names by identity. All of it lives here, on the observer the launch's runtime carries (``Runtime.observer``); the
core sees only the observer's methods.
"""
from __future__ import annotations

import weakref
from typing import Any, Callable, Iterator

import numpy as np

from accelopt_nb.sim.core.hooks import Observer
from accelopt_nb.sim.core.runtime import LoopFrame, Runtime
from accelopt_nb.sim.replay import loops, values


class ReplayState(Observer):
    """What loop replay keeps for one launch, and the core's observer."""

    def __init__(self, rt: Runtime) -> None:
        # weak: the runtime holds its observer, and a strong reference back would make the launch a cycle that
        # only the cyclic collector frees, so every tile of a finished launch stayed alive into the next one
        self._rt = weakref.ref(rt)
        self.value_replay = not rt.options.trace_only   # with values, probes record every primitive call too
        self.probes: list[loops.Probe] = []   # the probes of the loops whose probe iterations are running
        self.programs: dict[tuple, Any] = {}  # value replay's compiled programs by their calls' signatures
        self.region_shapes: dict[int, tuple[int, ...]] = {}   # id(Region) -> its view's shape, while probing
        self.replayed_blocks: dict[int, Any] = {}   # id(first record) -> a block replay built while a parent probes
        self.flattened: dict[int, tuple] = {}       # id(record) -> its replay signature, while loops probe
        self.replay_misses: dict[tuple, int] = {}   # (code, line) of a loop -> its instances in a row replay gained nothing
        self.replay_evidence: dict[tuple, Any] = {}  # (code, line) of a loop -> its last step found (loops.Evidence)
        # id(array) -> the storage of a live tensor (value replay's roots; weak: a dead tensor's memory is freed)
        self.roots: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
        self.identities: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()   # values._identity
        self.generations: dict[int, int] = {}

    # ---- the probes, and the core's gates that follow them -------------------------------------------------
    def push(self, probe: loops.Probe) -> None:
        self.probes.append(probe)
        self._gates()

    def pop(self, probe: loops.Probe) -> None:
        self.probes.remove(probe)
        self._gates()

    def _gates(self) -> None:
        probing = bool(self.probes)
        rt = self._rt()
        if rt is None:
            return
        rt.watching = self if probing else None
        rt.recording = self if probing and self.value_replay else None

    # ---- the observer ------------------------------------------------------------------------------------
    def loop(self, rt: Runtime, frame: LoopFrame, values_: range, caller: Any) -> Iterator[int]:
        return loops.run(rt, frame, values_, caller)

    def storage(self, array: np.ndarray) -> None:
        if self.value_replay:
            base = values.root(array)
            self.roots[id(base)] = base

    def key(self, key: tuple, shape: tuple[int, ...]) -> None:
        loops.note_key(self, key, shape)

    def view_key(self, key: list[Any], lengths: list[int]) -> None:
        loops.note_view_key(self, key, lengths)

    def region(self, region: Any, shape: tuple[int, ...], clamped: list[tuple[int, int, int]] | None) -> None:
        loops.note_region(self, region, shape, clamped)

    def mask(self, op: Any, lhs: Any, rhs: Any, result: Any) -> None:
        loops.note_mask(self, op, lhs, rhs, result)

    def record(self, fn: Callable[..., Any], args: tuple, params: dict[str, Any], result: Any) -> None:
        values.record(self, fn, args, params, result)

    def fail(self, reason: str) -> None:
        for p in self.probes:
            p.fail(f"values: {reason}")


def attach(rt: Runtime) -> ReplayState:
    """Replay the loops of the launch ``rt`` (it observes the core from now on)."""
    rt.observer = state = ReplayState(rt)
    return state
