"""Every baseline kernel is correct on the small preset; every adversarial generator catches a cheat.

The cheating kernels (``tests/cheats.py``: files in ``tests/fixtures/cheats/`` and small edits of the
baselines listed in ``edits.yaml``) each take a shortcut that
the paper's five random seeds cannot see (a softmax max over the first tile, a dropped epsilon,
bf16x3 matmul emulation, an unstable sigmoid rewrite, ...). The bench evaluator reports ``cheat``
only when a kernel passes every seed and then fails an adversarial input, so one run per cheat
proves both halves. Kernels are judged in this process (trusted: the bench's own executor).
"""
from __future__ import annotations

import pytest
from cheats import all_cheats

import nkibench
from accelopt_nb.evaluation import EvalOptions, EvalResult, InProcessEvaluator, Status, make_job
from accelopt_nb.evaluation.job import PAPER_SEEDS
from accelopt_nb.evaluation.service import EvalService

CHEATS = all_cheats()
SERVICE = EvalService(InProcessEvaluator(), cache=False, dedupe=False)


def judge(problem: str, source: str, preset: str = "small", fidelity: str = "full", **options) -> EvalResult:
    return SERVICE.evaluate(make_job(problem, source, preset=preset, fidelity=fidelity,
                                     options=EvalOptions(**options)))


def errors(result: EvalResult) -> dict[str, float]:
    return {f"{c.kind} {c.index}": max(e for e in c.rel_errors if e is not None)
            for c in result.checks if any(e is not None for e in c.rel_errors)}


@pytest.mark.parametrize("name", nkibench.list_problems())
def test_baseline_correct_on_small_preset(name):
    problem = nkibench.get_problem(name)
    result = judge(name, problem.baseline_source(), seeds=PAPER_SEEDS, adversarial=True)
    assert result.status is Status.CORRECT, result.message
    assert len(errors(result)) == 5 + len(problem.task("small").adversarial_inputs())
    assert max(errors(result).values()) < problem.tolerance
    assert result.profile["latency_ms"] > 0


def test_every_problem_has_a_cheat_fixture():
    covered = {c.problem for c in CHEATS.values()}
    assert covered == set(nkibench.list_problems())


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_adversarial_inputs_catch_the_cheat(name):
    cheat = CHEATS[name]
    # the precision gate would reject the bf16/fp16 cheats first; switch it off to test the inputs alone
    result = judge(cheat.problem, cheat.source, seeds=PAPER_SEEDS, adversarial=True, check_precision=False)
    assert result.status is Status.CHEAT, f"{name}: {result.status}: {result.message}"
    seed_errors = [v for k, v in errors(result).items() if k.startswith("seed")]
    assert len(seed_errors) == 5                            # passed all of the paper's seeds ...
    assert any(k.startswith("adversarial") for k in errors(result))   # ... and failed an adversarial input


def test_cheat_kernels_are_labelled():
    for name, cheat in CHEATS.items():
        assert cheat.source.lstrip('"').startswith("CHEAT (test fixture)"), name


@pytest.mark.slow
@pytest.mark.parametrize("name", ["silu", "rope_single_freq_apply", "mamba", "rmsnorm_matmul"])
def test_baseline_correct_on_paper_preset(name):
    problem = nkibench.get_problem(name)
    result = judge(name, problem.baseline_source(), preset="paper", seeds=(42,), adversarial=False)
    assert result.status is Status.CORRECT, result.message


@pytest.mark.slow
@pytest.mark.parametrize("name", nkibench.list_problems())
def test_baseline_profiles_on_paper_preset_trace_only(name):
    problem = nkibench.get_problem(name)
    result = judge(name, problem.baseline_source(), preset="paper", fidelity="trace")
    assert result.status is Status.PROFILED and not result.checks
    pct = 100 * problem.peak("paper").ms / result.profile["latency_ms"]
    assert 10 < pct < 100, f"{name}: {pct:.1f}% of peak"   # a baseline, below the roofline, with headroom


@pytest.mark.parametrize("name", ["matmul_bf16x3", "rope_single_freq_apply_fp16_split"])
def test_the_precision_gate_rejects_narrow_dtype_cheats_on_the_first_seed(name):
    cheat = CHEATS[name]
    result = judge(cheat.problem, cheat.source)
    assert result.status is Status.INCORRECT and "precision lowering" in result.message
