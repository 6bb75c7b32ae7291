"""Optimization memory: rewrite selection (TopK, thresholds) and the FIFO queue."""
from __future__ import annotations

import json

import pytest

from accelopt_nb.errors import ConfigError, StoreError
from accelopt_nb.search.memory import (MemoryItem, OptimizationMemory, RewriteRecord,
                                        memory_item_from_pair, select_rewrites)


def rec(parent: str, plan: str, child: str, parent_lat: float, child_lat: float | None, order: int = 0):
    return RewriteRecord(parent_id=parent, parent_source=f"src-{parent}", parent_latency_ms=parent_lat,
                         child_id=child, child_source=f"src-{child}", child_latency_ms=child_lat,
                         plan_id=plan, order=order)


def item(n: int, problem: str = "p") -> MemoryItem:
    return MemoryItem(title=f"t{n}", summary=f"s{n}", problem=problem, item_id=f"id{n}")


# ---------------------------------------------------------------- thresholds and TopK
def test_positive_threshold_is_strict_1_04():
    recs = [rec("P", "a", "c1", 10.4, 10.0),  # 1.04 exactly: not enough
            rec("P", "b", "c2", 10.5, 10.0),  # 1.05
            rec("P", "c", "c3", 10.1, 10.0)]  # 1.01
    pairs = select_rewrites(recs, top_k=8)
    assert [(p.kind, p.fast_id) for p in pairs] == [("positive", "c2")]
    assert pairs[0].slow_id == "P" and pairs[0].speedup == pytest.approx(1.05)


def test_negative_needs_at_least_15_percent_slowdown_and_is_reversed():
    recs = [rec("P", "a", "c1", 10.0, 11.4),  # 14 % slower: ignored
            rec("P", "b", "c2", 10.0, 11.6),  # 16 % slower
            rec("P", "c", "c3", 10.0, 20.0)]  # 2x slower
    pairs = select_rewrites(recs, top_k=8)
    assert [p.slow_id for p in pairs] == ["c3", "c2"]  # worst first
    assert all(p.kind == "negative" and p.fast_id == "P" for p in pairs)
    assert pairs[0].speedup == pytest.approx(2.0) and pairs[0].measured_speedup == pytest.approx(0.5)
    assert pairs[0].slow_source == "src-c3" and pairs[0].fast_source == "src-P"


def test_topk_caps_positives_at_half_and_negatives_fill_the_rest():
    pos = [rec("P", f"p{i}", f"pos{i}", 10.0 + i, 5.0) for i in range(6)]  # speedups 2.0..3.0
    neg = [rec("P", f"n{i}", f"neg{i}", 10.0, 20.0 + i) for i in range(6)]
    pairs = select_rewrites(pos + neg, top_k=8)
    kinds = [p.kind for p in pairs]
    assert kinds.count("positive") == 4 and kinds.count("negative") == 4
    assert [p.fast_id for p in pairs if p.kind == "positive"] == ["pos5", "pos4", "pos3", "pos2"]
    assert [p.slow_id for p in pairs if p.kind == "negative"] == ["neg5", "neg4", "neg3", "neg2"]
    # With few positives, negatives take the free slots.
    pairs = select_rewrites(pos[:1] + neg, top_k=8)
    assert [p.kind for p in pairs].count("negative") == 6
    # Odd TopK: positives get the floor of half.
    assert [p.kind for p in select_rewrites(pos, top_k=5)].count("positive") == 2
    assert select_rewrites(pos + neg, top_k=0) == []


def test_per_plan_best_sample_or_worst_regression():
    recs = [rec("P", "a", "s1", 10.0, 8.0, order=0), rec("P", "a", "s2", 10.0, 5.0, order=1),  # best: s2
            rec("P", "b", "s3", 10.0, 30.0, order=2), rec("P", "b", "s4", 10.0, 15.0, order=3),  # worst: s3
            rec("P", "c", "s5", 10.0, 5.0, order=4), rec("P", "c", "s6", 10.0, 40.0, order=5)]  # a win: s5 only
    pairs = select_rewrites(recs, top_k=8)
    assert {(p.kind, p.fast_id if p.kind == "positive" else p.slow_id) for p in pairs} == {
        ("positive", "s2"), ("positive", "s5"), ("negative", "s3")}


def test_failed_and_identical_children_are_skipped():
    same = RewriteRecord("P", "code", 10.0, "copy", "code", 5.0, "a")  # identical source
    recs = [rec("P", "a", "bad", 10.0, None), same, rec("P", "b", "ok", 10.0, 5.0)]
    assert [p.fast_id for p in select_rewrites(recs, top_k=8)] == ["ok"]


def test_selection_is_deterministic_on_ties():
    recs = [rec("P", f"p{i}", f"c{i}", 10.0, 5.0, order=i) for i in range(5)]
    a = [p.fast_id for p in select_rewrites(recs, top_k=4)]
    b = [p.fast_id for p in select_rewrites(list(reversed(recs)), top_k=4)]
    assert a == b == ["c0", "c1"]


def test_bad_thresholds_are_rejected():
    with pytest.raises(ConfigError):
        select_rewrites([], top_k=8, positive_threshold=0.9)
    with pytest.raises(ConfigError):
        select_rewrites([], top_k=-1)


# ---------------------------------------------------------------- FIFO queue
def test_capacity_and_fifo_eviction_order():
    mem = OptimizationMemory(capacity=3)
    assert mem.add([item(1), item(2)]) == []
    evicted = mem.add([item(3), item(4), item(5)])
    assert [i.item_id for i in evicted] == ["id1", "id2"]
    assert [i.item_id for i in mem.items] == ["id3", "id4", "id5"]
    assert len(mem) == 3
    evicted = mem.add(item(6))
    assert [i.item_id for i in evicted] == ["id3"]


def test_more_new_items_than_capacity_keeps_the_newest():
    mem = OptimizationMemory(capacity=2, items=[item(i) for i in range(5)])
    assert [i.item_id for i in mem] == ["id3", "id4"]
    assert len(OptimizationMemory(capacity=0, items=[item(1)])) == 0


def test_duplicate_ids_rejected():
    mem = OptimizationMemory(4, [item(1)])
    with pytest.raises(StoreError):
        mem.add(item(1))


def test_inspect_edit_remove_manual():
    mem = OptimizationMemory(4, [item(1), item(2)])
    mem.edit("id1", summary="better words")
    assert mem.get("id1").summary == "better words"
    assert [i.item_id for i in mem] == ["id1", "id2"]  # position kept
    with pytest.raises(ConfigError):
        mem.edit("id1", nonsense=1)
    with pytest.raises(StoreError):
        mem.get("nope")
    removed = mem.remove("id2")
    assert removed.title == "t2" and len(mem) == 1
    manual = mem.add_manual("**Hoist loads**", "Move loop-invariant loads out of the loop.")
    assert manual.kind == "manual" and mem.items[-1] is manual
    df = mem.to_dataframe()
    assert list(df["item_id"]) == ["id1", manual.item_id]


def test_save_load_roundtrip(tmp_path):
    mem = OptimizationMemory(5, [item(1), item(2, problem="q")])
    path = mem.save(tmp_path / "sub" / "mem.json")
    loaded = OptimizationMemory.load(path)
    assert loaded.capacity == 5 and [i.to_dict() for i in loaded] == [i.to_dict() for i in mem]
    # Loading with a smaller capacity keeps the newest.
    assert [i.item_id for i in OptimizationMemory.load(path, capacity=1)] == ["id2"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "other"}))
    with pytest.raises(StoreError):
        OptimizationMemory.load(bad)
    with pytest.raises(StoreError):
        OptimizationMemory.load(tmp_path / "missing.json")


def test_visibility_per_problem_or_shared():
    mem = OptimizationMemory(8, [item(1, "silu"), item(2, "adamw")])
    manual = mem.add_manual("t", "s")
    assert [i.item_id for i in mem.visible("silu")] == ["id1", manual.item_id]
    assert len(mem.visible("silu", shared=True)) == 3


def test_item_from_pair_carries_the_measured_speedup():
    pair = select_rewrites([rec("P", "a", "c", 12.0, 10.0)], top_k=2)[0]
    it = memory_item_from_pair(pair, "**x**", "y", problem="silu", iteration=3, run_id="r")
    assert it.speedup == pytest.approx(1.2) and it.slow_kernel_id == "P" and it.fast_kernel_id == "c"
