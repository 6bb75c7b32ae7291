"""The teaching notebooks (0x_*) as a learner gets them: they run top to bottom on the simulator with every
exercise unanswered, each check cell says so instead of raising, and every claim the text makes about the
notebook's own numbers holds (a claim that does not raises ClaimError, which fails the run).

With the reference answers they run inside ``accelopt reproduce --smoke`` (tests/test_reproduce.py); the
search notebooks of the reproduction run there too, against the package's offline fake model.
"""
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
NO_CLAIMS = {"05_agent_step_by_hand.ipynb"}     # its one number is the exercise's (the learner's kernel)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(p.name for p in NOTEBOOKS.glob("0*.ipynb")))
def test_teaching_notebook_runs_unanswered(name, tmp_path, monkeypatch):
    papermill = pytest.importorskip("papermill")
    import nbformat

    from accelopt_nb.teaching.notebook import exercise_ids

    monkeypatch.setenv("ACCELOPT_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / name
    papermill.execute_notebook(str(NOTEBOOKS / name), str(out), cwd=str(NOTEBOOKS), kernel_name="python3",
                               progress_bar=False, parameters={"out_dir": str(tmp_path / "fig")})
    nb = nbformat.read(out, as_version=4)
    text = "".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/plain", ""))
                   for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    for eid in exercise_ids(nb):
        assert f"WRONG (exercise {eid})" in text      # unanswered (or the given skeleton): not right yet
    assert "RIGHT" not in text
    claims = sum("claim(" in c.source for c in nb.cells if c.cell_type == "code")
    if name not in NO_CLAIMS:
        assert claims and text.count("\u2714") >= claims     # every claim cell ran, each claim shown ticked
