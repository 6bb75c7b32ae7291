"""Each fact has one home; code elsewhere imports it. This test finds copies written out again as literals."""
from __future__ import annotations

import io
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [*ROOT.glob("accelopt_nb/**/*.py"), *ROOT.glob("nkibench/*.py"), *ROOT.glob("benchmarks/*.py"),
           *ROOT.glob("scripts/*.py")]

# fact -> (its home, how a copy looks as a run of tokens)
FACTS = {
    "the hardware names (perf.hardware.presets())": ("accelopt_nb/perf/hardware.py", ["'trn1'", ",", "'trn2'"]),
    "the paper's seeds (evaluation.job.PAPER_SEEDS)": ("accelopt_nb/evaluation/job.py",
                                                      ["0", ",", "21", ",", "42", ",", "63", ",", "84"]),
    "the search phases (search.state.PHASES)": ("accelopt_nb/search/state.py",
                                                ["'plan'", ",", "'execute'", ",", "'evaluate'", ",", "'select'"]),
    "the agent roles (agents.prompts.ROLES)": ("accelopt_nb/agents/prompts.py",
                                               ["'planner'", ",", "'executor'", ",", "'summarizer'"]),
    "the fidelity levels (evaluation.job.FIDELITIES)": ("accelopt_nb/evaluation/job.py",
                                                       ["'full'", ",", "'screen'", ",", "'confirm'"]),
}
# the default tolerance (nkibench.problem.DEFAULT_TOLERANCE) as a number; a task's own tolerance may differ
TOLERANCE_HOME = "nkibench/problem.py"
TOLERANCE_ALLOWED = {"benchmarks/real_kernels.py"}   # the rtol of one public task, not the default


def _tokens(path: Path) -> list[str]:
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if tok.type in (tokenize.STRING, tokenize.NUMBER, tokenize.OP, tokenize.NAME):
            out.append(tok.string.replace('"', "'") if tok.type == tokenize.STRING else tok.string)
    return out


def _contains(tokens: list[str], run: list[str]) -> bool:
    n = len(run)
    return any(tokens[i:i + n] == run for i in range(len(tokens) - n + 1))


def test_facts_are_imported_not_copied():
    copies = []
    for path in SOURCES:
        rel = path.relative_to(ROOT).as_posix()
        tokens = _tokens(path)
        for fact, (home, run) in FACTS.items():
            if rel != home and _contains(tokens, run):
                copies.append(f"{rel}: {fact}")
        if rel != TOLERANCE_HOME and rel not in TOLERANCE_ALLOWED and any(
                t in ("2e-5", "2e-05", "2.0e-5") for t in tokens):
            copies.append(f"{rel}: the default tolerance (nkibench.problem.DEFAULT_TOLERANCE)")
    assert not copies, "import these facts from their homes:\n" + "\n".join(copies)


def test_the_homes_hold_what_the_test_looks_for():
    # if a home is renamed or rewritten, this test must be told, or it would pass vacuously
    for fact, (home, run) in FACTS.items():
        if home != "accelopt_nb/perf/hardware.py":
            assert _contains(_tokens(ROOT / home), run), fact
    from accelopt_nb.perf.hardware import presets
    assert presets() == ["trn1", "trn2"]
    assert "2e-5" in _tokens(ROOT / TOLERANCE_HOME)
