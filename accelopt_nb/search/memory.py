"""Optimization memory: summarized slow→fast rewrites the planner learns from.

Each iteration contributes at most TopK new items, chosen from that iteration's measured
parent→child pairs by :func:`select_rewrites`:

* **positive** rewrites: a child faster than its parent by more than ``positive_threshold``
  (1.04 in the paper), at most TopK//2 of them, best first;
* **negative** rewrites: a child at least ``negative_threshold`` (1.15, i.e. 15 %) slower than
  its parent, worst first, filling the remaining slots. They are stored *reversed* (slow = the
  child, fast = the parent) so every item reads as "this rewrite makes code faster".

The memory itself is a first-in-first-out queue of capacity ExpN, as the paper describes (the
authors' code instead kept a random, unseeded subset). There is no randomness here at all.
Items carry their problem so one memory can be shared across problems; a person can inspect,
edit, add and delete items, and save or load the memory as JSON.
"""
from __future__ import annotations

import json
import uuid
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable, Iterator

from accelopt_nb.errors import ConfigError, StoreError
from accelopt_nb.search.beam import source_hash

MEMORY_FORMAT = "accelopt_nb.memory/1"


@dataclass(frozen=True)
class RewriteRecord:
    """One evaluated child next to its parent: the raw material of memory items."""

    parent_id: str
    parent_source: str
    parent_latency_ms: float
    child_id: str
    child_source: str
    child_latency_ms: float | None  # None when the child failed or is incorrect
    plan_id: str
    order: int = 0  # generation order, for deterministic ties

    @property
    def speedup(self) -> float | None:
        """parent latency / child latency (> 1 means the child is faster)."""
        if self.child_latency_ms is None or not self.child_latency_ms > 0 or not self.parent_latency_ms > 0:
            return None
        return self.parent_latency_ms / self.child_latency_ms


@dataclass(frozen=True)
class RewritePair:
    """A slow→fast pair chosen for the summarizer. ``speedup`` = slow / fast latency (>= 1)."""

    kind: str  # "positive" (parent → child) or "negative" (child → parent, reversed)
    slow_id: str
    slow_source: str
    fast_id: str
    fast_source: str
    speedup: float
    measured_speedup: float  # parent / child as measured; < 1 for negatives
    plan_id: str


def select_rewrites(records: Iterable[RewriteRecord], top_k: int, positive_threshold: float = 1.04,
                    negative_threshold: float = 1.15) -> list[RewritePair]:
    """Choose at most ``top_k`` pairs (at most ``top_k // 2`` positive) from one iteration.

    Per (parent, plan) the sample with the largest speedup is the candidate if it beat the
    parent, otherwise the one with the smallest (the clearest regression). A child whose
    source equals its parent's teaches nothing and is skipped.
    """
    if top_k < 0:
        raise ConfigError(f"top_k must be >= 0, got {top_k}")
    if positive_threshold < 1.0 or negative_threshold < 1.0:
        raise ConfigError("rewrite thresholds are factors >= 1 "
                          f"(got positive {positive_threshold}, negative {negative_threshold})")
    groups: dict[tuple[str, str], list[tuple[float, RewriteRecord]]] = {}
    for rec in records:
        s = rec.speedup
        if s is None or source_hash(rec.child_source) == source_hash(rec.parent_source):
            continue
        groups.setdefault((rec.parent_id, rec.plan_id), []).append((s, rec))
    kept: list[tuple[float, RewriteRecord]] = []
    for samples in groups.values():
        best = max(samples, key=lambda sr: (sr[0], -sr[1].order))
        worst = min(samples, key=lambda sr: (sr[0], sr[1].order))
        if best[0] > 1.0:
            kept.append(best)
        elif best[0] < 1.0:
            kept.append(worst)
    positives = sorted((sr for sr in kept if sr[0] > positive_threshold),
                       key=lambda sr: (-sr[0], sr[1].order, sr[1].child_id))[: top_k // 2]
    negatives = sorted((sr for sr in kept if sr[0] < 1.0 / negative_threshold),
                       key=lambda sr: (sr[0], sr[1].order, sr[1].child_id))[: top_k - len(positives)]
    pairs: list[RewritePair] = []
    seen: set[tuple[str, str]] = set()
    for s, r in positives:
        key = (source_hash(r.parent_source), source_hash(r.child_source))
        if key not in seen:
            seen.add(key)
            pairs.append(RewritePair("positive", r.parent_id, r.parent_source, r.child_id, r.child_source,
                                     speedup=s, measured_speedup=s, plan_id=r.plan_id))
    for s, r in negatives:
        key = (source_hash(r.child_source), source_hash(r.parent_source))
        if key not in seen:
            seen.add(key)
            pairs.append(RewritePair("negative", r.child_id, r.child_source, r.parent_id, r.parent_source,
                                     speedup=1.0 / s, measured_speedup=s, plan_id=r.plan_id))
    return pairs


@dataclass
class MemoryItem:
    """One remembered rewrite: a short title, a general one-step description with snippets."""

    title: str
    summary: str
    problem: str = ""
    kind: str = "positive"  # positive | negative | manual
    speedup: float | None = None  # slow / fast latency
    slow_source: str = ""
    fast_source: str = ""
    slow_kernel_id: str | None = None
    fast_kernel_id: str | None = None
    iteration: int | None = None
    run_id: str | None = None
    origin: str = "summarizer"  # summarizer | manual
    item_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "MemoryItem":
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise StoreError(f"memory item has unknown fields {sorted(unknown)}")
        if "title" not in d or "summary" not in d:
            raise StoreError("a memory item needs at least 'title' and 'summary'")
        return cls(**d)


class OptimizationMemory:
    """A FIFO queue of :class:`MemoryItem` with capacity ``capacity`` (ExpN)."""

    def __init__(self, capacity: int = 16, items: Iterable[MemoryItem] = ()) -> None:
        if capacity < 0:
            raise ConfigError(f"memory capacity must be >= 0, got {capacity}")
        self.capacity = capacity
        self._items: list[MemoryItem] = []
        self.add(items)

    # -- queue -----------------------------------------------------------------------------
    def add(self, items: Iterable[MemoryItem] | MemoryItem) -> list[MemoryItem]:
        """Append items (oldest first); returns the items evicted from the front."""
        if isinstance(items, MemoryItem):
            items = [items]
        for item in items:
            if any(i.item_id == item.item_id for i in self._items):
                raise StoreError(f"memory already holds an item with id {item.item_id!r}")
            self._items.append(item)
        overflow = max(0, len(self._items) - self.capacity)
        evicted, self._items = self._items[:overflow], self._items[overflow:]
        return evicted

    def add_manual(self, title: str, summary: str, problem: str = "") -> MemoryItem:
        """Add a human-written item (it is enqueued like any other and can be evicted)."""
        item = MemoryItem(title=title, summary=summary, problem=problem, kind="manual", origin="manual")
        self.add(item)
        return item

    def remove(self, item_id: str) -> MemoryItem:
        item = self.get(item_id)
        self._items.remove(item)
        return item

    def edit(self, item_id: str, **changes: Any) -> MemoryItem:
        """Change fields of an item in place (e.g. ``edit(id, summary=...)``); its position is kept."""
        item = self.get(item_id)
        known = {f.name for f in fields(MemoryItem)} - {"item_id"}
        bad = set(changes) - known
        if bad:
            raise ConfigError(f"cannot edit memory item fields {sorted(bad)}; editable: {sorted(known)}")
        for k, v in changes.items():
            setattr(item, k, v)
        return item

    def clear(self) -> None:
        self._items.clear()

    def get(self, item_id: str) -> MemoryItem:
        for item in self._items:
            if item.item_id == item_id:
                return item
        raise StoreError(f"no memory item with id {item_id!r} (have: {[i.item_id for i in self._items]})")

    @property
    def items(self) -> list[MemoryItem]:
        """Oldest first (the next to be evicted is ``items[0]``)."""
        return list(self._items)

    def __iter__(self) -> Iterator[MemoryItem]:
        return iter(list(self._items))

    def __len__(self) -> int:
        return len(self._items)

    def visible(self, problem: str | None = None, shared: bool = False) -> list[MemoryItem]:
        """The items a planner for ``problem`` sees: its own (and manual ones), or all when shared."""
        if shared or problem is None:
            return self.items
        return [i for i in self._items if i.problem in (problem, "")]

    # -- persistence -----------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {"format": MEMORY_FORMAT, "capacity": self.capacity, "items": [i.to_dict() for i in self._items]}

    @classmethod
    def from_json(cls, data: dict[str, Any], capacity: int | None = None) -> "OptimizationMemory":
        if data.get("format") != MEMORY_FORMAT:
            raise StoreError(f"not an accelopt_nb memory file (format {data.get('format')!r}, "
                             f"expected {MEMORY_FORMAT!r})")
        cap = capacity if capacity is not None else int(data.get("capacity", 16))
        return cls(cap, [MemoryItem.from_dict(d) for d in data.get("items", [])])

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=2))
        tmp.replace(path)  # atomic: a reader never sees half a file
        return path

    @classmethod
    def load(cls, path: str | Path, capacity: int | None = None) -> "OptimizationMemory":
        path = Path(path)
        if not path.is_file():
            raise StoreError(f"memory file not found: {path}")
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise StoreError(f"memory file {path} is not valid JSON: {exc}") from exc
        return cls.from_json(data, capacity)

    def to_dataframe(self):
        import pandas as pd

        cols = ["item_id", "problem", "kind", "speedup", "title", "iteration", "origin", "summary"]
        return pd.DataFrame([{c: getattr(i, c) for c in cols} for i in self._items], columns=cols)

    def __repr__(self) -> str:
        return f"OptimizationMemory({len(self)}/{self.capacity} items)"


def memory_item_from_pair(pair: RewritePair, title: str, summary: str, *, problem: str,
                          iteration: int | None, run_id: str | None) -> MemoryItem:
    return MemoryItem(title=title, summary=summary, problem=problem, kind=pair.kind, speedup=pair.speedup,
                      slow_source=pair.slow_source, fast_source=pair.fast_source,
                      slow_kernel_id=pair.slow_id, fast_kernel_id=pair.fast_id,
                      iteration=iteration, run_id=run_id, origin="summarizer")

