"""`accelopt store`: runs, best kernels, lineage, and export/import between two stores."""
from __future__ import annotations

import json

import pytest

from accelopt_nb.cli import main
from accelopt_nb.store import RunStore

SOURCE = "import neuronxcc.nki as nki\n\n@nki.jit\ndef kernel(x):\n    return x\n"


def _populate(path):
    s = RunStore(path)
    s.create_run("r1", {"problem": "silu"})
    base = s.add_kernel("r1", kernel_id="baseline", problem_id="silu", source=SOURCE, iteration=-1)
    s.add_evaluation("r1", kernel_id=base, backend="simulator", status="correct", correct=True, latency_us=20.0,
                     pct_peak=10.0, result={"hw": "trn1", "fidelity": "full"})
    plan = s.add_plan("r1", problem_id="silu", iteration=0, text="Fuse the three instructions into one.\nDetails",
                      parent_kernel_id=base)
    kid = s.add_kernel("r1", problem_id="silu", source=SOURCE + "#fused\n", iteration=0, parent_id=base,
                       plan_id=plan)
    s.add_evaluation("r1", kernel_id=kid, backend="simulator", status="correct", correct=True, latency_us=8.0,
                     pct_peak=25.0, result={"hw": "trn1", "fidelity": "full"})
    bad = s.add_kernel("r1", problem_id="silu", source=SOURCE + "#bad\n", iteration=1, parent_id=kid)
    s.add_evaluation("r1", kernel_id=bad, backend="simulator", status="build_failed", correct=False,
                     result={"hw": "trn1", "fidelity": "full"})
    s.close()
    return kid, bad


def test_runs_best_lineage_and_a_round_trip(tmp_path, capsys):
    src = tmp_path / "a.sqlite"
    kid, bad = _populate(src)
    assert main(["store", "runs", "--store", str(src)]) == 0
    out = capsys.readouterr().out
    assert "r1" in out and "0.008" in out

    assert main(["store", "best", "--store", str(src), "--problem", "silu", "--hw", "trn1", "--json"]) == 0
    best = json.loads(capsys.readouterr().out)
    assert [b["kernel_id"] for b in best] == [kid, "baseline"] and best[0]["latency_ms"] == pytest.approx(0.008)

    assert main(["store", "lineage", "--store", str(src), "--run", "r1", bad]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "baseline" in out[1] and kid in out[2] and "2.500x" in out[2] and "Fuse the three" in out[2]
    assert bad in out[3] and "build_failed" in out[3]

    with RunStore(src) as s:
        s.add_memory_item("r1", problem_id="silu", iteration=0, summary="**Fuse the activation**\nOne call.",
                          slow_kernel_id="baseline", fast_kernel_id=kid, speedup=2.5)
    assert main(["store", "memory", "--store", str(src), "--problem", "silu"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "2.500x" in out[1] and out[1].endswith("Fuse the activation")

    dump = tmp_path / "runs.jsonl"
    assert main(["store", "export", "--store", str(src), str(dump)]) == 0
    assert "3 kernels" in capsys.readouterr().out
    dest = tmp_path / "b"
    assert main(["store", "import", "--store", str(dest), str(dump)]) == 0
    capsys.readouterr()
    with RunStore(dest) as b, RunStore(src) as a:
        assert b.rows("kernels", "r1") == a.rows("kernels", "r1")


def test_errors_name_the_problem(tmp_path, capsys):
    assert main(["store", "runs", "--store", str(tmp_path / "missing")]) == 2
    assert "no run store at" in capsys.readouterr().err
    src = tmp_path / "a.sqlite"
    _populate(src)
    assert main(["store", "lineage", "--store", str(src), "--run", "r1", "k-nope"]) == 2
    assert "no kernel 'k-nope' in run 'r1'" in capsys.readouterr().err
    (tmp_path / "junk.jsonl").write_text("{}\n")
    assert main(["store", "import", "--store", str(src), str(tmp_path / "junk.jsonl")]) == 2
    assert "not an accelopt run export" in capsys.readouterr().err
