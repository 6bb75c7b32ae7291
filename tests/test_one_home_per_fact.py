"""Each fact has one home; code elsewhere imports it. This test finds copies written out again as literals."""
from __future__ import annotations

import io
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [*ROOT.glob("accelopt_nb/**/*.py"), *ROOT.glob("nkibench/*.py"), *ROOT.glob("benchmarks/*.py"),
           *ROOT.glob("scripts/*.py")]

# fact -> (its home, how a copy looks as a run of tokens)
FACTS = {
    "the hardware names (hwfiles.presets())": ("accelopt_nb/hwfiles.py", ["'trn1'", ",", "'trn2'"]),
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
# NeuronCore limits the simulator checks: read from the hardware configs (perf/hw/*.yaml) by sim.core.limits
LIMIT_NAMES = {"PMAX", "PSUM_BANKS", "PSUM_BANK_BYTES", "PSUM_FMAX", "GEMM_STATIONARY_FMAX", "GEMM_MOVING_FMAX"}


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
        copies += [f"{rel}: {name} = {value} (sim.core.limits reads it from perf/hw/*.yaml)"
                   for name, eq, value in zip(tokens, tokens[1:], tokens[2:])
                   if name in LIMIT_NAMES and eq == "=" and value.isdigit()]
    assert not copies, "import these facts from their homes:\n" + "\n".join(copies)


def test_the_homes_hold_what_the_test_looks_for():
    # if a home is renamed or rewritten, this test must be told, or it would pass vacuously
    for fact, (home, run) in FACTS.items():
        if home != "accelopt_nb/hwfiles.py":
            assert _contains(_tokens(ROOT / home), run), fact
    from accelopt_nb.perf.hardware import presets
    assert presets() == ["trn1", "trn2"]
    assert "2e-5" in _tokens(ROOT / TOLERANCE_HOME)


def test_the_simulators_limits_are_the_hardware_configs_numbers(tmp_path, monkeypatch):
    from accelopt_nb import hwfiles
    from accelopt_nb.errors import ConfigError
    from accelopt_nb.perf.hardware import load_hw
    from accelopt_nb.sim.core import limits

    for hw in hwfiles.presets():
        cfg = load_hw(hw)
        assert (limits.PMAX, limits.PSUM_BANKS, limits.PSUM_BANK_BYTES, limits.GEMM_STATIONARY_FMAX) == \
            (cfg.sbuf_partitions, cfg.psum_banks, cfg.psum_bank_bytes, cfg.pe_cols)
    # a config that disagrees is named, not silently checked against another core's rules
    for name, banks in (("trn1", 8), ("trnx", 16)):
        text = hwfiles.preset_file("trn1").read_text().replace("psum_banks: 8", f"psum_banks: {banks}")
        (tmp_path / f"{name}.yaml").write_text(text)
    monkeypatch.setattr(hwfiles, "HW_DIR", tmp_path)
    with pytest.raises(ConfigError, match="trn1 and trnx disagree on psum_banks \\(8 vs 16\\)"):
        limits._read()
