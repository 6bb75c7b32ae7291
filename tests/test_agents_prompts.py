"""Prompt templates and answer parsing of the three agents."""
from __future__ import annotations

import random

import pytest

from accelopt_nb.agents import (Executor, Planner, PromptSet, Summarizer, format_profile, parse_kernel,
                                parse_plan, parse_summary)
from accelopt_nb.agents.prompts import PAPER_FIELDS, PROFILE_GLOSSARY, PeakInfo
from accelopt_nb.errors import ConfigError, UnusableOutputError
from accelopt_nb.search.memory import MemoryItem

REF = "def forward(x):\n    return x * 2\n"
KERNEL = "@nki.jit\ndef kernel(x):\n    return x\n"


def test_planner_prompt_has_knowledge_glossary_memory_and_inputs():
    items = [MemoryItem(title="Hoist loads", summary="**Hoist loads**\nMove invariant loads out.", speedup=1.31),
             MemoryItem(title="Fuse", summary="**Fuse loops**\nOne pass.", speedup=1.2)]
    msgs = Planner().messages(problem_name="silu", reference_source=REF, kernel_source=KERNEL,
                              profile_lines=["latency: 1.5", "spill_reload_bytes: 0"], memory_items=items)
    system, user = msgs[0]["content"], msgs[1]["content"]
    assert msgs[0]["role"] == "system" and msgs[1]["role"] == "user"
    for needle in ("SBUF", "PSUM", "128 partitions", "stationary.T @ moving", "nc_transpose",
                   "spill_reload_bytes", "mm_arithmetic_intensity", "Move invariant loads out.", "1.31x faster"):
        assert needle in system, needle
    for needle in ("exactly one optimization step", "Plan:", "forward(x)", "def kernel(x)", "latency: 1.5",
                   "float32"):
        assert needle in user, needle
    assert "theoretical peak" not in user  # off by default


def test_planner_memory_section_absent_when_empty_and_peak_optional():
    p = Planner()
    system = p.messages(problem_name="p", reference_source=REF, kernel_source=KERNEL, profile_lines=[])[0]["content"]
    assert "Lessons from earlier" not in system
    user = p.messages(problem_name="p", reference_source=REF, kernel_source=KERNEL, profile_lines=[],
                      peak=PeakInfo(percent=41.5, peak_ms=0.52, bound="HBM bandwidth"))[1]["content"]
    assert "41.5% of this problem's theoretical peak" in user and "HBM bandwidth" in user


def test_executor_prompt_rules_precision_and_real_criterion():
    msgs = Executor(tolerance=3e-5).messages(problem_name="mamba", reference_source=REF, kernel_source=KERNEL,
                                             plan="Plan: hoist the loads of delta out of the state loop.")
    system, user = msgs[0]["content"], msgs[1]["content"]
    for needle in ("affine_range", "sequential_range", "basic indexing", "advanced indexing",
                   "does not exist outside it", "3e-05", "5 sets of random inputs",
                   "lower precision", "float64"):
        assert needle in system, needle
    assert "adversarial" not in system  # the judge's business unless a setting asks for it
    shown = Executor(tolerance=3e-5, adversarial=True).messages(problem_name="mamba", reference_source=REF,
                                                                kernel_source=KERNEL, plan="Plan: x")
    assert "adversarial" in shown[0]["content"]
    assert "hoist the loads of delta" in user and "```python" in user
    assert "allclose" not in system + user  # the authors' prompt showed a wrong criterion


def test_summarizer_prompt_substitutes_the_speedup():
    msgs = Summarizer(hw="trn1", measured_on="estimated by the trn1 performance model").messages(
        slow_source="SLOW", fast_source="FAST", speedup=1.2345, slow_ms=2.0, fast_ms=1.62)
    user = msgs[1]["content"]
    assert "1.234x faster" in user or "1.235x faster" in user
    assert "2 ms -> 1.62 ms" in user and "performance model" in user
    assert "{speedup}" not in user and "SLOW" in user and "FAST" in user
    assert "No optimization found" in msgs[0]["content"]


def test_trn2_facts_and_unknown_hw():
    system = Planner(hw="trn2").messages(problem_name="p", reference_source=REF, kernel_source=KERNEL,
                                         profile_lines=[])[0]["content"]
    assert "224 KiB" in system
    with pytest.raises(ConfigError):
        Planner(hw="trn9").messages(problem_name="p", reference_source=REF, kernel_source=KERNEL, profile_lines=[])


def test_custom_template_directory_overrides_one_file(tmp_path):
    (tmp_path / "summarizer_user.j2").write_text("pair {{ speedup }} {{ slow_source }}")
    ps = PromptSet(tmp_path)
    _, user = ps.summarizer(slow_source="S", fast_source="F", speedup=2.0, slow_ms=2, fast_ms=1)
    assert user.strip() == "pair 2.0 S"
    system, _ = ps.planner(problem_name="p", reference_source=REF, kernel_source=KERNEL, profile_lines=[])
    assert "SBUF" in system  # other templates still come from the package
    (tmp_path / "planner_user.j2").write_text("{{ not_a_variable }}")
    with pytest.raises(ConfigError, match="not_a_variable"):
        PromptSet(tmp_path).planner(problem_name="p", reference_source=REF, kernel_source=KERNEL, profile_lines=[])
    with pytest.raises(ConfigError):
        PromptSet(tmp_path / "missing")


def test_format_profile_field_sets_order_and_values():
    prof = {"vector_engine_active_time_percent": 0.41, "latency": 1.25, "hbm_read_bytes": 4096,
            "dma_active_time_percent": 0.9, "zz_custom": 3.5, "nested": {"a": 1}, "flag": True,
            "bottleneck": ["dma-bound"]}
    assert format_profile(prof) == ["latency: 1.25", "hbm_read_bytes: 4096", "vector_engine_active_time_percent: 0.41"]
    assert format_profile(prof, fields="extended")[-1] == "dma_active_time_percent: 0.9"
    lines = format_profile(prof, fields="all")
    assert lines[-1] == "zz_custom: 3.5" and len(lines) == 5  # non-numbers never shown
    shuffled_a = format_profile(prof, order="shuffled", rng=random.Random(7), fields="all")
    shuffled_b = format_profile(prof, order="shuffled", rng=random.Random(7), fields="all")
    assert shuffled_a == shuffled_b and sorted(shuffled_a) == sorted(lines)
    with pytest.raises(ConfigError):
        format_profile(prof, order="shuffled")
    with pytest.raises(ConfigError):
        format_profile(prof, fields="some")
    assert set(PROFILE_GLOSSARY) >= set(PAPER_FIELDS) and len(PAPER_FIELDS) == 17


def test_glossary_matches_the_field_set():
    paper = Planner().messages(problem_name="p", reference_source=REF, kernel_source=KERNEL,
                               profile_lines=[])[0]["content"]
    ext = Planner(fields="extended").messages(problem_name="p", reference_source=REF, kernel_source=KERNEL,
                                              profile_lines=[])[0]["content"]
    assert "`dma_active_time_percent`" not in paper and "`dma_active_time_percent`" in ext


def test_planner_hints_section():
    user = Planner().messages(problem_name="p", reference_source=REF, kernel_source=KERNEL, profile_lines=[],
                              hints=["dma-bound: DMA queues busy 96% of the time"])[1]["content"]
    assert "Bottlenecks the profiler points out" in user and "DMA queues busy" in user


def test_parse_plan():
    p = parse_plan("The kernel reloads x.\n\n**Plan:**\nHoist the load of x out of the j loop.")
    assert p.step == "Hoist the load of x out of the j loop." and not p.notes
    assert "reloads x" in p.text
    p2 = parse_plan("Plan: merge the two loops over rows into one.")
    assert p2.step == "merge the two loops over rows into one."
    p3 = parse_plan("<think>hmm</think>Swap the loop order so the weights stay resident.")
    assert p3.reasoning == "hmm" and p3.notes
    with pytest.raises(UnusableOutputError):
        parse_plan("ok")
    with pytest.raises(UnusableOutputError):
        parse_plan("<think>a very long reasoning that never ends ...")


def test_parse_kernel_and_summary():
    assert parse_kernel("```python\nimport neuronxcc.nki as nki\n@nki.jit\ndef kernel(x):\n    return x\n```").ok
    with pytest.raises(UnusableOutputError, match="no code block"):
        parse_kernel("sorry")
    s = parse_summary("**Hoist invariant loads**\nLoads that do not depend on the loop...\nOriginal code:\n```python\nx\n```")
    assert s.found and s.title == "Hoist invariant loads"
    assert not parse_summary("No optimization found.").found
    assert parse_summary("Fuse the loops\nbody").title == "Fuse the loops"
    with pytest.raises(UnusableOutputError):
        parse_summary("   ")
