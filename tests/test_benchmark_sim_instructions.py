"""benchmarks/sim_instructions.py counts a run's instructions under callgrind (skipped without valgrind)."""
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _count(mode: str) -> float:
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "sim_instructions.py"), "--mode", mode,
                           "--shape", "200x600", "--runs", "1", "--warmup", "1"],
                          capture_output=True, text=True, cwd=ROOT, timeout=270)   # two calls: within the 600 s limit
    assert done.returncode == 0, done.stderr
    found = re.search(r"\| arange_mask \S+ \| \S+ \| ([\d.]+) \|", done.stdout)
    assert found, done.stdout
    return float(found.group(1))


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_a_run_with_values_executes_more_than_a_trace_only_run():
    trace, values = _count("trace"), _count("values")
    assert 0 < trace < values   # values do all a trace-only run does, and compute the tiles too
