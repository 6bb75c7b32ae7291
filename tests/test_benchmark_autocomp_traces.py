"""benchmarks/autocomp_traces.py on a trace file of our own (the real traces live in a clone of ucb-bar/autocomp)."""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import autocomp_traces  # noqa: E402

GOOD = '''
@nki.jit
def test(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.multiply(nl.load(a), 2.0))
    return out
'''
REFUSED = GOOD.replace("nl.multiply(nl.load(a), 2.0)", "nisa.tensor_copy(nl.load(a), engine=nisa.tensor_engine)")
LOST_NAME = GOOD.replace("nl.load(a)", "nl.load(b)")
BROKEN = GOOD.replace("return out", "  return out")


def test_each_candidate_runs_is_refused_or_has_damaged_text(tmp_path, monkeypatch):
    chain = "None"
    for code, ms in [(GOOD, 3.0), (REFUSED, 2.0), (LOST_NAME, 1.5), (BROKEN, 1.0), (GOOD.replace("2.0", "2.5"), 0.5)]:
        chain = f"CodeCandidate(parent={chain}, code={code!r}, score={ms})"
    (tmp_path / "t_trace.py").write_text(chain + "\n")
    assert [ms for _, ms in autocomp_traces.candidates(tmp_path / "t_trace.py")] == [3.0, 2.0, 1.5, 1.0, 0.5]
    monkeypatch.setattr(autocomp_traces, "TRACES", {"t_trace.py": ([(128, 8)], np.float32, {})})
    rows = autocomp_traces.check(tmp_path, [], values=True)
    assert [r["status"] for r in rows] == ["runs", "refused", "damaged text", "damaged text", "runs"]
    assert "tensor_copy" in rows[1]["error"]
    assert rows[0]["max_abs_diff_vs_baseline"] == 0.0 and rows[0]["matches_baseline"]
    assert rows[4]["max_abs_diff_vs_baseline"] > 0 and not rows[4]["matches_baseline"]
