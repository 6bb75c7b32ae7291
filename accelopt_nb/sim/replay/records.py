"""Records of loop replay: an iteration's instructions and tensors as signatures, integers and builders.

A record (instruction or tensor) becomes a *signature*, its structure and every non-integer value as
nested tuples, and the list of its integers. Iterations whose records have equal signatures differ only
in their integers. Each record signature compiles, once, into a function that builds the record from
integers; an extrapolated iteration is those functions applied to the extrapolated integers. A nested
loop's extrapolated records are kept as a :class:`Block` that an enclosing probing loop reads back whole.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from accelopt_nb.sim.core.runtime import Runtime
from accelopt_nb.sim.replay.taint import ProbeIndex, Tainted
from accelopt_nb.sim.trace import Instruction, Region, TensorInfo

# Signature nodes: _INT (an integer), a str/bool/None (itself), ("float", hex, x), ("const", type, x) (another
# constant), ("npint", type) (a NumPy integer), ("tuple"|"list", items), ("dict", keys, values), ("region", ...)
# (a Region), ("loops", kinds) (a loops tuple), ("record", class, fields) (a record), ("auto",) (a default name).
# Named apart from value replay's nodes (replay.values), which flatten other things.
_FIELDS = {cls: tuple(f.name for f in dataclasses.fields(cls)) for cls in (Instruction, Region, TensorInfo)}
_REGION_FAST = _FIELDS[Region] == ("tensor", "buffer", "lo", "hi", "elements", "itemsize", "block")
_INSTRUCTION_FAST = _FIELDS[Instruction] == ("index", "engine", "op", "api", "reads", "writes", "partitions", "free_elems",
                                             "in_dtypes", "out_dtype", "accumulate", "attrs", "loops", "file", "line")
_CTOR = {Instruction: "I", Region: "R", TensorInfo: "T"}
_INT = ("int",)
_PLAIN = (str, bool, type(None))


class Block:
    """Records a nested loop extrapolated while its parent probes: what the parent's flatten reads back."""

    __slots__ = ("first_ins", "first_tensor", "count", "ins_sigs", "tens_sigs", "ins_ints", "tens_ints", "ins_plan",
                 "tens_plan", "width_ins", "width_tens", "lo", "hi", "size", "free", "unchecked")


class Flat:
    """Signatures and integers of a run of records, and where each region's integers sit.

    Integers accumulate in a Python list, flushed into NumPy chunks when a nested loop's block of
    extrapolated records is read back whole. Region slots: ``lo``/``hi``/``size`` per checked dimension,
    ``free`` for slots of regions whose view shape is unknown (they must not move).
    """

    def __init__(self, rt: Runtime) -> None:
        self.ints: list[int] = []
        self.chunks: list[np.ndarray] = []
        self.base = 0
        st = rt.observer   # the replay wing's state (replay.state)
        self.shapes = st.region_shapes
        self.blocks = st.replayed_blocks
        self.seen = st.flattened
        self.lo: list[int] = []
        self.hi: list[int] = []
        self.size: list[int] = []
        self.free: list[int] = []
        self.block_slots: dict[str, list[np.ndarray]] = {"lo": [], "hi": [], "size": [], "free": []}
        self.unchecked = False
        self.plan: list[tuple[tuple, int, bool]] = []    # per record: (signature, first slot, is a tensor)
        self.sigs: list[tuple] = []

    def pos(self) -> int:
        return self.base + len(self.ints)

    def flush(self) -> None:
        if self.ints:
            self.chunks.append(np.array(self.ints, dtype=np.int64))
            self.base += len(self.ints)
            self.ints = []

    def array(self) -> np.ndarray:
        self.flush()
        return np.concatenate(self.chunks) if self.chunks else np.zeros(0, dtype=np.int64)

    def slots(self, name: str) -> np.ndarray:
        """All ``lo``/``hi``/``size``/``free`` entries: the records' own, then the blocks'."""
        return np.concatenate([np.array(getattr(self, name), dtype=np.int64)] + self.block_slots[name])

    def add(self, rec: Any, tensor: bool) -> None:
        first = self.pos()
        hit = self.seen.get(id(rec))
        if hit is not None and hit[0] is rec:   # flattened already by a nested loop's probe
            _, sig, ints, lo, hi, size, free, unchecked = hit
            self.ints += ints
            if lo:
                self.lo += [first + r for r in lo]
                self.hi += [first + r for r in hi]
                self.size += size
            if free:
                self.free += [first + r for r in free]
            self.unchecked = self.unchecked or unchecked
        else:
            n_lo, n_free, unchecked = len(self.lo), len(self.free), self.unchecked
            sig = self.record(rec)
            if len(self.seen) < 1_000_000:   # a parent probe flattens this record again: keep the result
                self.seen[id(rec)] = (rec, sig, self.ints[first - self.base:], [x - first for x in self.lo[n_lo:]],
                                      [x - first for x in self.hi[n_lo:]], self.size[n_lo:],
                                      [x - first for x in self.free[n_free:]], self.unchecked and not unchecked)
        self.plan.append((sig, first, tensor))
        self.sigs.append(sig)

    def add_block(self, blk: Block, tensor: bool) -> None:
        """All records of a nested loop's extrapolated block (its instructions or its tensors) at once."""
        self.flush()
        first = self.base
        rows = np.arange(blk.count, dtype=np.int64)
        if tensor:
            width, ints, plan, sigs = blk.width_tens, blk.tens_ints, blk.tens_plan, blk.tens_sigs
        else:
            width, ints, plan, sigs = blk.width_ins, blk.ins_ints, blk.ins_plan, blk.ins_sigs
            offs = first + rows * width
            for name in ("lo", "hi", "free"):
                rel = getattr(blk, name)
                if rel.size:
                    self.block_slots[name].append((offs[:, None] + rel[None, :]).ravel())
            if blk.size.size:
                self.block_slots["size"].append(np.tile(blk.size, blk.count))
            self.unchecked = self.unchecked or blk.unchecked
        self.chunks.append(ints)
        self.base += ints.size
        self.plan.extend((sig, first + r * width + rel, tensor) for r in range(blk.count) for sig, rel in plan)
        self.sigs.extend(sigs * blk.count)

    def sig(self, x: Any) -> Any:
        t = type(x)
        if t is int:
            self.ints.append(x)
            return _INT
        if t in _PLAIN:
            return x
        if t is float:   # by its bits: 0.0 == -0.0 and nan != nan would mislead the comparison
            return ("float", x.hex(), x)
        if t is tuple:
            return ("tuple", self.items(x))
        if t is Region:
            return self.region(x)
        if t is dict:
            return ("dict", tuple(x), self.items(x.values()))
        if t is list:
            return ("list", self.items(x))
        if t in _FIELDS:
            return self.record(x)
        if t is Tainted or t is ProbeIndex:
            self.ints.append(int(x))
            return _INT
        if isinstance(x, np.integer):
            self.ints.append(int(x))
            return ("npint", t)
        return ("const", t, x)

    def items(self, xs: Any) -> tuple:
        out = []
        ints = self.ints
        for e in xs:
            t = type(e)
            if t is int:
                ints.append(e)
                out.append(_INT)
            elif t in _PLAIN:
                out.append(e)
            else:
                out.append(self.sig(e))
        return tuple(out)

    def region(self, x: Region) -> Any:
        fast = _REGION_FAST and type(x.tensor) is int and type(x.elements) is int and type(x.itemsize) is int \
            and type(x.block) is int
        if fast:
            for e in x.lo + x.hi:   # a loop, not all(<generator>): this runs for every region flattened
                if type(e) is not int:
                    fast = False
                    break
        if not fast:
            self.unchecked = True   # a layout the fast path does not read
            return self.record(x)
        ints = self.ints
        first = self.base + len(ints)
        ndim = len(x.lo)
        shape = self.shapes.get(id(x))
        if shape is not None and len(shape) == ndim == len(x.hi):
            self.lo.extend(range(first + 1, first + 1 + ndim))
            self.hi.extend(range(first + 1 + ndim, first + 1 + 2 * ndim))
            self.size.extend(shape)
        else:
            self.free.extend(range(first + 1, first + 1 + ndim + len(x.hi)))
        ints.append(x.tensor)
        ints += x.lo
        ints += x.hi
        ints.append(x.elements)
        ints.append(x.itemsize)
        ints.append(x.block)
        return ("region", x.buffer, len(x.lo), len(x.hi))

    def loops(self, x: Any) -> Any:
        if type(x) is not tuple:
            return self.sig(x)
        for e in x:
            if not (type(e) is tuple and len(e) == 3 and type(e[0]) is int and type(e[2]) is int and type(e[1]) is str):
                return self.sig(x)
        ints = self.ints
        kinds = []
        for uid, kind, it in x:
            ints.append(uid)
            ints.append(it)
            kinds.append(kind)
        return ("loops", tuple(kinds))

    def record(self, x: Any) -> tuple:
        if type(x) is Instruction and _INSTRUCTION_FAST:
            return self.instruction(x)
        return self.fields(x)

    def instruction(self, x: Instruction) -> tuple:
        """:meth:`fields` of an instruction without the walk over field names (the same signature and integers):
        an instruction has the most fields and is the record flattened most often."""
        sig, items = self.sig, self.items
        parts = (sig(x.index), sig(x.engine), sig(x.op), sig(x.api), self.regions(x.reads), self.regions(x.writes),
                 sig(x.partitions), sig(x.free_elems), sig(x.in_dtypes), sig(x.out_dtype), sig(x.accumulate))
        attrs = x.attrs
        attrs = ("dict", tuple(attrs), items(attrs.values())) if type(attrs) is dict else sig(attrs)
        return ("record", Instruction, parts + (attrs, self.loops(x.loops), sig(x.file), sig(x.line)))

    def regions(self, x: Any) -> Any:
        """``sig`` of a tuple of regions."""
        if type(x) is not tuple:
            return self.sig(x)
        return ("tuple", tuple(self.region(r) if type(r) is Region else self.sig(r) for r in x))

    def fields(self, x: Any) -> tuple:
        t = type(x)
        parts = []
        for name in _FIELDS[t]:
            val = getattr(x, name)
            if name == "loops":
                parts.append(self.loops(val))
            elif t is TensorInfo and name == "name" and val == f"{x.kind}{x.id}":
                parts.append(("auto",))   # the runtime's default name: kind + id
            else:
                parts.append(self.sig(val))
        return ("record", t, tuple(parts))


def flatten(rt: Runtime, a: tuple, b: tuple) -> tuple[tuple, np.ndarray, Flat]:
    """The records between two marks: (signature, integers, the flattening with its plan and regions)."""
    flat = Flat(rt)
    blocks = flat.blocks
    ins = rt.trace.instructions
    k, end = a[0], b[0]
    while k < end:
        rec = ins[k]
        blk = blocks.get(id(rec))
        if blk is not None and blk.first_ins is rec and k + blk.count * len(blk.ins_plan) <= end:
            flat.add_block(blk, False)
            k += blk.count * len(blk.ins_plan)
        else:
            flat.add(rec, False)
            k += 1
    tensors = rt.trace.tensors
    tid, end = a[1], b[1]
    while tid < end:
        info = tensors.get(tid)
        blk = blocks.get(id(info)) if info is not None else None
        if blk is not None and blk.first_tensor is info and tid + blk.count * len(blk.tens_plan) <= end:
            flat.add_block(blk, True)
            tid += blk.count * len(blk.tens_plan)
            continue
        if info is not None:
            flat.add(info, True)
        tid += 1
    return tuple(flat.sigs), flat.array(), flat


class _Codegen:
    """Python source of the expression that rebuilds one record from its integers ``a0, a1, ...``."""

    def __init__(self) -> None:
        self.k = 0
        self.consts: list[Any] = []

    def slot(self, wrap: type | None = None) -> str:
        self.k += 1
        text = f"a{self.k - 1}"
        return text if wrap is None else f"{self.const(wrap)}({text})"

    def const(self, x: Any) -> str:
        if type(x) in (str, bool) or x is None:
            return repr(x)
        self.consts.append(x)
        return f"C[{len(self.consts) - 1}]"

    def expr(self, sig: Any) -> str:
        if type(sig) is not tuple:
            return self.const(sig)
        kind = sig[0]
        if kind == "int":
            return self.slot()
        if kind == "const":
            return self.const(sig[2])
        if kind == "float":
            return self.const(sig[2])
        if kind == "npint":
            return self.slot(sig[1])
        if kind == "tuple":
            return "(" + "".join(self.expr(e) + "," for e in sig[1]) + ")"
        if kind == "list":
            return "[" + ",".join(self.expr(e) for e in sig[1]) + "]"
        if kind == "dict":
            return "{" + ",".join(f"{self.const(key)}:{self.expr(e)}" for key, e in zip(sig[1], sig[2])) + "}"
        if kind == "loops":
            return "(" + "".join(f"({self.slot()},{kind!r},{self.slot()})," for kind in sig[1]) + ")"
        if kind == "region":
            _, buffer, nlo, nhi = sig
            tensor = self.slot()
            lo = "(" + "".join(self.slot() + "," for _ in range(nlo)) + ")"
            hi = "(" + "".join(self.slot() + "," for _ in range(nhi)) + ")"
            return f"R({tensor},{self.const(buffer)},{lo},{hi},{self.slot()},{self.slot()},{self.slot()})"
        if kind == "record":
            cls, parts = sig[1], sig[2]
            names = _FIELDS[cls]
            args, id_slot = [], ""
            for name, part in zip(names, parts):   # positional: the dataclasses' field order
                if part == ("auto",):
                    args.append(f"{self.const(parts[names.index('kind')])}+str({id_slot})")
                    continue
                text = self.expr(part)
                if cls is TensorInfo and name == "id":
                    id_slot = text
                args.append(text)
            return f"{_CTOR[cls]}({','.join(args)})"
        raise AssertionError(f"unknown signature node {kind!r}")


class Builder:
    """The compiled builders of one record signature: its integers (``width``), the constants its code names
    (``consts``), and per set of moving integers a function ``build(rows, C, K)`` that returns the record
    of every row, ``rows`` holding each row's moving integers and ``K`` the fixed ones (the same in every
    row: converted once, and the same int objects in every record)."""

    __slots__ = ("body", "consts", "width", "variants")

    def __init__(self, sig: tuple) -> None:
        gen = _Codegen()
        self.body = gen.expr(sig)
        self.consts = gen.consts
        self.width = gen.k
        self.variants: dict[bytes, tuple[Any, np.ndarray, np.ndarray]] = {}

    def variant(self, moving: np.ndarray) -> tuple[Any, np.ndarray, np.ndarray]:
        """(build, indices of the moving integers, indices of the fixed ones) for the mask ``moving``."""
        key = moving.tobytes()
        hit = self.variants.get(key)
        if hit is not None:
            return hit
        moves, fixed = np.flatnonzero(moving), np.flatnonzero(~moving)
        # one comprehension over the rows, each row's moving integers unpacked into locals
        names = "".join(f"a{k}," for k in moves.tolist()) or "_"
        source = "def build(rows, C, K):\n"
        if fixed.size:
            source += "    " + "".join(f"a{k}," for k in fixed.tolist()) + " = K\n"
        source += f"    return [{self.body} for {names} in rows]\n"
        scope = dict(_SCOPE)
        exec(compile(source, "<loop replay>", "exec"), scope)  # noqa: S102 - generated from the signature
        hit = self.variants[key] = (scope["build"], moves, fixed)
        return hit


_builders: dict[tuple, Builder] = {}
_SCOPE = {"I": Instruction, "R": Region, "T": TensorInfo}


def builder(sig: tuple) -> Builder:
    """The builders of one record signature (cached: records repeat)."""
    try:
        hit = _builders.get(sig)
        hashable = True
    except TypeError:  # an unhashable constant
        hit, hashable = None, False
    if hit is not None:
        return hit
    out = Builder(sig)
    if hashable:
        if len(_builders) >= 4096:
            _builders.clear()
        _builders[sig] = out
    return out


def keep_block(rt: Runtime, flat: Flat, rows: np.ndarray, count: int, first_ins: Any, first_tensor: Any,
                tensor_ids: int) -> None:
    """Register the records just built as one block, keyed by their first instruction and first tensor."""
    blk = Block()
    ins_plan = [(sig, first) for sig, first, tensor in flat.plan if not tensor]
    tens_plan = [(sig, first) for sig, first, tensor in flat.plan if tensor]
    width = rows.shape[1]
    split = tens_plan[0][1] if tens_plan else width
    if tens_plan and len(tens_plan) != tensor_ids:
        tens_plan, first_tensor = [], None  # ids without a record: read back record by record
    blk.first_ins, blk.first_tensor, blk.count = first_ins, first_tensor, count
    blk.ins_plan = ins_plan
    blk.tens_plan = [(sig, first - split) for sig, first in tens_plan]
    blk.ins_sigs = tuple(sig for sig, _ in ins_plan)
    blk.tens_sigs = tuple(sig for sig, _ in tens_plan)
    blk.width_ins, blk.width_tens = split, width - split
    blk.ins_ints = np.ascontiguousarray(rows[:, :split]).ravel()
    blk.tens_ints = np.ascontiguousarray(rows[:, split:]).ravel()
    blk.lo, blk.hi, blk.size, blk.free = (flat.slots(n) for n in ("lo", "hi", "size", "free"))
    blk.unchecked = flat.unchecked
    if first_ins is not None and ins_plan:
        rt.observer.replayed_blocks[id(first_ins)] = blk
    if first_tensor is not None and tens_plan:
        rt.observer.replayed_blocks[id(first_tensor)] = blk
