"""Search presets and configuration validation."""
from __future__ import annotations

import pytest

from accelopt_nb.errors import ConfigError
from accelopt_nb.presets import list_presets, load_preset
from accelopt_nb.search import SearchConfig


def test_paper_preset_has_the_paper_settings():
    c = SearchConfig.from_preset("paper")
    assert (c.iterations, c.beam_width, c.plans_per_kernel, c.samples_per_plan) == (16, 6, 12, 2)
    assert (c.memory.top_k, c.memory.capacity) == (8, 16)
    assert (c.memory.positive_threshold, c.memory.negative_threshold) == (1.04, 1.15)
    assert c.strategy == "beam" and not c.planner.show_peak and not c.memory.shared
    assert c.evaluation.shape_preset == "paper"


def test_smoke_preset_is_tiny_and_presets_are_listed():
    c = SearchConfig.from_preset("smoke")
    assert c.iterations * c.beam_width * c.plans_per_kernel * c.samples_per_plan <= 8
    assert c.evaluation.shape_preset == "small"
    assert {"paper", "smoke"} <= set(list_presets())


def test_overrides_dotted_and_validation():
    c = SearchConfig.from_preset("paper", iterations=3, **{"memory.top_k": 4, "evaluation.hw": "trn2"})
    assert c.iterations == 3 and c.memory.top_k == 4 and c.evaluation.hw == "trn2"
    assert c.with_overrides(beam_width=None).beam_width == 6  # None means "not given"
    for bad in ({"iterations": 0}, {"strategy": "greedy"}, {"memory.negative_threshold": 0.8},
                {"planner.profile_order": "random"}, {"planner.profile_fields": "most"}, {"samples_per_plan": 1.5}):
        with pytest.raises(ConfigError):
            SearchConfig.from_preset("smoke", **bad)
    with pytest.raises(ConfigError, match="unknown search setting"):
        SearchConfig.from_dict({"beam": 3})
    with pytest.raises(ConfigError, match="unknown memory setting"):
        SearchConfig.from_dict({"memory": {"size": 3}})


def test_repeated_sampling_budget_and_memory():
    beam = SearchConfig.from_preset("paper")
    rep = beam.with_overrides(strategy="repeated")
    assert [beam.plans_for(t, 6) for t in (0, 1)] == [12, 12]  # per beam kernel
    assert [rep.plans_for(t, 6) for t in (0, 1)] == [12, 72]   # all from the baseline
    assert beam.uses_memory and not rep.uses_memory


def test_preset_files_and_errors(tmp_path):
    p = tmp_path / "mine.yaml"
    p.write_text("name: mine\niterations: 2\nbeam_width: 1\n")
    c = SearchConfig.from_preset(p)
    assert c.name == "mine" and c.iterations == 2 and c.plans_per_kernel == 12
    with pytest.raises(ConfigError, match="unknown preset"):
        load_preset("nonexistent")
    with pytest.raises(ConfigError, match="not found"):
        load_preset(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a list\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_preset(bad)
    assert SearchConfig.from_dict(c.to_dict()) == c
