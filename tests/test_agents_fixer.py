"""The fixer agent: what it is told about a failed kernel, its prompts, and its answers."""
from __future__ import annotations

import pytest

from accelopt_nb.agents import Fixer, PromptSet, failure_report, is_fixable
from accelopt_nb.errors import UnusableOutputError
from accelopt_nb.evaluation.result import CheckResult, EvalResult, Status

SOURCE = ("import neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\n\n\n@nki.jit\ndef kernel(x):\n"
          "    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)\n"
          "    r = nl.matmul(t, t, bogus=3)\n    return out\n")


def result(status: Status, **kw) -> EvalResult:
    base = dict(message="m", problem="silu", preset="small", backend="simulator", hw="trn1", kernel_sha256="x",
                evaluator_version="1", tolerance=2e-5)
    base.update(kw)
    return EvalResult(status=status, **base)


def test_a_build_error_report_names_line_api_rule_and_the_source_line():
    r = result(Status.BUILD_FAILED, message="kernel failed to build",
               error={"type": "UnsupportedAPIError", "message": "argument 'bogus': unknown keyword",
                      "api": "neuronxcc.nki.language.matmul", "file": "/tmp/x/kernel.py", "line": 8,
                      "rule": "API not supported"},
               checks=[CheckResult("seed", 0, False, [None], reason="UnsupportedAPIError")])
    report = failure_report(r, SOURCE)
    assert report.splitlines() == [
        "Verdict: build failed: kernel failed to build",
        "Error: UnsupportedAPIError at line 8 of kernel.py in `neuronxcc.nki.language.matmul`: "
        "argument 'bogus': unknown keyword",
        "Rule broken: API not supported",
        "Line 8: r = nl.matmul(t, t, bogus=3)"]
    assert is_fixable(r) and is_fixable(r.to_dict())


def test_an_incorrect_report_gives_each_outputs_error_against_the_tolerance_and_hides_adversarial_checks():
    r = result(Status.INCORRECT, message="incorrect on seed 0",
               checks=[CheckResult("seed", 0, False, [1.75, 3e-6], reason="output 0: relative L2 error 1.75"),
                       CheckResult("adversarial", 0, False, [0.5], reason="secret adversarial detail")])
    report = failure_report(r.to_dict(), SOURCE)
    assert "each output's relative L2 error must stay below 2e-05" in report
    assert "- random inputs (seed 0): FAILED; relative L2 error per output: [1.75, 3e-06]" in report
    assert "adversarial" not in report.lower()


@pytest.mark.parametrize("status", [Status.TIMEOUT, Status.OUT_OF_MEMORY, Status.CHEAT, Status.CORRECT])
def test_only_failures_the_source_explains_are_fixable(status):
    assert not is_fixable(result(status))


@pytest.mark.parametrize("prompt_set", ["extended", "paper"])
def test_fixer_prompts_show_the_failing_kernel_and_the_report(prompt_set):
    msgs = Fixer(prompt_set=prompt_set).messages(problem_name="silu", reference_source="def forward(x): ...",
                                                 kernel_source=SOURCE, report="Verdict: incorrect: REPORT",
                                                 plan="Double the tile.", attempt=2)
    system, user = msgs[0]["content"], msgs[1]["content"]
    assert SOURCE.strip() in user and "Verdict: incorrect: REPORT" in user
    assert "nc_matmul" in system  # the executor's knowledge
    if prompt_set == "extended":
        assert "Double the tile." in user and "repair attempt 2" in user and "failed its evaluation" in system
        assert "below 2e-05" in system
    else:  # the upstream fixer's structure: the wrong code, the log, the fixed function
        assert user.startswith("# Wrong code:") and "# Error log:" in user
        assert system == PromptSet().executor(problem_name="p", reference_source="r", kernel_source="k", plan="x",
                                              tolerance=2e-5, prompt_set="paper")[0]


def test_a_fixer_answer_is_a_kernel_or_unusable():
    got = Fixer.validate("The matmul call had a bad keyword.\n```python\n" + SOURCE.replace(", bogus=3", "")
                         + "```")
    assert got.ok and "bogus" not in got.code
    with pytest.raises(UnusableOutputError):
        Fixer.validate("I cannot fix this kernel.")
