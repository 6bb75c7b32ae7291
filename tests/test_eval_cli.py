"""`accelopt evaluate`: readable report, --json, exit statuses, batches on a pool or Dask."""
import json
from pathlib import Path

import pytest

from accelopt_nb.cli import main

HOSTILE = Path(__file__).parent / "fixtures" / "hostile"
TASK = str(HOSTILE / "scale_task.py")


def test_json_prints_one_object_with_status(capsys):
    rc = main(["evaluate", str(HOSTILE / "good_scale.py"), "--task", TASK, "--json", "--no-cache"])
    out = capsys.readouterr().out.strip().splitlines()
    assert rc == 0 and len(out) == 1
    data = json.loads(out[0])
    assert data["status"] == "correct" and len(data["checks"]) == 5


def test_readable_report_and_exit_status_for_an_incorrect_kernel(capsys):
    rc = main(["evaluate", str(HOSTILE / "partial_write.py"), "--task", TASK, "--no-cache"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "status: incorrect" in out and "partial output write" in out


def test_batch_on_two_workers_keeps_the_command_line_order(capsys):
    kernels = [str(HOSTILE / f"{k}.py") for k in ("forbidden_import", "good_scale", "nan_output")]
    rc = main(["evaluate", *kernels, "--task", TASK, "--workers", "2", "--json", "--no-cache"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert rc == 1
    assert [json.loads(x)["status"] for x in lines] == ["rejected", "correct", "incorrect"]
    assert [json.loads(x)["label"] for x in lines] == kernels


def test_batch_on_a_dask_scheduler(capsys):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address=None) as cluster:
        rc = main(["evaluate", str(HOSTILE / "good_scale.py"), str(HOSTILE / "wrong_shape.py"),
                   "--task", TASK, "--scheduler", cluster.scheduler_address, "--json", "--no-cache"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert rc == 1
    assert [json.loads(x)["status"] for x in lines] == ["correct", "incorrect"]


def test_usage_errors_exit_2(capsys):
    assert main(["evaluate", "no_such_kernel.py", "--task", TASK]) == 2
    assert "kernel file not found" in capsys.readouterr().err
    assert main(["evaluate", str(HOSTILE / "good_scale.py"), "--problem", "no_such_problem"]) == 2
    assert "no_such_problem" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["evaluate", str(HOSTILE / "good_scale.py")])   # neither --problem nor --task


def test_fidelity_option_is_recorded(capsys):
    rc = main(["evaluate", str(HOSTILE / "good_scale.py"), "--task", TASK, "--json", "--no-cache",
               "--fidelity", "screen"])
    data = json.loads(capsys.readouterr().out.strip())
    assert rc == 0 and data["fidelity"] == "screen" and data["checked_preset"] == "task"
