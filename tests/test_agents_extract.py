"""Code extraction from messy LLM answers."""
from __future__ import annotations

import ast

from accelopt_nb.agents.extract import (extract_code, find_code_blocks, first_bold,
                                         normalize_kernel_source, split_reasoning)

KERNEL_A = """import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(x))
    return out"""

KERNEL_B = KERNEL_A.replace("nl.load(x)", "nl.exp(nl.load(x))")


def fence(code: str, tag: str = "python", ticks: str = "```") -> str:
    return f"{ticks}{tag}\n{code}\n{ticks}"


def test_single_fenced_block():
    r = extract_code("Here it is:\n" + fence(KERNEL_A) + "\nDone.")
    assert r.ok and r.method == "fenced"
    assert r.code.strip() == KERNEL_A.strip()
    assert r.raw.startswith("Here it is")


def test_last_complete_block_wins_when_model_reasons_first():
    text = ("First, a sketch of the current loop:\n" + fence(KERNEL_A) +
            "\nThat reloads x. The optimized kernel:\n" + fence(KERNEL_B) + "\n")
    r = extract_code(text)
    assert r.ok and "nl.exp" in r.code and r.n_blocks == 2


def test_trailing_non_kernel_block_is_skipped():
    text = fence(KERNEL_B) + "\nRun it with:\n" + fence("pytest -q", tag="bash") + "\n" + fence("x = 1")
    r = extract_code(text)
    assert r.ok and "nl.exp" in r.code


def test_py_and_python3_and_untagged_fences():
    for tag in ("py", "python3", "", "Python"):
        r = extract_code(fence(KERNEL_B, tag=tag))
        assert r.ok, tag
        assert "nl.exp" in r.code


def test_unterminated_final_fence_is_recovered():
    text = "Plan applied.\n```python\n" + KERNEL_B + "\n"
    r = extract_code(text)
    assert r.ok and r.method == "fenced-unterminated"
    assert any("closing fence" in n for n in r.notes)


def test_truncated_unterminated_block_is_rejected_with_a_reason():
    text = "```python\n" + KERNEL_B[: KERNEL_B.index("nl.store") + 12]
    r = extract_code(text)
    assert not r.ok
    assert "syntax error" in r.error


def test_block_with_syntax_error_falls_back_to_earlier_valid_block():
    broken = KERNEL_B.replace("def kernel(x):", "def kernel(x)")
    r = extract_code(fence(KERNEL_A) + "\n" + fence(broken))
    assert r.ok and "nl.exp" not in r.code


def test_no_code_block():
    r = extract_code("I could not find any optimization.")
    assert not r.ok and r.error == "no code block in the response"
    assert extract_code("").error == "empty response"
    assert extract_code(None).error == "empty response"


def test_unfenced_module_is_accepted():
    r = extract_code(KERNEL_B)
    assert r.ok and r.method == "unfenced"


def test_think_section_is_ignored_in_favor_of_the_answer():
    text = "<think>maybe like this:\n" + fence(KERNEL_B) + "\nno wait.</think>\nFinal:\n" + fence(KERNEL_A)
    r = extract_code(text)
    assert r.ok and "nl.exp" not in r.code
    # Code only inside the reasoning is still used, and flagged.
    r2 = extract_code("<think>\n" + fence(KERNEL_B) + "\n</think>\nSee above.")
    assert r2.ok and any("reasoning" in n for n in r2.notes)


def test_four_backtick_fence_containing_triple_backticks():
    code = KERNEL_A + '\n\nDOC = """\n```\nnot a fence\n```\n"""'
    r = extract_code(fence(code, ticks="````"))
    assert r.ok and "not a fence" in r.code


def test_tilde_fence_and_indented_fence():
    assert extract_code(fence(KERNEL_B, ticks="~~~")).ok
    indented = "1. The kernel:\n" + "\n".join("   " + ln if ln else "" for ln in fence(KERNEL_B).splitlines())
    r = extract_code(indented)
    assert r.ok
    ast.parse(r.code)


def test_entry_point_aliased_and_imports_added():
    body = """@nki.jit
def optimized_kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nisa.activation(op=nl.exp, data=nl.load(x)))
    return out"""
    r = extract_code(fence(body))
    assert r.ok
    tree = ast.parse(r.code)
    names = {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets}
    assert "kernel" in names
    assert "import neuronxcc.nki.isa as nisa" in r.code
    assert "import neuronxcc.nki as nki" in r.code
    assert "import numpy as np" not in r.code  # np is not used, so not added
    assert len(r.notes) == 2


def test_module_split_across_blocks_is_joined():
    helpers = "import neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\nTILE = 128"
    kern = "@nki.jit\ndef kernel(x):\n    return x"
    # The kernel block alone parses and defines the kernel, so the last block wins on its own ...
    r = extract_code(fence(helpers) + "\n" + fence(kern))
    assert r.ok and r.method == "fenced"
    # ... and a block that does not parse alone but does joined triggers the join fallback.
    kern_cont = "    return x"
    r2 = extract_code(fence(helpers + "\n@nki.jit\ndef kernel(x):\n    y = x") + "\n" + fence(kern_cont))
    assert r2.ok


def test_find_code_blocks_reports_completeness_and_lines():
    blocks = find_code_blocks("a\n```py\nx=1\n```\nb\n```\ny=2")
    assert [(b.lang, b.code, b.complete, b.line) for b in blocks] == [("py", "x=1", True, 2), ("", "y=2", False, 6)]


def test_split_reasoning_and_first_bold():
    assert split_reasoning("<think>a</think>b") == ("a", "b")
    assert split_reasoning("<think>still thinking") == ("still thinking", "")
    assert split_reasoning("plain") == ("", "plain")
    assert first_bold("x **Hoist the\n load** y **other**") == "Hoist the load"
    assert first_bold("nothing") is None


def test_normalize_keeps_existing_kernel_untouched():
    code, notes = normalize_kernel_source(KERNEL_A)
    assert notes == [] and code.strip() == KERNEL_A.strip()
