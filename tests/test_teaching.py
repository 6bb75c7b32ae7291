"""The teaching course's exercise checks: RIGHT for the reference answers, WRONG (with the reason) otherwise."""
from __future__ import annotations

from pathlib import Path

import pytest

from accelopt_nb.errors import ConfigError
from accelopt_nb.kernels import kernel_path
from accelopt_nb.sim import load_kernel
from accelopt_nb.teaching import check
from accelopt_nb.teaching.answers import REFERENCE_ANSWERS
from accelopt_nb.teaching.checks import ExerciseError
from accelopt_nb.teaching.notebook import exercise_ids, fill_exercises

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def test_value_checks_say_right_and_wrong():
    assert check("1.1", 128).right and not check("1.1", 64).right
    assert check("1.3", 512).right and not check("1.3", 2048).right
    assert check("2.2", "memory").right and not check("2.2", "compute").right
    assert check("3.2", 32).right and not check("3.2", 4).right   # M = 4096
    assert "WRONG (exercise 1.1)" in str(check("1.1", 64))


def test_an_unanswered_exercise_is_wrong_not_an_error():
    v = check("1.1", ...)
    assert not v.right and "no answer yet" in v.message


def test_strict_raises_on_a_wrong_answer_and_unknown_ids_are_named():
    with pytest.raises(ExerciseError, match="WRONG \\(exercise 1.3\\)"):
        check("1.3", 4096, strict=True)
    with pytest.raises(ConfigError, match="no exercise '9.9'"):
        check("9.9", 1)


def test_roofline_exercise_accepts_the_formula_and_rejects_seconds():
    import nkibench
    peak = nkibench.get_problem("silu").peak("small", "trn1")
    assert check("2.1", peak.ms).right
    assert not check("2.1", peak.seconds).right     # seconds, not milliseconds


def test_kernel_exercises_check_results_and_speed():
    add = REFERENCE_ANSWERS["1.2"]
    ns: dict = {}
    exec(add, ns)
    assert check("1.2", ns["add_source"]).right
    # the multiply-instead-of-add kernel computes the wrong thing
    assert not check("1.2", ns["add_source"].replace("nl.add(", "nl.multiply(")).right
    fused = kernel_path("silu_fused").read_text()
    assert check("4.1", fused).right
    import nkibench
    slow = check("4.1", nkibench.get_problem("silu").baseline_source())
    assert not slow.right and "1.3x" in slow.message            # correct but the baseline's speed
    hoisted = load_kernel(kernel_path("matmul_tutorial"), name="matmul_hoisted")
    blocked = load_kernel(kernel_path("matmul_tutorial"), name="matmul_blocked_free")
    assert check("3.1", blocked).right and not check("3.1", hoisted).right   # hoisting alone is ~1.05x here


def test_a_kernel_that_breaks_a_rule_is_wrong_with_the_rule():
    ns: dict = {}
    exec(REFERENCE_ANSWERS["1.2"], ns)
    too_tall = ns["add_source"].replace("// 128", "// 256").replace("* 128", "* 256").replace("+ 1) * 128", "+ 1) * 256")
    v = check("1.2", too_tall)
    assert not v.right and "partition" in v.message


def test_every_notebook_exercise_has_a_reference_answer_and_a_check():
    import nbformat
    ids = []
    for nb_path in sorted(NOTEBOOKS.glob("0*.ipynb")):
        nb = nbformat.read(nb_path, as_version=4)
        found = exercise_ids(nb)
        assert found, f"{nb_path.name} has no exercises"
        text = "\n".join(c.source for c in nb.cells)
        for eid in found:
            assert f'check("{eid}"' in text, f"{nb_path.name}: exercise {eid} has no check cell"
        filled = fill_exercises(nb, {found[0]: "answer = 1\n"})
        assert "answer = 1" in "\n".join(c.source for c in filled.cells)
        ids += found
    assert sorted(ids) == sorted(REFERENCE_ANSWERS)


def _run(nb, tmp_path, parameters):
    papermill = pytest.importorskip("papermill")
    import nbformat
    tmp_path.mkdir(parents=True, exist_ok=True)
    src = tmp_path / "in.ipynb"
    nbformat.write(nb, src)
    out = tmp_path / "out.ipynb"
    try:
        papermill.execute_notebook(str(src), str(out), cwd=str(NOTEBOOKS), kernel_name="python3", progress_bar=False,
                                   parameters={"out_dir": str(tmp_path), **parameters})
    finally:
        executed = nbformat.read(out, as_version=4) if out.exists() else None
    return executed


def _outputs(nb) -> str:
    return "\n".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/plain", ""))
                     for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))


def test_basics_notebook_passes_with_the_reference_answers_and_fails_with_a_wrong_one(tmp_path):
    import nbformat
    nb = nbformat.read(NOTEBOOKS / "01_nki_basics.ipynb", as_version=4)
    right = _outputs(_run(fill_exercises(nb, REFERENCE_ANSWERS), tmp_path / "right", {"strict": True}))
    assert right.count("RIGHT (exercise") == 3 and "WRONG" not in right
    wrong_answers = {**REFERENCE_ANSWERS, "1.3": "psum_free_fp32 = 2048\n"}
    wrong = _outputs(_run(fill_exercises(nb, wrong_answers), tmp_path / "wrong", {"strict": False}))
    assert "WRONG (exercise 1.3)" in wrong and wrong.count("RIGHT (exercise") == 2
    papermill = pytest.importorskip("papermill")
    with pytest.raises(papermill.PapermillExecutionError, match="ExerciseError"):
        _run(fill_exercises(nb, wrong_answers), tmp_path / "strict", {"strict": True})
