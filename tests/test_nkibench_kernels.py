"""Every baseline kernel is correct on the small preset; every adversarial generator catches a cheat.

The cheating kernels (``tests/cheats.py``: files in ``tests/fixtures/cheats/`` and small edits of the
baselines listed in ``edits.yaml``) each take a shortcut that
the paper's five random seeds cannot see (a softmax max over the first tile, a dropped epsilon,
bf16x3 matmul emulation, an unstable sigmoid rewrite, ...). The bench evaluator reports ``cheat``
only when a kernel passes every seed and then fails an adversarial input, so one run per cheat
proves both halves.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from cheats import all_cheats

import nkibench
from accelopt_nb.bench import BenchCase, simulate_case
from accelopt_nb.evaluation.job import PAPER_SEEDS

CHEATS = all_cheats()


def _case(problem: str, kernel_path: Path, **kw) -> BenchCase:
    return BenchCase(problem=nkibench.get_problem(problem), kernel_source=kernel_path.read_text(),
                     preset="small", kernel_path=kernel_path, **kw)


@pytest.mark.parametrize("name", nkibench.list_problems())
def test_baseline_correct_on_small_preset(name):
    problem = nkibench.get_problem(name)
    outcome = simulate_case(_case(name, problem.baseline_path, seeds=PAPER_SEEDS, adversarial=True))
    assert outcome.status == "correct", outcome.message
    assert len(outcome.errors) == 5 + len(problem.task("small").adversarial_inputs())
    assert outcome.max_error < problem.tolerance
    assert outcome.profile["latency_ms"] > 0


def test_every_problem_has_a_cheat_fixture():
    covered = {c.problem for c in CHEATS.values()}
    assert covered == set(nkibench.list_problems())


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_adversarial_inputs_catch_the_cheat(name):
    cheat = CHEATS[name]
    # the precision gate would reject the bf16/fp16 cheats first; switch it off to test the inputs alone
    case = BenchCase(problem=nkibench.get_problem(cheat.problem), kernel_source=cheat.source, preset="small",
                     seeds=PAPER_SEEDS, adversarial=True, check_precision=False)
    outcome = simulate_case(case)
    assert outcome.status == "cheat", f"{name}: {outcome.status}: {outcome.message}"
    seed_errors = [v for k, v in outcome.errors.items() if k.startswith("seed")]
    assert len(seed_errors) == 5                            # passed all of the paper's seeds ...
    assert any(k.startswith("adversarial") for k in outcome.errors)   # ... and failed an adversarial input


def test_cheat_kernels_are_labelled():
    for name, cheat in CHEATS.items():
        assert cheat.source.lstrip('"').startswith("CHEAT (test fixture)"), name


@pytest.mark.slow
@pytest.mark.parametrize("name", ["silu", "rope_single_freq_apply", "mamba", "rmsnorm_matmul"])
def test_baseline_correct_on_paper_preset(name):
    problem = nkibench.get_problem(name)
    case = BenchCase(problem=problem, kernel_source=problem.baseline_source(), preset="paper",
                     seeds=(42,), adversarial=False, kernel_path=problem.baseline_path)
    outcome = simulate_case(case)
    assert outcome.status == "correct", outcome.message


@pytest.mark.slow
@pytest.mark.parametrize("name", nkibench.list_problems())
def test_baseline_profiles_on_paper_preset_trace_only(name):
    problem = nkibench.get_problem(name)
    case = BenchCase(problem=problem, kernel_source=problem.baseline_source(), preset="paper", check=False,
                     kernel_path=problem.baseline_path)
    outcome = simulate_case(case)
    assert outcome.status == "profiled" and outcome.correct is None
    pct = 100 * problem.peak("paper").ms / outcome.profile["latency_ms"]
    assert 10 < pct < 100, f"{name}: {pct:.1f}% of peak"   # a baseline, below the roofline, with headroom


@pytest.mark.parametrize("name", ["matmul_bf16x3", "rope_single_freq_apply_fp16_split"])
def test_the_precision_gate_rejects_narrow_dtype_cheats_on_the_first_seed(name):
    cheat = CHEATS[name]
    case = BenchCase(problem=nkibench.get_problem(cheat.problem), kernel_source=cheat.source, preset="small")
    outcome = simulate_case(case)
    assert outcome.status == "incorrect" and "precision lowering" in outcome.message
