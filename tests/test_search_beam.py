"""Beam selection: the paper's semantics, not the authors' code's."""
from __future__ import annotations

import math

import pytest

from accelopt_nb.search.beam import Candidate, select_beam, source_hash


def c(kid: str, lat: float | None, correct: bool = True, src: str | None = None, order: int = 0) -> Candidate:
    return Candidate(kernel_id=kid, source_hash=source_hash(src if src is not None else kid),
                     latency_ms=lat, correct=correct, order=order)


def ids(beam):
    return [b.kernel_id for b in beam]


def test_fastest_correct_kernels_are_kept_in_latency_order():
    beam = select_beam([c("p", 10.0)], [c("a", 9.0), c("b", 11.0), c("d", 8.0)], width=2)
    assert ids(beam) == ["d", "a"]


def test_parent_retained_when_every_child_is_slower():
    # The authors' code would drop the parent here (it only returns as a +inf fallback).
    beam = select_beam([c("p", 10.0)], [c(f"k{i}", 10.5 + i) for i in range(6)], width=3)
    assert ids(beam) == ["p", "k0", "k1"]


def test_best_never_regresses_across_iterations():
    beam = [c("base", 5.0)]
    for it, lats in enumerate([[6.0, 7.0], [4.0, 9.0], [4.5, 4.1]]):
        new = [c(f"i{it}_{j}", lat) for j, lat in enumerate(lats)]
        prev_best = beam[0].latency_ms
        beam = select_beam(beam, new, width=2)
        assert beam[0].latency_ms <= prev_best
    assert ids(beam) == ["i1_0", "i2_1"]


def test_invalid_candidates_are_excluded():
    new = [c("wrong", 1.0, correct=False), c("nolat", None), c("nan", math.nan), c("inf", math.inf),
           c("zero", 0.0), c("ok", 12.0)]
    beam = select_beam([c("p", 10.0)], new, width=6)
    assert ids(beam) == ["p", "ok"]


def test_duplicates_by_source_hash_take_one_slot():
    same = "def kernel(): pass"
    new = [c("dup1", 8.0, src=same), c("dup2", 8.0, src=same + "   \n"), c("x", 9.0)]
    beam = select_beam([c("p", 10.0)], new, width=3)
    assert ids(beam) == ["dup1", "x", "p"]


def test_child_identical_to_parent_does_not_displace_it():
    src = "def kernel(): return 1"
    beam = select_beam([c("p", 10.0, src=src)], [c("copy", 10.0, src=src), c("y", 11.0)], width=2)
    assert ids(beam) == ["p", "y"]


def test_duplicate_keeps_its_fastest_measurement():
    src = "def kernel(): return 2"
    beam = select_beam([c("p", 10.0, src=src)], [c("remeasured", 9.5, src=src)], width=2)
    assert ids(beam) == ["remeasured"]


def test_ties_are_deterministic_incumbent_then_order_then_id():
    cur = [c("p2", 5.0), c("p1", 5.0)]
    new = [c("n_b", 5.0, order=1), c("n_a", 5.0, order=1), c("n_c", 5.0, order=0)]
    beam = select_beam(cur, new, width=5)
    assert ids(beam) == ["p1", "p2", "n_c", "n_a", "n_b"]
    # The same inputs in another order give the same beam.
    assert ids(select_beam(list(reversed(cur)), list(reversed(new)), width=5)) == ids(beam)


def test_width_and_empty_inputs():
    assert select_beam([], [], width=3) == []
    assert len(select_beam([], [c(f"k{i}", float(i + 1)) for i in range(10)], width=4)) == 4
    with pytest.raises(ValueError):
        select_beam([], [], width=0)


def test_source_hash_normalizes_line_endings_and_trailing_space():
    assert source_hash("a\r\nb  \n") == source_hash("a\nb")
    assert source_hash("a\nb") != source_hash("a\n b")
