"""benchmarks/sim_speed.py runs as documented: each row in a process of its own or all in one, either heap."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _table(*args: str) -> str:
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "sim_speed.py"), "--shapes", "small",
                           "--only", "silu,arange_mask", "--arange-shape", "200x600", "--repeat", "1", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _row(out: str, name: str) -> list[str]:
    line = next(line for line in out.splitlines() if line.startswith(f"| {name} "))
    return [c.strip() for c in line.strip("|").split("|")]


@pytest.mark.parametrize("args, title", [((), "each row in a fresh process"),
                                         (("--in-process", "--heap", "reuse"), "all rows in one process")])
def test_sim_speed_table_rows(args, title):
    out = _table(*args)
    assert title in out.splitlines()[1]
    assert ("freed memory reused" in out) == ("reuse" in args)
    for name in ("ours/silu", "arange_mask 200x600"):
        cells = _row(out, name)
        assert len(cells) == 8, cells          # no failure text after the row
        numpy_s, values_s, trace_s, ratio_v, ratio_t, l2 = (float(cells[i]) for i in (2, 3, 4, 5, 6, 7))
        assert min(numpy_s, values_s, trace_s) >= 0 and ratio_v > 0 and ratio_t > 0   # printed rounded
        assert l2 < 1e-5                       # the simulated result matches NumPy
    assert re.search(r"geometric mean: values/np [\d.]+, trace/np [\d.]+ \(2 of 2 kernels ran\)", out)
    assert re.search(r"goal \(values <= 3x, trace-only <= 0.5x NumPy\): \d of 2 rows meet it", out)


def test_goal_line_names_the_rows_over_the_goal():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from sim_speed import Row, goal_line
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    rows = [Row("fast", t_numpy=1.0, t_values=2.9, t_trace=0.4),
            Row("slow values", t_numpy=1.0, t_values=3.2, t_trace=0.4),
            Row("slow trace", t_numpy=0.1, t_values=0.2, t_trace=0.06),
            Row("broken", failure="KernelError: boom")]
    line = goal_line(rows)
    assert line.startswith("goal (values <= 3x, trace-only <= 0.5x NumPy): 1 of 3 rows meet it; over: ")
    assert "slow values (values 3.2x)" in line and "slow trace (trace-only 0.60x)" in line
    assert "fast" not in line and "broken" not in line
