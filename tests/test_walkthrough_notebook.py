"""The magics-and-panel walkthrough runs top to bottom offline, against the fake model it starts itself."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "11_magics_and_panel.ipynb"


@pytest.mark.slow
def test_walkthrough_runs_offline_and_its_lesson_holds(tmp_path, monkeypatch):
    papermill = pytest.importorskip("papermill")
    monkeypatch.setenv("ACCELOPT_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "out.ipynb"
    papermill.execute_notebook(str(NOTEBOOK), str(out), cwd=str(NOTEBOOK.parent), kernel_name="python3",
                               progress_bar=False, parameters={"run_dir": str(tmp_path / "run")})
    nb = json.loads(out.read_text())
    outputs = [o for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])]
    html = "".join("".join(o.get("data", {}).get("text/html", "")) for o in outputs)
    text = "".join("".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", "")) for o in outputs)
    assert "% of peak" in html and "leaderboard of matmul" in html and "accelopt-diff" in html
    assert "throughput-bound)" in html                                          # the bound of % of peak
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= 2          # timeline and progress plot
    assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outputs)  # the panel
    assert "not a real LLM" in text and "your kernel: 1." in text               # the fake model; the lesson's check
    assert "FAILED" not in html
    # The one failure shown is the fake model's deliberately wrong ONEPASS kernel: wrong numbers, no lost calls.
    failures = re.findall(r"<div class='accelopt-failure'.*?</div>", html)
    assert failures and all(re.search(r"<b>kernels: \d+ kernel incorrect</b>", f) for f in failures), failures
    assert all("relative L2 error" in f and "LLM call" not in f for f in failures), failures
    assert "HBox(children" not in text                                          # static viewers read the progress
    assert list((tmp_path / "run").glob("best_kernel-*.py")) and list((tmp_path / "run").glob("report-*.json"))
