"""Every baseline kernel is correct on the small preset; every adversarial generator catches a cheat.

The cheating kernels in ``tests/fixtures/cheats/<problem>_<shortcut>.py`` each take a shortcut that
the paper's five random seeds cannot see (a softmax max over the first tile, a dropped epsilon,
bf16x3 matmul emulation, an unstable sigmoid rewrite, ...). The bench evaluator reports ``cheat``
only when a kernel passes every seed and then fails an adversarial input, so one run per cheat
proves both halves.
"""
from __future__ import annotations

from pathlib import Path

import pytest

import nkibench
from accelopt_nb.bench import PAPER_SEEDS, BenchCase, simulate_case

CHEATS = Path(__file__).parent / "fixtures" / "cheats"


def _problem_of(cheat: Path) -> str:
    names = [n for n in nkibench.list_problems() if cheat.stem.startswith(n + "_")]
    return max(names, key=len)


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
    assert outcome.profile["latency"] > 0


def test_every_problem_has_a_cheat_fixture():
    covered = {_problem_of(p) for p in CHEATS.glob("*.py")}
    assert covered == set(nkibench.list_problems())


@pytest.mark.parametrize("cheat", sorted(CHEATS.glob("*.py")), ids=lambda p: p.stem)
def test_adversarial_inputs_catch_the_cheat(cheat):
    outcome = simulate_case(_case(_problem_of(cheat), cheat, seeds=PAPER_SEEDS, adversarial=True))
    assert outcome.status == "cheat", f"{cheat.stem}: {outcome.status}: {outcome.message}"
    seed_errors = [v for k, v in outcome.errors.items() if k.startswith("seed")]
    assert len(seed_errors) == 5                            # passed all of the paper's seeds ...
    assert any(k.startswith("adversarial") for k in outcome.errors)   # ... and failed an adversarial input


def test_cheat_kernels_are_labelled():
    for p in CHEATS.glob("*.py"):
        assert p.read_text().lstrip('"').startswith("CHEAT (test fixture)"), p.name


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
    pct = 100 * problem.peak("paper").ms / outcome.profile["latency"]
    assert 10 < pct < 100, f"{name}: {pct:.1f}% of peak"   # a baseline, below the roofline, with headroom
