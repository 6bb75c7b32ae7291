"""The teaching notebooks (0x_*) run top to bottom on the simulator, executed with papermill as in batch use.

The experiment notebooks (1x_*) need an LLM endpoint; tests/test_experiments.py runs them against the fake server.
"""
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(p.name for p in NOTEBOOKS.glob("0*.ipynb")))
def test_notebook_executes(name, tmp_path):
    papermill = pytest.importorskip("papermill")
    out = tmp_path / name
    papermill.execute_notebook(str(NOTEBOOKS / name), str(out), cwd=str(NOTEBOOKS), kernel_name="python3",
                               progress_bar=False, parameters={"preset": "small"})
    import nbformat
    nb = nbformat.read(out, as_version=4)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "% of peak" in text
