"""Batch evaluation: the local pool and a Dask cluster give the same results."""
from pathlib import Path

import pytest

from accelopt_nb.evaluation import (EvalCache, LocalPoolEvaluator, Status, evaluate_many,
                                    make_job)
from accelopt_nb.evaluation.executors import CoreLeases, run_leased

HOSTILE = Path(__file__).parent / "fixtures" / "hostile"
BATCH = [  # (kernel, task)
    ("good_scale", "scale_task"), ("partial_write", "scale_task"), ("nan_output", "scale_task"),
    ("lowered_precision", "scale_task"), ("forbidden_import", "scale_task"),
    ("softmax_first_tile_max", "softmax_task"), ("softmax_good", "softmax_task"),
]
EXPECTED = {"good_scale": Status.CORRECT, "partial_write": Status.INCORRECT,
            "nan_output": Status.INCORRECT, "lowered_precision": Status.INCORRECT,
            "forbidden_import": Status.REJECTED, "softmax_first_tile_max": Status.CHEAT,
            "softmax_good": Status.CORRECT}


def jobs():
    return [make_job(HOSTILE / f"{task}.py", (HOSTILE / f"{kernel}.py").read_text(), label=kernel)
            for kernel, task in BATCH]


def fingerprint(results):
    """Everything about a result that must not depend on where it was computed."""
    out = {}
    for r in results:
        d = r.to_dict()
        for volatile in ("wall_time_s", "compile_time_s", "cached"):
            d.pop(volatile)
        out[r.label] = d
    return out


@pytest.mark.slow   # a Dask LocalCluster: ~28 s of CPU; tests/test_eval_cli.py keeps a Dask scheduler in the fast tier
def test_local_pool_and_dask_local_cluster_agree():
    distributed = pytest.importorskip("distributed")
    from accelopt_nb.evaluation import DaskEvaluator

    with LocalPoolEvaluator(workers=2) as pool:
        local = list(evaluate_many(jobs(), pool, progress=False, cache=False))
    assert {r.label: r.status for r in local} == EXPECTED

    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        with DaskEvaluator(client) as dask_eval:
            remote = list(evaluate_many(jobs(), dask_eval, progress=False, cache=False))
    assert fingerprint(remote) == fingerprint(local)


def test_evaluate_many_serves_cache_hits_first_and_labels_results(tmp_path, capsys):
    cache = EvalCache(tmp_path)
    batch = jobs()[:2]
    first = list(evaluate_many(batch, LocalPoolEvaluator(workers=1), progress=True, cache=cache))
    assert sorted(r.label for r in first) == ["good_scale", "partial_write"]
    assert not any(r.cached for r in first)
    assert "evaluating" in capsys.readouterr().err  # the tqdm bar

    unlabeled = [make_job(HOSTILE / "scale_task.py", (HOSTILE / "wrong_shape.py").read_text())]
    again = list(evaluate_many(batch + unlabeled, progress=False, cache=cache))
    assert [r.cached for r in again] == [True, True, False]
    assert again[2].label == "2" and again[2].status is Status.INCORRECT


def test_neuron_jobs_lease_distinct_cores(monkeypatch):
    import threading
    import time

    from accelopt_nb.evaluation import executors

    seen, active, lock = [], set(), threading.Lock()

    def fake_run_job(job, worker=None):  # stands in for the sandbox: records which core each job holds
        if job.backend != "neuron":
            return job.visible_cores
        with lock:
            assert job.visible_cores not in active
            active.add(job.visible_cores)
            seen.append(job.visible_cores)
        time.sleep(0.05)
        with lock:
            active.remove(job.visible_cores)
        return job.visible_cores

    monkeypatch.setattr(executors, "run_job", fake_run_job)
    leases = CoreLeases([4, 5])
    job = make_job(HOSTILE / "scale_task.py", "x = 1", backend="neuron")
    with LocalPoolEvaluator(workers=3, neuron_cores=[4, 5], warm=False) as pool:
        pool._leases = leases
        results = [f.result() for f in [pool.submit(job) for _ in range(6)]]
    assert sorted(set(results)) == ["4", "5"] and len(seen) == 6
    # a simulator job takes no lease
    assert run_leased(make_job(HOSTILE / "scale_task.py", "x = 1"), leases) is None


def test_pool_defaults_and_validation():
    with LocalPoolEvaluator() as pool:
        assert pool.workers >= 1
    with LocalPoolEvaluator(neuron_cores=4) as pool:
        assert pool.workers == 4
    with pytest.raises(Exception, match="at least 1"):
        LocalPoolEvaluator(workers=0)


def _gone(pid: int) -> bool:
    import os
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie still answers kill(0); it has ended all the same
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ", 1)[1].startswith("Z")


def test_unclosed_warm_worker_goes_away_when_collected():
    import gc

    from accelopt_nb.evaluation.pool import WarmWorker

    worker = WarmWorker()
    directory, pid = worker.dir, worker.proc.pid
    assert directory.is_dir() and not _gone(pid)
    del worker
    gc.collect()
    assert not directory.exists()
    assert _gone(pid)


def test_unclosed_pool_workers_go_away_at_interpreter_exit(tmp_path):
    import json
    import subprocess
    import sys
    import time

    script = ("import json\n"
              "from accelopt_nb.evaluation import LocalPoolEvaluator, make_job\n"
              f"task = {str(HOSTILE / 'scale_task.py')!r}\n"
              f"src = open({str(HOSTILE / 'good_scale.py')!r}).read()\n"
              "pool = LocalPoolEvaluator(workers=1)\n"
              "assert pool.submit(make_job(task, src)).result().correct\n"
              "w = pool._all[0]\n"
              "print(json.dumps([str(w.dir), w.proc.pid]))\n")   # exits without shutdown()
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    directory, pid = json.loads(out.stdout.strip().splitlines()[-1])
    deadline = time.monotonic() + 10
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(directory).exists()
    assert _gone(pid)
