"""Error bars from held-out residuals of the kernel's class (perf/uncertainty.py)."""
import math

import numpy as np
import pytest
import yaml

from accelopt_nb.perf import estimate, format_profile, load_hw
from accelopt_nb.perf.uncertainty import (ClassInputs, LatencyUncertainty, classify, interval_from_residuals, lookup,
                                          table_entry)
from perf_builders import TraceBuilder


def _inputs(**kw) -> ClassInputs:
    base = dict(total=1e-3, tensor_busy=0.0, vector_busy=0.0, vector_overhead=0.0, dma_active=0.0,
                dma_transfers=10, dma_issue=0.35e-6, dma_small_share=0.0)
    return ClassInputs(**{**base, **kw})


def test_classes_follow_the_resource_that_bounds_the_schedule():
    assert classify(_inputs(tensor_busy=0.9e-3, vector_busy=0.1e-3, dma_active=0.3e-3)) == "matmul"
    assert classify(_inputs(tensor_busy=0.9e-3, vector_busy=0.4e-3, dma_active=1e-3)) == "matmul"
    assert classify(_inputs(tensor_busy=0.4e-3, vector_busy=0.6e-3, dma_active=0.3e-3)) == "fused"
    assert classify(_inputs(vector_busy=0.9e-3, dma_active=0.5e-3)) == "elementwise"
    assert classify(_inputs(vector_busy=0.3e-3, dma_active=0.95e-3)) == "dma"
    # most of the busiest vector engine's time is fixed per-instruction overhead
    assert classify(_inputs(vector_busy=0.9e-3, vector_overhead=0.6e-3, dma_active=0.2e-3)) == "overhead"
    # ... or of instructions so small they run at the MIN_II floor
    assert classify(_inputs(vector_busy=0.9e-3, vector_tiny=0.6e-3, dma_active=0.2e-3)) == "overhead"
    # the DMA engines' issue slots of tiny transfers fill most of the latency
    assert classify(_inputs(dma_active=0.9e-3, dma_transfers=2000, dma_small_share=0.9)) == "overhead"
    assert classify(_inputs(dma_active=0.9e-3, dma_transfers=2000, dma_small_share=0.1)) == "dma"


def test_interval_is_a_lognormal_prediction_interval_of_the_residuals():
    ratios = [0.9, 1.0, 1.1, 1.2, 0.95, 1.05]
    lo, hi = interval_from_residuals(ratios, 0.8)
    logs = np.log(ratios)
    t = 1.4759                       # Student's t, 0.9 quantile, 5 degrees of freedom
    half = t * logs.std(ddof=1) * math.sqrt(1 + 1 / 6)
    assert lo == pytest.approx(math.exp(logs.mean() - half), rel=1e-3)
    assert hi == pytest.approx(math.exp(logs.mean() + half), rel=1e-3)
    # a biased class is not centred on 1: the model 2x too slow gives an interval below 1
    lo2, hi2 = interval_from_residuals([0.48, 0.5, 0.52, 0.55], 0.8)
    assert hi2 < 1
    wider = interval_from_residuals(ratios, 0.95)
    assert wider[0] < lo and wider[1] > hi


def test_lookup_uses_the_class_then_the_pooled_entry_then_a_wide_prior(tmp_path):
    table = {"coverage": 0.8, "hardware": {"trn1": {
        "classes": {"matmul": table_entry([0.9, 1.0, 1.1, 1.05], ["a", "b", "a", "a"]),
                    "dma": table_entry([1.0, 1.2], ["c", "c"])},
        "pooled": table_entry([0.9, 1.0, 1.1, 1.05, 1.0, 1.2], ["a", "b", "c"])}}}
    path = tmp_path / "u.yaml"
    path.write_text(yaml.safe_dump(table))
    mm = lookup("trn1", "matmul", path)
    assert (mm.basis, mm.n, mm.sources) == ("held-out", 4, ("a", "b"))
    assert mm.low < 1 < mm.high
    dma = lookup("trn1", "dma", path)                 # 2 residuals: too few, the pooled entry (and the prior) speak
    assert (dma.basis, dma.n) == ("pooled", 6) and dma.low <= 0.5 and dma.high >= 2.0
    none = lookup("trn9", "matmul", path, prior_error=0.1)     # trn1's matmul bar x1.1 is inside x0.5-x2
    assert (none.basis, none.n, none.low, none.high) == ("prior", 0, 0.5, 2.0)
    assert lookup("trn9", "matmul", path, prior_error=3.0).high == pytest.approx(mm.high * 4.0, abs=1e-3)
    assert lookup("trn9", "elementwise", path, prior_error=3.0).high == 4.0   # measured nowhere


def test_a_class_without_residuals_of_its_own_gets_a_prior_not_another_class_pooled(tmp_path):
    """trn2's pooled bar rests on a few tiny DMA-bound kernels: it must not speak for a trn2 matmul."""
    table = {"coverage": 0.8, "hardware": {
        "trn1": {"classes": {"elementwise": table_entry([0.6, 1.0, 1.5, 1.8, 0.9], ["a"])},
                 "pooled": table_entry([0.6, 1.0, 1.5, 1.8, 0.9], ["a"])},
        "trn2": {"classes": {"dma": table_entry([0.95, 1.0, 1.05], ["c"]), "overhead": table_entry([0.3], ["c"])},
                 "pooled": table_entry([0.95, 1.0, 1.05, 0.3], ["c"])}}}
    path = tmp_path / "u.yaml"
    path.write_text(yaml.safe_dump(table))
    mm = lookup("trn2", "matmul", path, prior_error=0.26)     # measured nowhere: the stated x0.5-x2
    assert (mm.basis, mm.n, mm.sources, mm.low, mm.high) == ("prior", 0, (), 0.5, 2.0)
    assert "prior" in mm.describe()
    ew = lookup("trn2", "elementwise", path, prior_error=0.26)  # trn1's element-wise bar, widened by x1.26
    trn1 = table["hardware"]["trn1"]["classes"]["elementwise"]
    assert ew.basis == "prior" and trn1["high"] * 1.26 > 2
    assert (ew.low, ew.high) == pytest.approx((min(0.5, trn1["low"] / 1.26), trn1["high"] * 1.26), abs=1e-3)
    # 1-3 of its own: the pooled bar, stretched to them, never narrower than the class's prior
    pooled = table["hardware"]["trn2"]["pooled"]
    assert pooled["low"] < 0.5 < 2.0 < pooled["high"]
    dma = lookup("trn2", "dma", path)
    assert (dma.basis, dma.n, dma.low, dma.high) == ("pooled", 4, pooled["low"], pooled["high"])
    table["hardware"]["trn2"]["pooled"] = table_entry([0.95, 1.0, 1.05, 1.02], ["c"])    # a narrow pooled bar
    narrow = tmp_path / "narrow.yaml"                            # (another file: tables are cached by path)
    narrow.write_text(yaml.safe_dump(table))
    dma = lookup("trn2", "dma", narrow)
    assert (dma.basis, dma.low, dma.high) == ("pooled", 0.5, 2.0)
    assert "all 4 of this hardware pooled, no narrower than a prior" in dma.describe()
    over = lookup("trn2", "overhead", narrow)                    # its one residual lies outside the prior too
    assert (over.basis, over.low, over.high) == ("pooled", 0.3, 2.0)


def test_shipped_trn2_bars_for_unmeasured_classes_are_wide_priors():
    from accelopt_nb.perf.uncertainty import KERNEL_CLASSES, heldout_residuals
    for c in KERNEL_CLASSES:
        u = lookup("trn2", c)
        own = heldout_residuals(hw="trn2", kernel_class=c)
        assert u == lookup("trn2", c, prior_error=load_hw("trn2").model_error)   # the preset's by default
        if not own:
            assert u.basis == "prior" and u.n == 0 and u.low <= 0.5 and u.high >= 2.0, (c, u)
        elif len(own) < 4:
            assert u.basis == "pooled" and u.low <= min(0.5, *(r.ratio for r in own)) and u.high >= 2.0, (c, u)
        else:
            assert u.basis == "held-out" and u.n == len(own)


def test_every_profile_carries_its_class_interval_and_basis():
    b = TraceBuilder()
    x, y = b.hbm("x", (128, 8192)), b.hbm("y", (128, 8192), kind="output")
    t = b.tensor("t", (128, 8192))
    b.dma(b.region(t), b.region(x))
    b.dma(b.region(y), b.region(t))
    p = estimate(b.trace)
    u = p.uncertainty
    assert isinstance(u, LatencyUncertainty) and u.kernel_class == p.kernel_class == "dma"
    assert u.low < u.high and 0 < u.coverage < 1 and u.basis in ("held-out", "pooled", "prior")
    assert p.latency_interval == pytest.approx((p.latency * u.low, p.latency * u.high))
    assert p.model_error == pytest.approx(u.error_factor - 1)
    d = p.to_dict()
    assert LatencyUncertainty.from_dict(d["uncertainty"]) == u
    assert p.estimate_note == f"estimated (trn1 model; {u.describe()})"
    assert "±" not in format_profile(p)
    assert p.estimate_note in format_profile(p).splitlines()[2]      # the latency line


def test_the_profile_record_keeps_the_error_bar_typed():
    from accelopt_nb.evaluation.backends.simulator import raw_profile
    from accelopt_nb.evaluation.profile import ProfileRecord, profile_record

    b = TraceBuilder()
    a = b.tensor("a", (128, 4096))
    o = b.tensor("o", (128, 4096))
    for _ in range(4):
        b.vector("tensor_tensor", [b.region(a), b.region(a)], [b.region(o)], 4096, alu="add")
    raw = raw_profile(estimate(b.trace))   # the simulator backend's raw profile: latency_ms
    rec = profile_record(raw, source="simulator", hw="trn1")
    assert rec.uncertainty == raw["uncertainty"] and "uncertainty" not in rec.metrics
    lo, hi = rec.latency_interval_ms
    assert lo == pytest.approx(raw["latency_ms"] * raw["uncertainty"]["low"])
    assert ProfileRecord.from_dict(rec.to_dict()).uncertainty == rec.uncertainty
    measured = profile_record({"total_time": 0.002, "hbm_read_bytes": 10}, source="neuron", hw="trn1")
    assert measured.uncertainty is None and measured.latency_interval_ms is None


def test_the_shipped_residuals_reproduce_the_shipped_intervals():
    """heldout.csv and uncertainty.yaml are written together: each interval follows from the residuals."""
    from accelopt_nb.perf.uncertainty import DATA, heldout_residuals, table_entry
    table = yaml.safe_load(DATA.read_text())
    residuals = heldout_residuals()
    assert residuals and all(r.basis.split(" ")[0] in ("held-out", "leave-one-out") and r.model_ms > 0 for r in residuals)
    for hw, entry in table["hardware"].items():
        mine = heldout_residuals(hw=hw)
        expect = table_entry([r.ratio for r in mine], [r.source for r in mine])
        assert entry["pooled"]["n"] == len(mine)
        assert entry["pooled"]["low"] == pytest.approx(expect["low"], abs=2e-3)
        assert entry["pooled"]["high"] == pytest.approx(expect["high"], abs=2e-3)
        for cls, e in entry["classes"].items():
            of_class = heldout_residuals(hw=hw, kernel_class=cls)
            assert e["n"] == len(of_class) >= 1
            assert e["max_ratio"] == pytest.approx(max(r.ratio for r in of_class), abs=2e-3)
            if len(of_class) >= 2:
                assert e["high"] == pytest.approx(table_entry([r.ratio for r in of_class], ["x"])["high"], abs=2e-3)
    worst = max(residuals, key=lambda r: r.error_factor)
    assert worst.error_factor == max(worst.ratio, 1 / worst.ratio) >= 1
