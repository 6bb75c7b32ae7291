"""Loop replay: run a few iterations, extrapolate the rest, exactly or not at all.

A simulation spends ~100 µs of Python per instruction, and compiler-style kernels issue tens
of thousands of instructions from a handful of loop bodies. An ``nl.*_range`` loop
(or a plain ``range`` loop in kernel code, the runtime's sequential loop) runs its first :data:`PROBES`
iterations for real (*probes*). If their records (instructions, tensors registered, loop uids, epochs,
counters) are structurally identical and every integer in them moves by the same delta from one probe
to the next, the runtime stops running the Python body and builds the
records of the following iterations by extrapolation, leaving the trace and the runtime's counters as
running every iteration would.

Extrapolation is only used where it provably gives the same records:

* the loop passes the static check of :mod:`accelopt_nb.sim.loopcheck` (no Python state carried across
  iterations or out of the loop, stores only into NKI tensors, calls only to NKI / NumPy / pure code);
* the loop variable is a tainted int while probing (:mod:`accelopt_nb.sim.taint`): affine arithmetic
  keeps the taint; anything else done with it outside the simulator (comparisons, ``bool``, ``hash``,
  ``//``, ``%``, ``int()``, formatting, NumPy conversion) marks its loops as not replayable, and so does
  ``//``, ``%``, a product of two dependent operands or an array conversion on an index expression
  computed from it (``IndexExpr.deps``, :func:`combine_deps`);
* every mask comparison made while probing (``nl.arange(...) + 128 * i < n``) is extrapolated too:
  replay stops at the first iteration where its outcome would change (a ragged tail), which then runs
  for real, and probing starts again after it;
* a region clamped to its tensor (a masked ragged tile) notes on which side of 0 and of the axis size
  each of its bounds lay, as mask comparisons: replay stops where one would cross; replay also stops
  before the first iteration whose extrapolated unclamped regions, or int and slice indices (used by an
  instruction or not), would leave their tensor or view (where a real run clamps or raises);
* the runtime's other state (log, warnings, whether a ``loop_reduce`` result awaits its destination, shared HBM
  cursor, ...) does not change while probing.

When the first probes differ (a ``loop_reduce`` restarting at the loop's first iteration) one more
iteration runs and the last :data:`PROBES` are compared. A later instance of a loop
probes two iterations when they show exactly the step an earlier instance's :data:`PROBES` established
(:class:`Evidence`, kept per loop site; with values also the same recorded calls, whose numbers move by the
same step). A nested loop replays inside each executed iteration of its parent,
and the parent replays as a whole (its records include the child's extrapolated ones; the child hands up
the mask outcomes and index bounds of its first probe and of the far corner of its range, however many
probes it ran). Mask outcomes and bounds are linear in each loop variable, so checking a range's ends checks
all of it.
``Trace.replayed`` counts extrapolated instructions. With values, the probes also record their effects on
memory (:mod:`accelopt_nb.sim.replay.values`) and the extrapolated iterations re-run them; a loop whose effects
cannot be recorded runs every iteration. Where the replayed iterations cannot affect each other through memory, their
calls run once each over all of them (:mod:`accelopt_nb.sim.replay.lanes`). ``SimOptions(loop_replay=False)`` runs every iteration. Where checking would cost more than it saves, a loop runs every iteration without probing
further: fewer than :data:`MIN_GAIN` records left to extrapolate after its first iteration, or nothing
extrapolated in its last :data:`MISSES` instances (``Runtime.replay_misses``); with values, fewer
iterations left after its probes than :data:`MIN_SKIPPED_VALUES` (:data:`MIN_SKIPPED_KNOWN` for a later
instance, :data:`MIN_SKIPPED_PROBING` inside a loop that is probing with values).

The loop reaches here through the core's observer (``ReplayState.loop``, :mod:`accelopt_nb.sim.replay.state`),
whose fields hold everything replay keeps for a launch (``st`` below; ``rt`` is the core's runtime).
"""
from __future__ import annotations

import dataclasses
import itertools
import logging
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np

from accelopt_nb.sim.core.indexing import IndexExpr, Mask, _Grid, _MGrid
from accelopt_nb.sim.core.runtime import LoopFrame, Runtime
from accelopt_nb.sim.core.tensor import Tensor
from accelopt_nb.sim.core.views import View
from accelopt_nb.sim.replay import lanes, loopcheck
from accelopt_nb.sim.replay import records
from accelopt_nb.sim.replay import values as value_replay
from accelopt_nb.sim.replay.taint import ProbeIndex
from accelopt_nb.sim.trace import Region

if TYPE_CHECKING:
    from accelopt_nb.sim.replay.state import ReplayState

PROBES = 3         # iterations compared (two steps: a constant step is seen twice)
WARMUP = 1         # iterations that may run first when the probes differ (a loop_reduce restarting at the start)
# fewest records (instructions + tensors) replay must be able to extrapolate for a loop to be probed further:
# checking and extrapolating costs about as much as running 4 instructions, plus a little per record
MIN_GAIN = 8
# with values, the same bar (its program is compiled once per launch, for every instance of the loop): with 32,
# set when each instance compiled its own, the paper's transpose_matmul replayed nothing (4.5 s; 3.5 s with 8,
# every other baseline replaying the same instructions, measured side by side in one process)
MIN_GAIN_VALUES = 8
# ... and with at least this many iterations left to extrapolate after its probes: a loop's first instance
# MIN_SKIPPED_VALUES (8-iteration loops probe, the paper's short-loop kernels; with 2, arange_mask's 6-tile ragged
# row probed and replayed 2 tiles, slower than running them), a later one whose first two probes show the calls and
# step the first established (Evidence) MIN_SKIPPED_KNOWN; MIN_SKIPPED_PROBING inside a loop that is itself probing
# with values, so that short nested loops run its probe iterations in Python and it can still replay as a whole
# (replayed calls past MAX_CALLS refuse it: the paper's bmm replays 81% of its instructions through its 16-iteration
# outer loop, 75% without this bar, 13% slower). Measured against 8 everywhere and no evidence with values (the
# paper's baselines, two alternations): rmsnorm_matmul, swiglu, bmm_softmax -15 to -20%, transpose_matmul, gqa_full,
# matmul -5 to -16%, the others within noise
MIN_SKIPPED_VALUES = 4
MIN_SKIPPED_KNOWN = 1
MIN_SKIPPED_PROBING = 8
_OTHER_STATE = "runtime state other than the trace changed in the loop body"   # see _mark
MISSES = 2         # instances of one loop in a row that extrapolated nothing, after which it is no longer probed
_log = logging.getLogger("accelopt_nb.sim.replay")   # the logger the docs name: why a loop was not replayed


# ---- probes -----------------------------------------------------------------------------------------
class Probe:
    """One loop instance's evidence while its probe iterations run."""

    def __init__(self) -> None:
        self.reason: str | None = None        # why this loop cannot be replayed at all
        self.mismatch: str | None = None      # why the latest probe iterations do not extrapolate
        self.events: list[list[tuple]] = []   # per probe iteration: (op, lhs, rhs, result) of mask comparisons
        self.keys: list[list[int]] = []       # per probe iteration: (lo, hi, size) of every int and slice index
        self.logs: list[value_replay.Log] = []     # per probe iteration, with values: its effects on memory
        self.evidence: Evidence | None = None  # what the last extrapolation from PROBES probes established

    def fail(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason


@dataclasses.dataclass
class Evidence:
    """What a loop's last extrapolation from :data:`PROBES` probes established about one iteration's step: the
    records' signature and integer step, the counters' step, each mask comparison's (op, lhs step, rhs step)
    and the index bounds' step; with values, its recorded calls' signatures and their numbers' step (``values``).
    A later instance of the loop whose first two probes show exactly this step is extrapolated from them
    (:func:`run`): its third probe could only confirm the step again."""

    sig: tuple
    delta: np.ndarray
    counters: np.ndarray
    comparisons: list[tuple]
    keys: np.ndarray
    effects: tuple | None = None   # with values: (the recorded calls' signatures, their numbers' step): see values.agreed
    program: Any = None            # with a program recorder (Runtime.calls): its records' structure and step


def note_mask(st: ReplayState, op: Any, lhs: np.ndarray, rhs: Any, result: np.ndarray) -> None:
    """A mask comparison made while probing (``IndexExpr`` comparison hook)."""
    rhs = np.asarray(rhs)
    for p in st.probes:
        if p.events:
            p.events[-1].append((op, lhs, rhs, result))


def note_key(st: ReplayState, key: tuple, shape: tuple[int, ...]) -> None:
    """A tensor indexed while probing (``Tensor.__getitem__`` hook): its ints and slices as (lo, hi, size)."""
    out = []
    for k, size in zip(key, shape):
        if type(k) is int:
            out += (k, k + 1, size)
        elif type(k) is slice:
            out += (k.start, k.stop, size)
    if out:
        for p in st.probes:
            p.keys[-1] += out


def note_view_key(st: ReplayState, key: list[Any], lengths: list[int]) -> None:
    """A view re-indexed while probing (``View.__getitem__`` hook): bounds relative to the view's axes."""
    out: list[int] = []
    for k, length in zip(key, lengths):
        if isinstance(k, slice):
            if (k.start is None or isinstance(k.start, int)) and (k.stop is None or isinstance(k.stop, int)):
                out += (0 if k.start is None else int(k.start), length if k.stop is None else int(k.stop), length)
        elif isinstance(k, int):
            out += (int(k), int(k) + 1, length)
    if out:
        for p in st.probes:
            p.keys[-1] += out


def note_region(st: ReplayState, region: Region, shape: tuple[int, ...],
                clamped: list[tuple[int, int, int]] | None) -> None:
    """A region recorded while probing (``View.region`` hook): its view's shape and, when it was clamped to
    its tensor, every index-array axis's (lo, hi, size) before clamping.

    Clamping is linear in the loop variables while each bound stays on the same side of 0 and of the axis
    size, so those sides are noted as mask comparisons: replay stops where one would change.
    """
    st.region_shapes[id(region)] = shape
    if clamped:
        bounds = np.array([(lo, hi) for lo, hi, _ in clamped], dtype=np.int64)
        sizes = np.array([size for _, _, size in clamped], dtype=np.int64)[:, None]
        note_mask(st, np.less, bounds, 0, bounds < 0)
        note_mask(st, np.greater, bounds, sizes, bounds > sizes)


# ---- the loop ---------------------------------------------------------------------------------------
def run(rt: Runtime, frame: LoopFrame, values: range, caller: Any) -> Iterator[int]:
    """Iterate ``values`` for the kernel frame ``caller``, replaying what can be replayed."""
    st: ReplayState = rt.observer
    site: loopcheck.LoopSite | str = "loop not called from kernel code"
    key = None
    if caller is not None and caller.f_code.co_filename in rt.kernel_files:
        site = loopcheck.loop_site(caller.f_code, caller.f_lineno)
        key = (caller.f_code, caller.f_lineno)
        if not isinstance(site, str) and st.replay_misses.get(key, 0) >= MISSES:
            site = f"nothing was extrapolated in the last {MISSES} instances of this loop"
    if isinstance(site, str):
        _log.debug("loop at %s runs every iteration: %s", caller and caller.f_lineno, site)
    n = len(values)
    pos = 0
    gained: int | None = None   # iterations extrapolated, once a probe ran
    known = None if key is None else st.replay_evidence.get(key)
    # with values, probing records every call of the probes: worth it only with enough iterations left to skip
    if not st.value_replay:
        skip = 0
    elif st.probes:   # an enclosing loop is probing (with values)
        skip = MIN_SKIPPED_PROBING
    else:
        skip = MIN_SKIPPED_KNOWN if known is not None else MIN_SKIPPED_VALUES
    fewest = (PROBES - 1 if known is not None else PROBES) + skip
    while pos < n:
        if isinstance(site, str) or n - pos <= fewest:
            for i in values[pos:]:
                yield rt.iterate(frame, i)
            break
        gained = gained or 0
        probe = Probe()
        marks = [_mark(rt)]
        heads: list[list[tuple[int, int]]] = []   # per probe iteration: where it began in the enclosing probes' lists
        done = None
        while done is None and probe.reason is None and pos < n and len(marks) <= PROBES + WARMUP:
            heads.append([(len(p.events[-1]), len(p.keys[-1])) for p in st.probes])
            probe.events.append([])
            probe.keys.append([])
            idx = rt.iterate(frame, values[pos], ProbeIndex)
            idx.deps = (probe,)
            if st.value_replay:
                if probe.logs:   # only the last log is rebuilt from: the others keep nothing alive
                    probe.logs[-1].release()
                probe.logs.append(value_replay.Log())
            st.push(probe)
            try:
                yield idx
            finally:
                st.pop(probe)
            pos += 1
            marks.append(_mark(rt))
            if len(marks) >= 3 and marks[-1][4] != marks[-2][4]:
                # past the first iteration (which may differ: a loop_reduce restarting), every probe compared
                # must leave the other state alone: this one did not, so no later window of probes can agree
                # (found now instead of after recording more probes: bmm_softmax's reductions, 2 of 4 saved)
                probe.fail(_OTHER_STATE)
            if len(marks) == 2:
                records = marks[1][0] - marks[0][0] + marks[1][1] - marks[0][1]
                if (n - pos - (PROBES - 1)) * records < (MIN_GAIN_VALUES if st.value_replay else MIN_GAIN):
                    probe.fail(f"at most {(n - pos - (PROBES - 1)) * records} records to extrapolate")
                else:
                    reason = loopcheck.runtime_reason(site, caller.f_locals, caller.f_globals, rt.kernel_files,
                                                      _sim_types())
                    if reason:
                        probe.fail(reason)
            if len(marks) == 3 and known is not None and probe.reason is None:
                # an earlier instance of this loop established the step (with values, its calls too): two probes
                # that show it suffice (an enclosing probing loop sees the same either way: see _extrapolate's trim)
                done = _extrapolate(rt, frame, values, pos, probe, marks, probe.events, probe.keys, heads[1],
                                    known) or None
            if done is None and len(marks) > PROBES and probe.reason is None:
                done = _extrapolate(rt, frame, values, pos, probe, marks[-PROBES - 1:], probe.events[-PROBES:],
                                    probe.keys[-PROBES:], heads[-PROBES + 1])
                if done and probe.evidence is not None and key is not None:
                    st.replay_evidence[key] = probe.evidence
        if not st.probes:
            st.region_shapes.clear()
            st.replayed_blocks.clear()
            st.flattened.clear()
        # the probes' logs keep what their calls named alive (ids must not be reused while probing): let go
        probe.logs.clear()
        marks.clear()
        if done is None:
            site = probe.reason or probe.mismatch or "replay check failed"
            _log.debug("loop at %s:%s runs every iteration: %s", caller.f_code.co_filename, caller.f_lineno, site)
        else:
            pos += done
            gained += done
    if gained is not None:   # probing that gained nothing, again and again, is not tried any more in this run
        st.replay_misses[key] = 0 if gained else st.replay_misses.get(key, 0) + 1


def _sim_types() -> tuple[type, ...]:
    return (Tensor, View, IndexExpr, Mask, _Grid, _MGrid)


# the runtime's fields that move while a body runs, or are the replay wing's own (all others must stay put)
_MARK_SKIP = frozenset({"trace", "loops", "loop_key", "epoch", "_next_uid", "_next_tensor", "deferred",
                        "pending_reduction", "hidden", "tensors_unsorted", "onchip", "observer", "watching",
                        "recording"})


def _mark(rt: Runtime) -> tuple:
    """The runtime at an iteration boundary: positions, counters, and the identity of everything else.

    A ``loop_reduce`` result bound to a name leaves its pending reduction behind, a new one each iteration: only
    its presence counts (the tile it names is the iteration's own, which no later code can assign: liveness)."""
    other = tuple((k, id(v), len(v) if isinstance(v, (list, dict)) else None)
                  for k, v in vars(rt).items() if k not in _MARK_SKIP) + (rt.pending_reduction is None,)
    return (len(rt.trace.instructions), rt._next_tensor, rt._next_uid, rt.epoch, other)


# ---- the check and the extrapolation -------------------------------------------------------------------
def _extrapolate(rt: Runtime, frame: LoopFrame, values: range, pos: int, probe: Probe, marks: list[tuple],
                 events: list[list[tuple]], keys: list[list[int]], trim: list[tuple[int, int]],
                 known: Evidence | None = None) -> int | None:
    """Append the records of as many iterations from ``pos`` as provably repeat the last probes' step.

    ``marks`` are the runtime at the boundaries of the last probe iterations (:data:`PROBES` of them, or two
    with ``known``, whose step every one of them must show), ``events`` their mask comparisons; ``trim``,
    per enclosing probing loop, where the second of them began in its mask comparisons and index bounds.
    Returns how many iterations were appended, or None (``probe.mismatch`` or ``probe.reason`` says why).
    """
    st: ReplayState = rt.observer
    probe.mismatch = None
    probe.evidence = None
    n_probes = len(marks) - 1
    if any(m[4] != marks[0][4] for m in marks):
        probe.mismatch = _OTHER_STATE
        return None
    counters = np.array([m[:4] for m in marks], dtype=np.int64)
    steps = np.diff(counters, axis=0)
    if (steps != steps[0]).any() or (known is not None and not np.array_equal(steps[0], known.counters)):
        probe.mismatch = "iterations differ in their instruction, tensor, loop or epoch counts"
        return None
    if known is not None and any(len(e) != len(known.comparisons) for e in events):
        # cheaper than flattening the records: a ragged instance clamps more regions (each a comparison)
        probe.mismatch = "iterations differ in their mask comparisons"
        return None
    program = None
    if st.value_replay:   # checked first: cheaper than flattening the records, and it fails more often
        program = value_replay.agreed(probe, n_probes, None if known is None else known.effects)
        if program is None:
            return None
    flats = [records.flatten(rt, marks[j], marks[j + 1]) for j in range(n_probes)]
    sig, last, flat = flats[-1]
    try:
        same = all(f[0] == sig for f in flats[:-1]) and (known is None or known.sig == sig)
    except Exception:  # noqa: BLE001 - a constant whose == is not a truth value (an array): not provably equal
        same = False
    if not same:
        probe.mismatch = "iterations differ in structure"
        return None
    deltas = np.diff(np.stack([f[1] for f in flats]), axis=0)
    if (deltas != deltas[0]).any() or (known is not None and not np.array_equal(deltas[0], known.delta)):
        probe.mismatch = "a number in the records does not change by a constant step"
        return None
    delta = deltas[0]
    calls = rt.calls
    program_step = None
    if calls is not None:   # the program hash sees the extrapolated iterations too (core.program): its records must agree
        why, program_step = calls.agree(n_probes, None if known is None else known.program)
        if why is not None:
            probe.mismatch = why
            return None
    count, comparisons = _mask_limit(probe, events, len(values) - pos, known)
    if count is None:
        return None
    count, bounds, key_step = _key_limit(probe, keys, count, known)
    if count is None:
        return None
    count = _bounds_limit(flat, last, delta, count)
    if count is None:
        probe.fail("a region of the records cannot be checked against its tensor")
        return None
    if count > 0 and program is not None:   # memory as running them would leave it: their effects, re-run
        compiled = value_replay.Program(*program)
        done = lanes.replay(rt, frame, values, pos, compiled, count)
        count = value_replay.replay(rt, frame, values, pos, compiled, count) if done is None else done
    if count <= 0:
        return 0
    _emit(rt, frame, values, pos, last, delta, count, steps[0], flat)
    if calls is not None:
        calls.replayed(count, program_step)
    if known is None and n_probes == PROBES:
        probe.evidence = Evidence(sig, delta, steps[0], [(op, dl, dr) for op, _, dl, _, dr, _ in comparisons], key_step,
                                  None if program is None else (list(program[0].sigs), program[2]), program_step)
    # an enclosing probing loop must also see this loop's mask outcomes and index bounds over its whole range:
    # its first probe's and the far corner's (each is linear in both loops' variables, so the corners decide
    # the whole rectangle). The later probes' are dropped, so it sees the same however many probes ran.
    for p, (n_events, n_keys) in zip(st.probes, trim):
        del p.events[-1][n_events:]
        del p.keys[-1][n_keys:]
    for p in st.probes:
        p.events[-1].extend((op, lhs + count * dl, rhs + count * dr, res) for op, lhs, dl, rhs, dr, res in comparisons)
        p.keys[-1] += bounds(count)
    return count


def _mask_limit(probe: Probe, ev: list[list[tuple]], count: int,
                known: Evidence | None = None) -> tuple[int | None, list[tuple]]:
    """How many of ``count`` further iterations see every mask comparison come out as in the probes,
    and each comparison as (op, lhs, lhs step, rhs, rhs step, outcome) at the last probe (with ``known``,
    whose comparison count the caller checked first, each comparison's steps must be the ones it holds)."""
    comparisons: list[tuple] = []
    if any(len(e) != len(ev[0]) for e in ev):
        probe.mismatch = "iterations differ in their mask comparisons"
        return None, comparisons
    for k in range(len(ev[0])):
        ops = {e[k][0] for e in ev}
        if len(ops) != 1:
            probe.mismatch = "iterations differ in their mask comparisons"
            return None, comparisons
        op = ev[0][k][0]
        lhs = [np.asarray(e[k][1]) for e in ev]
        rhs = [np.asarray(e[k][2]) for e in ev]
        res = [e[k][3] for e in ev]
        try:
            dl = [lhs[j + 1] - lhs[j] for j in range(len(ev) - 1)]
            dr = [rhs[j + 1] - rhs[j] for j in range(len(ev) - 1)]
        except ValueError:
            probe.mismatch = "iterations differ in their mask comparisons"
            return None, comparisons
        if known is not None:
            k_op, k_dl, k_dr = known.comparisons[k]
            dl, dr = dl + [k_dl], dr + [k_dr]
            if k_op is not op:
                probe.mismatch = "a mask comparison changes between probe iterations"
                return None, comparisons
        if not (_all_equal(res) and _all_equal(dl) and _all_equal(dr)):
            probe.mismatch = "a mask comparison changes between probe iterations"
            return None, comparisons
        comparisons.append((op, lhs[-1], dl[0], rhs[-1], dr[0], res[0]))
        count = min(count, _comparison_limit(op, lhs[-1], dl[0], rhs[-1], dr[0], res[0], count))
    return count, comparisons


def _all_equal(arrays: list[np.ndarray]) -> bool:
    """Whether the arrays have one shape and equal elements (bool and int arrays compared by their bytes:
    ``np.array_equal`` costs several times more on the small arrays of mask comparisons)."""
    first = arrays[0]
    exact = first.dtype.kind in "bui"
    for a in arrays[1:]:
        if a.shape != first.shape:
            return False
        if exact and a.dtype == first.dtype:
            if a.tobytes() != first.tobytes():
                return False
        elif not np.array_equal(a, first):
            return False
    return True


def _key_limit(probe: Probe, keys: list[list[int]], count: int,
               known: Evidence | None = None) -> tuple[int | None, Any, Any]:
    """How many of ``count`` further iterations keep every int and slice index in bounds, the bounds (as a
    flat list) at a given step past the last probe, and their step (with ``known``, the one it holds)."""
    arrs = [np.array(k, dtype=np.int64).reshape(-1, 3) for k in keys]
    if any(a.shape != arrs[0].shape or (a[:, 2] != arrs[0][:, 2]).any() for a in arrs):
        probe.mismatch = "iterations differ in the tensors they index"
        return None, None, None
    steps = np.diff(np.stack(arrs), axis=0)
    if (steps != steps[0]).any() or (known is not None and not np.array_equal(steps[0], known.keys)):
        probe.mismatch = "an index does not change by a constant step"
        return None, None, None
    last, step = arrs[-1], steps[0]
    lo, hi, size = last[:, 0], last[:, 1], last[:, 2]
    d_lo, d_hi = step[:, 0], step[:, 1]
    for value, d in ((lo, d_lo), (size - hi, -d_hi), (hi - lo, d_hi - d_lo)):   # each must stay >= 0
        down = d < 0
        if down.any():
            count = min(count, int((value[down] // -d[down]).min()))
    return count, lambda t: (last + t * step).ravel().tolist(), step


def _comparison_limit(op: Any, lhs: np.ndarray, dl: np.ndarray, rhs: np.ndarray, dr: np.ndarray,
                      res: np.ndarray, count: int) -> int:
    """Largest t <= count with ``op(lhs + s*dl, rhs + s*dr) == res`` for every s in 1..t.

    Each element's outcome along s is a half-line (ordering ops) or a point (equality), so for the
    ordering ops "same at t" implies "same at every s <= t" and a bisection finds the limit.
    """
    def same(t: int) -> bool:
        return _all_equal([np.asarray(op(lhs + t * dl, rhs + t * dr)), res])

    if op in (np.equal, np.not_equal):
        slope = np.broadcast_to(dl - dr, np.broadcast_shapes(lhs.shape, rhs.shape, dl.shape, dr.shape))
        gap = np.broadcast_to(lhs - rhs, slope.shape)
        moving = slope != 0
        if not moving.any():
            return count
        s, g = slope[moving], gap[moving]
        hits = (g % s == 0) & (-g // s >= 1)   # the one s where the element would equal
        return count if not hits.any() else min(count, int((-g[hits] // s[hits]).min()) - 1)
    if same(count):
        return count
    lo, hi = 0, count   # same(lo), not same(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if same(mid):
            lo = mid
        else:
            hi = mid
    return lo


def _bounds_limit(flat: records.Flat, last: np.ndarray, delta: np.ndarray, count: int) -> int | None:
    """Largest t <= count whose extrapolated regions all stay inside their view shapes; None if unknown."""
    if flat.unchecked:
        return None
    free = flat.slots("free")
    if free.size and delta[free].any():
        return None  # a moving region of unknown shape
    lo, hi, size = flat.slots("lo"), flat.slots("hi"), flat.slots("size")
    for slots, low_side in ((lo, True), (hi, False)):
        # a region bound must stay within [0, size]; lo and hi are both bounds of the same box
        base, step = last[slots], delta[slots]
        down, up = step < 0, step > 0
        if down.any():
            count = min(count, int((base[down] // -step[down]).min()))
        if up.any():
            count = min(count, int(((size[up] - base[up]) // step[up]).min()))
    return count


def _emit(rt: Runtime, frame: LoopFrame, values: range, pos: int, last: np.ndarray, delta: np.ndarray,
          count: int, step: np.ndarray, flat: records.Flat) -> None:
    """Append ``count`` extrapolated iterations and advance the runtime's counters past them."""
    rows = last[None, :] + np.arange(1, count + 1, dtype=np.int64)[:, None] * delta[None, :]
    # each record of the plan built for every row at once (its integers of every row converted in one C call),
    # then interleaved row by row (C-level zip): instructions in stream order, tensors in id (insertion) order
    ins_cols, tens_cols = [], []
    moving = delta != 0   # the other integers are the same in every row: each converted once (Builder)
    for rec_sig, first, tensor in flat.plan:
        b = records.builder(rec_sig)
        build, moves, fixed = b.variant(moving[first:first + b.width])
        cols = rows[:, first + moves].tolist() if moves.size else [()] * count
        (tens_cols if tensor else ins_cols).append(build(cols, b.consts, last[first + fixed].tolist()))
    trace = rt.trace
    ins, tens = trace.instructions, trace.tensors
    first_ins, first_tensor = len(ins), rt._next_tensor
    if ins_cols:
        ins.extend(itertools.chain.from_iterable(zip(*ins_cols)))
    if tens_cols:
        tens.update((rec.id, rec) for rec in itertools.chain.from_iterable(zip(*tens_cols)))
    trace.replayed += len(ins) - first_ins
    if rt.observer.probes:  # an enclosing loop is probing: it reads these records back as one block
        records.keep_block(rt, flat, rows, count, ins[first_ins] if len(ins) > first_ins else None,
                    tens.get(first_tensor), int(step[1]))
    _, n_tensor, n_uid, n_epoch = (int(x) * count for x in step)
    rt._next_tensor += n_tensor
    rt._next_uid += n_uid
    rt.epoch += n_epoch
    frame.iteration = values[pos + count - 1]
    if frame.kind == "affine":
        frame.iter_epoch = rt.epoch - int(step[3]) + 1
