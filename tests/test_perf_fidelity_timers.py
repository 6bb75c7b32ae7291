"""benchmarks/perf_fidelity.py compares each corpus row with the model quantity its timer spans (perf_model.md §2b)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from accelopt_nb.perf import estimate, load_hw

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import perf_corpus  # noqa: E402
import perf_fidelity  # noqa: E402

ADD = perf_corpus.KERNEL_HEADER + """
@nki.jit
def add(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a)
    y = nl.load(b)
    nl.store(out, nl.add(x, y))
    return out
"""


def _case(timer: str) -> perf_corpus.Case:
    inputs = [np.zeros((128, 512), np.float32), np.zeros((128, 512), np.float32)]
    return perf_corpus.Case("test-source", "held-out", "trn1", "test/add", timer, 0.02, "test", timer=timer,
                            build=perf_corpus._builder_source(ADD, "add.py", "add", inputs, {}), key=timer)


def test_a_timer_that_spans_the_start_and_stop_is_compared_with_the_launch_included():
    hw = load_hw("trn1")
    assert hw.launch_overhead_s > 0
    res = perf_fidelity.run_corpus([_case(t) for t in ("total_time", "nc_latency", "exec_time")],
                                   {"trn1": {"after": hw}}, None, progress=False)
    ms = {r["variant"]: r["after_ms"] for r in res["rows"]}
    kernel = estimate(_case("exec_time").trace(), hw)
    assert ms["exec_time"] == pytest.approx(kernel.latency, rel=1e-12)
    for t in ("total_time", "nc_latency"):        # neuron-profile total_time and neuron-bench NCL both include it
        assert ms[t] == pytest.approx(kernel.latency + 1e3 * hw.launch_overhead_s, rel=1e-12)
    assert res["rows"][0]["after_ratio"] == pytest.approx(ms["total_time"] / 0.02)


def test_every_corpus_row_names_a_timer_and_the_profiler_rows_include_the_start_and_stop():
    rows = perf_corpus.load_rows()
    assert rows and all(r["timer"] in perf_corpus.TIMERS for r in rows)
    for r in rows:      # the recorded method decides the timer
        if r["method"].startswith(("neuron-profile", "nki.benchmark")):
            assert perf_corpus.TIMERS[r["timer"]], (r["source"], r["variant"], r["method"])


def test_an_unknown_timer_is_refused_with_its_line(tmp_path):
    src = perf_corpus.CORPUS.read_text().splitlines()
    header, first = src[0], src[1]
    bad = tmp_path / "corpus.csv"
    bad.write_text(header + "\n" + first.replace(",nc_latency,", ",wall,") + "\n")
    with pytest.raises(ValueError, match=r"corpus.csv:2: timer 'wall'"):
        perf_corpus.load_rows(bad)


def test_a_dge_build_row_is_timed_with_the_dges_issue_cost_and_only_trn2_has_one(tmp_path):
    # 64 tiny loads: issue-bound when each DMA instruction costs the DGE's ~0.6 us (trn2's default flags)
    src = perf_corpus.KERNEL_HEADER + """
@nki.jit
def tiny(a):
    out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(64):
        nl.store(out[:, i:i + 1], nl.load(a[:, i:i + 1]))
    return out
"""
    def case(dge):
        return perf_corpus.Case("s", "held-out", "trn2", "f", str(dge), 0.1, "test", timer="exec_time", dge=dge,
                                build=perf_corpus._builder_source(src, "tiny.py", "tiny",
                                                                  [np.zeros((128, 64), np.float32)], {}), key="tiny")
    hw = load_hw("trn2")
    res = perf_fidelity.run_corpus([case(False), case(True)], {"trn2": {"after": hw}}, tmp_path, progress=False)
    ms = {r["variant"]: r["after_ms"] for r in res["rows"]}
    assert ms["True"] == pytest.approx(estimate(case(True).trace(tmp_path), load_hw(hw, {"dge": True})).latency)
    assert ms["True"] > 127 * hw.dma_issue_dge_s * 1e3 > 2 * ms["False"]      # 128 DMA instructions, one per slot
    header, first = perf_corpus.CORPUS.read_text().splitlines()[:2]
    assert first.startswith("autocomp-trn1,") and first.endswith(",off")
    bad = tmp_path / "corpus.csv"
    bad.write_text(header + "\n" + first[:-len("off")] + "on\n")
    with pytest.raises(ValueError, match=r"corpus.csv:2: dge 'on' must be 'off', or 'on' for a trn2 build"):
        perf_corpus.load_rows(bad)


def test_a_github_locator_reads_the_kernel_from_the_clone_given_and_skips_without_it(tmp_path):
    clone = tmp_path / "clone"
    (clone / "part1").mkdir(parents=True)
    (clone / "part1" / "k.py").write_text(perf_corpus.KERNEL_HEADER + """
@nki.jit
def matrix_transpose(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.add(nl.load(a), 1.0))
    return out
""")
    header = perf_corpus.CORPUS.read_text().splitlines()[0]
    row = ('s,held-out,trn2,cs149/transpose,t,github:someone/repo:part1/k.py::matrix_transpose,'
           '"{""m"": 128, ""n"": 512}",float32,0.05,nki.benchmark nc_latency,nc_latency,trn2,1 NC,?,test,off')
    corpus = tmp_path / "corpus.csv"
    corpus.write_text(header + "\n" + row + "\n")
    skipped: list[str] = []
    assert perf_corpus.load_cases(corpus=corpus, skipped=skipped) == []
    assert skipped == ["cs149/transpose:t (needs --clone someone/repo=DIR)"]
    (case,) = perf_corpus.load_cases(corpus=corpus, clones={"someone/repo": clone})
    assert case.kernel == "github:someone/repo:part1/k.py::matrix_transpose" and case.hw == "trn2"
    assert len(case.trace().instructions) > 0
    with pytest.raises(ValueError, match="is not a file"):
        perf_corpus.load_cases(corpus=corpus, clones={"someone/repo": tmp_path / "elsewhere"})


def _fake_accelopt(root: Path) -> Path:
    """A fake AccelOpt checkout: a placeholder baseline file per NKIBench task (load_cases lists the paper's 14
    from it; none is traced here) and one task (silu) whose reference builds small tiled inputs."""
    (root / "NKIBench" / "kernels").mkdir(parents=True)
    (root / "NKIBench" / "reference").mkdir(parents=True)
    for task in perf_corpus._NKIBENCH_PROBLEMS:
        shape = "M128_N256" if task == "silu" else "fake"
        (root / "NKIBench" / "kernels" / f"{task}_{shape}_0.py").write_text("# fake baseline: never traced here\n")
    (root / "NKIBench" / "reference" / "silu_M128_N256_numpy_1.py").write_text(
        "import numpy as np\n\n"
        "def get_inputs():\n    return [np.zeros((256, 128), np.float32)]\n\n"
        "def transform_to_nki_inputs(inputs):\n    return [np.reshape(inputs[0], (128, 2, 128))]\n")
    return root


def test_a_github_candidate_of_an_nkibench_task_takes_the_tasks_tiled_inputs(tmp_path):
    accelopt = _fake_accelopt(tmp_path / "fake_accelopt")
    clone = tmp_path / "fake_clone"
    (clone / "runs").mkdir(parents=True)
    (clone / "runs" / "silu_v1.py").write_text(perf_corpus.KERNEL_HEADER + """
@nki.jit
def kernel(v1):
    assert v1.shape == (128, 2, 128)       # the reference's tiled layout, not any family's own builder
    out = nl.ndarray(v1.shape, dtype=v1.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        nl.store(out[:, i, :], nl.add(nl.load(v1[:, i, :]), 1.0))
    return out
""")
    header = perf_corpus.CORPUS.read_text().splitlines()[0]
    row = ('s,ranking,trn2,nkibench/silu,silu_v1,github:someone/kernels:runs/silu_v1.py::kernel,'
           '"{""task"": ""TASK""}",float32,0.3,nc_latency,nc_latency,trn2,1 NC,?,test,off')
    corpus = tmp_path / "corpus.csv"
    corpus.write_text(header + "\n" + row.replace("TASK", "silu") + "\n")
    clones = {"someone/kernels": clone}
    skipped: list[str] = []
    assert perf_corpus.load_cases(corpus=corpus, clones=clones, skipped=skipped) == []
    assert skipped == ["nkibench/silu:silu_v1 (needs --accelopt-repo)"]
    (case,) = [c for c in perf_corpus.load_cases(corpus=corpus, clones=clones, accelopt=accelopt) if c.source == "s"]
    assert len(case.trace().instructions) > 0
    corpus.write_text(header + "\n" + row.replace("TASK", "sillu") + "\n")
    with pytest.raises(ValueError, match="unknown NKIBench task 'sillu'"):
        perf_corpus.load_cases(corpus=corpus, clones=clones, accelopt=accelopt)


def test_ranking_rows_enter_the_variant_ranking_but_no_error_bar():
    def row(role, variant, measured, model):
        return dict(source=f"s-{role}", role=role, hw="trn2", family=f"f/{role}", variant=variant, measured_ms=measured,
                    after_ms=model, after_ratio=model / measured, after_class="matmul")
    rows = [row(role, f"v{i}", m, 2 * m * (1 + 0.1 * i)) for role in ("ranking", "held-out")
            for i, m in enumerate((1.0, 2.0, 3.0))]
    assert {t["family"] for t in perf_fidelity.ranking_table(rows, "after")} == {"f/ranking", "f/held-out"}
    assert {r["source"] for r in perf_fidelity.heldout_rows(rows, None, None)} == {"s-held-out"}
    pooled = perf_fidelity.uncertainty_from(rows, None, None)["hardware"]["trn2"]["pooled"]
    assert pooled["n"] == 3


def test_a_trn2_estimate_says_which_build_it_priced():
    trace = _case("exec_time").trace()
    assert "trn2 model, --disable-dge build;" in estimate(trace, load_hw("trn2")).estimate_note
    assert "trn2 model, DGE build;" in estimate(trace, load_hw("trn2", {"dge": True})).estimate_note
    assert "build" not in estimate(trace, load_hw("trn1")).estimate_note        # NC-v2 has no DGE: one build
