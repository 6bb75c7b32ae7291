"""The cheating kernels of the NKIBench tests: whole files, and small edits of a baseline (edits.yaml)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

import nkibench

CHEATS = Path(__file__).parent / "fixtures" / "cheats"


@dataclass(frozen=True)
class Cheat:
    name: str
    problem: str
    source: str


def _problem_of(stem: str) -> str:
    return max((n for n in nkibench.list_problems() if stem.startswith(n + "_")), key=len)


def _edited(name: str, spec: dict) -> Cheat:
    source = nkibench.get_problem(spec["problem"]).baseline_source()
    for old, new in spec["replace"]:
        count = source.count(old)
        assert count == 1, f"cheat {name}: {old!r} occurs {count} times in the {spec['problem']} baseline"
        source = source.replace(old, new)
    header = f'"""CHEAT (test fixture): {spec["problem"]} that {spec["shortcut"]}."""\n'
    return Cheat(name, spec["problem"], header + source)


def all_cheats() -> dict[str, Cheat]:
    cheats = {p.stem: Cheat(p.stem, _problem_of(p.stem), p.read_text()) for p in sorted(CHEATS.glob("*.py"))}
    for name, spec in yaml.safe_load((CHEATS / "edits.yaml").read_text()).items():
        cheats[name] = _edited(name, spec)
    return dict(sorted(cheats.items()))


def write_cheat(name: str, directory: Path) -> Path:
    """The cheat as a kernel file (for the CLI and run_bench's kernels= option)."""
    path = directory / f"{name}.py"
    path.write_text(all_cheats()[name].source)
    return path
