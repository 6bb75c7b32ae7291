"""What counts as an answer: refusals, "No optimization found", harmony channels, prompt sets."""
from __future__ import annotations

import pytest

from accelopt_nb.agents import Executor, Planner, parse_plan, parse_summary, split_reasoning
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


def test_paper_prompt_set_has_api_facts_and_memory_but_no_optimization_advice():
    ref = "import numpy as np\n\ndef forward(x):\n    return x\n"
    kw = dict(problem_name="p", reference_source=ref, kernel_source="def kernel(x): pass", profile_lines=["latency: 1"])
    paper = Planner(prompt_set="paper").messages(**kw)
    extended = Planner(prompt_set="extended").messages(**kw)
    paper_text = paper[0]["content"] + paper[1]["content"]
    extended_text = extended[0]["content"] + extended[1]["content"]
    assert "nc_matmul(stationary, moving)" in paper_text and "Profile fields" in paper_text
    for advice in ("reuse one stationary tile", "good kernels keep several", "retiling (larger tiles"):
        assert advice not in paper_text and advice in extended_text
    ex = Executor(prompt_set="paper").messages(problem_name="p", reference_source=ref, kernel_source="k", plan="x")
    assert "good kernels keep several" not in ex[0]["content"] and "affine_range" in ex[0]["content"]


def test_the_adversarial_generator_is_hidden_from_the_agents_unless_asked():
    src = ("import numpy as np\n\n\ndef forward(x):\n    return x\n\n\ndef get_adversarial_inputs():\n"
           "    return [[np.zeros(4)]]\n\n\ndef transform_nki_outputs(k, r):\n    return (k,)\n")
    shown = reference_for_agents(src)
    assert "adversarial" not in shown and "def forward" in shown and "def transform_nki_outputs" in shown
    assert reference_for_agents(src, show_adversarial=True) == src
