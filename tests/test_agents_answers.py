"""What counts as an answer: refusals, "No optimization found", harmony channels, prompt sets."""
from __future__ import annotations

import pytest

from accelopt_nb.agents import Executor, Planner, Summarizer, parse_plan, parse_summary, split_reasoning
from accelopt_nb.agents.prompts import reference_for_agents
from accelopt_nb.errors import UnusableOutputError
from accelopt_nb.search.beam import ast_hash

PLAN = "The kernel reloads x per row block.\n\nPlan:\nLoad x once and keep it in SBUF across the loop."
HARMONY = ("<|channel|>analysis<|message|>The loads dominate; look at hbm_read_bytes.<|end|>"
           "<|start|>assistant<|channel|>final<|message|>" + PLAN + "<|return|>")


@pytest.mark.parametrize("text", ["I'm sorry, but I can't help with that.", "I’m sorry, but I cannot assist with that request.",
                                  "Sorry, I can't help with that", "I cannot help with this request, it seems unsafe."])
def test_a_refusal_is_not_a_plan(text):
    with pytest.raises(UnusableOutputError, match="refused"):
        parse_plan(text)


@pytest.mark.parametrize("text", ["No optimization found", "no optimization found.",
                                  "No optimization found. The two kernels are identical except for comments.",
                                  "**No optimization found**: same loop nest", "NO OPTIMISATION FOUND"])
def test_no_optimization_found_with_any_suffix_or_case_is_not_a_lesson(text):
    parsed = parse_summary(text)
    assert not parsed.found


def test_harmony_channels_are_split_and_never_leak_into_the_plan():
    parsed = parse_plan(HARMONY)
    assert "<|" not in parsed.text and "analysis" not in parsed.text
    assert parsed.step.startswith("Load x once") and "hbm_read_bytes" in parsed.reasoning
    # the same answer with the special tokens stripped by the server
    stripped = "analysisThe loads dominate.assistantfinal" + PLAN
    assert split_reasoning(stripped) == ("The loads dominate.", PLAN)
    summary = parse_summary("<|channel|>analysis<|message|>thinking<|end|><|start|>assistant<|channel|>final"
                            "<|message|>**Hoist loads**\nLoad once.<|return|>")
    assert summary.title == "Hoist loads" and "<|" not in summary.summary and summary.reasoning == "thinking"


def test_dedupe_ignores_comments_docstrings_and_layout_but_not_code():
    a = 'import numpy as np\n\ndef kernel(x):\n    """Doc."""\n    return x + 1  # add one\n'
    b = "import numpy as np\ndef kernel(x):\n\n    return (x + 1)\n"
    c = "import numpy as np\ndef kernel(x):\n    return x + 2\n"
    assert ast_hash(a) == ast_hash(b) != ast_hash(c)
    assert ast_hash("def broken(:\n") == ast_hash("def broken(:\n")


def test_paper_prompt_set_has_the_authors_content_and_none_of_our_advice():
    from accelopt_nb.search.memory import MemoryItem

    ref = "import numpy as np\n\ndef forward(x):\n    return x\n"
    lesson = MemoryItem(title="Hoist", summary="**Hoist loads**\nLoad once.", speedup=1.3)
    kw = dict(problem_name="p", reference_source=ref, kernel_source="def kernel(x): pass",
              profile_lines=["latency: 1"], memory_items=[lesson])
    system, user = (m["content"] for m in Planner(prompt_set="paper").messages(**kw))
    ext_system, ext_user = (m["content"] for m in Planner(prompt_set="extended").messages(**kw))
    # The authors' five API facts: partition dimension, PSUM/SBUF limits, 128 partitions, nc_matmul
    # with its throughput fact and parameter list, nc_transpose's cost.
    for needle in ("first (leftmost) dimension as the partition dimension", "at most 512 elements",
                   "at most 192 KB", "at most 128 partitions",
                   "nki.isa.nc_matmul(stationary, moving, is_stationary_onezero=False, is_moving_onezero=False, "
                   "mask=None, is_transpose=False)",
                   "A 128x128 stationary operand with a 128x512 moving operand gives the best throughput",
                   "- is_stationary_onezero:", "- is_moving_onezero:", "- is_transpose:", "- mask:",
                   "nki.isa.nc_transpose(x) does the same work as", "and costs the same",
                   "# Profile terms", "(hardware_flops - transpose_flops) / (hbm_read_bytes + hbm_write_bytes)",
                   "# Experiences\n**Hoist loads**\nLoad once."):
        assert needle in system, needle
    # The authors' task and guidance, with their menu of transformations and their API rule.
    for needle in ("propose 1 optimization plan", "the plan has 1 step", "Begin with the profile",
                   "loop ordering, tiling, splitting and merging loops, liveness analysis, data reuse, reordering "
                   "instructions or blocks of instructions, hoisting redundant operations out of loops, fusion",
                   "the profile numbers may disagree", "Use only NKI APIs that the baseline kernel already uses",
                   "Do not propose a precision lower", "# Problem", "# Baseline NKI kernel", "# Profile"):
        assert needle in user, needle
    # None of what the paper's prompt does not have: our framing, checklist, spill advice, lesson speedups.
    paper_text = system + user
    for extra in ("find what limits its speed", "How to work", "Plan:`", "shorten buffer lifetimes",
                  "x faster", "Lessons from earlier", "reuse one stationary tile", "good kernels keep several",
                  "must stay correct for all inputs", "Lower is better"):
        assert extra not in paper_text, extra
    assert "shorten buffer lifetimes" in ext_system and "1.30x faster" in ext_system and "How to work" in ext_user
    ex_system, ex_user = (m["content"] for m in Executor(prompt_set="paper").messages(
        problem_name="p", reference_source=ref, kernel_source="k", plan="x"))
    for needle in ("# Output dependencies", "# Tensor indexing", "# Tensor usage scope", "# Access variables",
                   "nki.isa.nc_matmul(stationary, moving"):
        assert needle in ex_system, needle
    assert "Use only NKI APIs that already appear in the baseline kernel" in ex_user
    assert "even if the optimization plan suggests them" in ex_user and "# Kernel usage" in ex_user
    assert "described in your instructions" not in ex_user and "good kernels keep several" not in ex_system
    sm_system, sm_user = (m["content"] for m in Summarizer(prompt_set="paper").messages(
        slow_source="a", fast_source="b", speedup=1.25, slow_ms=2.0, fast_ms=1.6))
    assert 'answer only "No optimization found"' in sm_system and "general enough" in sm_system
    assert "Be brief" not in sm_system and "# Speedup\n1.250" in sm_user


def test_the_adversarial_generator_is_hidden_from_the_agents_unless_asked():
    src = ("import numpy as np\n\n\ndef forward(x):\n    return x\n\n\ndef get_adversarial_inputs():\n"
           "    return [[np.zeros(4)]]\n\n\ndef transform_nki_outputs(k, r):\n    return (k,)\n")
    shown = reference_for_agents(src)
    assert "adversarial" not in shown and "def forward" in shown and "def transform_nki_outputs" in shown
    assert reference_for_agents(src, show_adversarial=True) == src


def test_no_nkibench_problem_shows_adversarial_code_or_comments_to_the_agents():
    from nkibench import registry

    from accelopt_nb.search.problem import SearchProblem

    names = registry.list_problems()
    assert len(names) >= 14
    for name in names:
        problem = SearchProblem.from_nkibench(name, "small")
        shown = reference_for_agents(problem.reference_source)
        assert "adversar" not in shown.lower(), name
        assert "adversar" not in problem.baseline_source.lower(), name
        assert "def forward" in shown and "def get_inputs" in shown, name
    # matmul's cancellation constant serves only the adversarial generator: gone with it
    matmul = reference_for_agents(SearchProblem.from_nkibench("matmul", "small").reference_source)
    assert "CANCEL" not in matmul


def test_constants_shared_with_the_reference_stay():
    src = ("import numpy as np\n\nM = 4\n# scale of the hostile rows\nBIG = 1e30\n\n\ndef get_inputs():\n"
           "    return [np.ones(M)]\n\n\ndef get_adversarial_inputs():  # adversarial rows\n"
           "    return [[np.full(M, BIG)]]\n")
    shown = reference_for_agents(src)
    assert "M = 4" in shown and "BIG" not in shown and "hostile" not in shown and "adversarial" not in shown


# -- the answer corpus (tests/data/answer_corpus.yaml): both directions --------------------------------
def _corpus() -> dict[str, list[str]]:
    from pathlib import Path

    import yaml
    return yaml.safe_load((Path(__file__).parent / "data" / "answer_corpus.yaml").read_text())


CORPUS = _corpus()


@pytest.mark.parametrize("text", CORPUS["planner_refusals"])
def test_corpus_refusals_are_not_plans(text):
    with pytest.raises(UnusableOutputError, match="refused"):
        parse_plan(text)


@pytest.mark.parametrize("text", CORPUS["planner_no_plan"])
def test_corpus_nothing_to_do_is_not_a_plan(text):
    with pytest.raises(UnusableOutputError, match="refused|proposed no step"):
        parse_plan(text)


@pytest.mark.parametrize("text", CORPUS["plans"])
def test_corpus_real_plans_pass(text):
    parsed = parse_plan(text)
    assert parsed.text == text.strip()


@pytest.mark.parametrize("text", CORPUS["summarizer_not_found"])
def test_corpus_no_difference_is_not_a_lesson(text):
    assert not parse_summary(text).found


@pytest.mark.parametrize("text", CORPUS["summarizer_refusals"])
def test_corpus_summarizer_refusals_are_unusable(text):
    with pytest.raises(UnusableOutputError, match="refused"):
        parse_summary(text)


@pytest.mark.parametrize("text", CORPUS["lessons"])
def test_corpus_real_lessons_pass(text):
    parsed = parse_summary(text)
    assert parsed.found and parsed.title != "No optimization found"
