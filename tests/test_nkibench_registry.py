"""User problem directories, problem.yaml validation and the safe formula evaluator."""
from __future__ import annotations

import textwrap

import numpy as np
import pytest

import nkibench
from accelopt_nb.errors import ProblemError
from nkibench import expr
from nkibench_helpers import TASK, YAML, make_problem


@pytest.fixture
def user_dir(tmp_path):
    root = tmp_path / "my_problems"
    make_problem(root)
    yield root
    nkibench.unregister_problem_dir(root)


def test_register_a_user_problem_dir(user_dir):
    assert nkibench.register_problem_dir(user_dir) == ["double"]
    assert "double" in nkibench.list_problems()
    problem = nkibench.get_problem("double")
    assert problem.tolerance == 1e-6
    assert problem.shapes("small") == {"M": 128, "N": 256}
    task = problem.task("small")
    x = task.get_inputs(0)[0]
    assert x.shape == (128, 256)
    assert problem.peak("paper", "trn1").bound == "memory"
    nkibench.unregister_problem_dir(user_dir)
    assert "double" not in nkibench.list_problems()


def test_user_problem_runs_in_the_bench(user_dir):
    from accelopt_nb.bench import run_bench
    nkibench.register_problem_dir(user_dir)
    df = run_bench(["double"], preset="small", progress=False)
    row = df.iloc[0]
    assert row["status"] == "correct" and row["correct"]
    assert row["max_rel_error"] == 0.0                      # x * 2 is exact in fp32
    assert row["pct_peak"] == pytest.approx(100 * row["peak_ms"] / row["latency_ms"])


def test_env_var_adds_problem_dirs(user_dir, monkeypatch):
    monkeypatch.setenv(nkibench.ENV_VAR, str(user_dir))
    assert "double" in nkibench.list_problems()
    assert user_dir.resolve() in nkibench.problem_dirs()


def test_duplicate_names_are_refused_unless_overriding(tmp_path):
    root = tmp_path / "dupes"
    make_problem(root, "silu", YAML.format(name="silu"))
    with pytest.raises(ProblemError, match="defined twice"):
        nkibench.register_problem_dir(root)
    nkibench.unregister_problem_dir(root)
    try:
        nkibench.register_problem_dir(root, override=True)
        assert nkibench.get_problem("silu").description == "Doubles a matrix."
    finally:
        nkibench.unregister_problem_dir(root)
    assert nkibench.get_problem("silu").description.startswith("The SiLU activation")


@pytest.mark.parametrize("mutate, message", [
    (lambda y: y.replace("name: bad", "name: other"), "must equal the folder name"),
    (lambda y: y.replace("description: Doubles a matrix.\n", ""), "missing key"),
    (lambda y: y + "colour: blue\n", "unknown key"),
    (lambda y: y.replace('hbm_bytes: "8*M*N"', 'hbm_bytes: "8*M*Q"'), "unknown name 'Q'"),
    (lambda y: y.replace('hbm_bytes: "8*M*N"', 'hbm_bytes: "__import__(1)"'), "unsupported construct"),
    (lambda y: y.replace("small: 128", "small: 12.5"), "must be an integer"),
    (lambda y: y.replace('  mm_flops: "0"\n', ""), "exactly the keys"),
])
def test_malformed_problem_yaml(tmp_path, mutate, message):
    folder = make_problem(tmp_path, "bad", mutate(YAML.format(name="bad")))
    with pytest.raises(ProblemError, match=message):
        nkibench.load_problem_dir(folder)


def test_task_must_define_every_shape_constant(tmp_path):
    folder = make_problem(tmp_path, "noconst")
    (folder / "task.py").write_text(TASK.replace("N = 2048\n", ""))
    problem = nkibench.load_problem_dir(folder)
    with pytest.raises(ProblemError, match="does not define the shape constant"):
        problem.task("small")


def test_materialise_replaces_only_module_level_constants():
    from nkibench.taskgen import materialize_source
    src = textwrap.dedent("""\
        M = 4096  # rows
        N = 2 * 1024


        def f():
            M = 3
            return M, N
        """)
    out = materialize_source(src, {"M": 8, "N": 16}, origin="t.py")
    assert "M = 8  # rows" in out and "N = 16" in out and "    M = 3" in out


def test_expression_evaluator():
    assert expr.evaluate("4*(M*N + N*K + M*K)", {"M": 2, "N": 3, "K": 5}) == 4 * (6 + 15 + 10)
    assert expr.evaluate("M % 128 == 0 and K <= 128", {"M": 256, "K": 64}) is True
    assert expr.evaluate("ceil_div(M, 128)", {"M": 200}) == 2
    with pytest.raises(ProblemError, match="unsupported"):
        expr.evaluate("M.__class__", {"M": 1})
    with pytest.raises(ProblemError, match="cannot parse"):
        expr.evaluate("M +", {"M": 1})


def test_problem_api_surface():
    p = nkibench.get_problem("bmm_softmax")
    assert p.param_names == ("B", "M", "K", "N")
    assert set(p.presets) >= {"paper", "small"}
    assert "@nki.jit" in p.baseline_source()
    counts = p.counts("small")
    s = p.shapes("small")
    assert counts["vec_flops"] == 5 * s["B"] * s["M"] * s["N"]
    assert isinstance(nkibench.load_problem("bmm_softmax", "small").get_inputs(1)[0], np.ndarray)
