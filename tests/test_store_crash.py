"""Kill a running experiment with SIGKILL mid-step, resume, and check nothing was lost or duplicated."""
from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from accelopt_nb.store import RunStore

FAKE = Path(__file__).parent / "fakes" / "fake_experiment.py"
sys.path.insert(0, str(FAKE.parent))
import fake_experiment as fx  # noqa: E402

RUN = "crash-run"
ITERATIONS = 4
TOTAL_STEPS = ITERATIONS * len(fx.STEPS)

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is POSIX")


def start(store_dir: Path, pause_at_call: int = 0, delay: float = 0.01) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(FAKE), str(store_dir), RUN, str(ITERATIONS), str(delay),
                             str(pause_at_call)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def reap(proc: subprocess.Popen) -> str:
    """Wait for the process, close its pipes, return its stderr."""
    proc.wait(timeout=30)
    err = proc.stderr.read()
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        pipe.close()
    return err


def kill_mid_step(store_dir: Path, at_call: int) -> list[str]:
    """Run until the process, inside a step, has committed its n-th LLM call; SIGKILL it there."""
    proc = start(store_dir, pause_at_call=at_call)
    lines: list[str] = []
    try:
        for line in proc.stdout:
            lines.append(line.strip())
            if line.startswith("PAUSED"):
                proc.send_signal(signal.SIGKILL)
                break
    finally:
        err = reap(proc)
    assert proc.returncode == -signal.SIGKILL, err
    return lines[:-1]


def kill_at_random_time(store_dir: Path, after_s: float) -> list[str]:
    """SIGKILL at an arbitrary moment (possibly during a commit, or between steps)."""
    proc = start(store_dir, delay=0.005)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(l.strip() for l in proc.stdout))
    reader.start()
    time.sleep(after_s)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    reader.join(timeout=30)
    reap(proc)
    return lines


def check_consistent(store: RunStore, printed: list[str]) -> None:
    """Every step is all-or-nothing; nothing printed as committed is missing; no duplicates."""
    done = set(store.completed_steps(RUN, scope=fx.PROBLEM))
    kernels = store.kernels_df(RUN)
    per_step = Counter(zip(kernels["iteration"], kernels["plan_id"].str.split("-").str[0]))
    for (it, step), n in per_step.items():
        assert (it, step) in done, f"rows of unfinished step {it}/{step} were committed"
        assert n == fx.ROWS_PER_STEP
    assert len(kernels) == fx.ROWS_PER_STEP * len(done)
    assert len(store.evaluations_df(RUN)) == len(kernels)
    assert kernels["kernel_id"].is_unique
    for it, step in done:
        expected = {fx.kernel_source(it, step, j) for j in range(fx.ROWS_PER_STEP)}
        got = set(kernels[(kernels["iteration"] == it) & kernels["plan_id"].str.startswith(step)]["source"])
        assert got == expected
    for line in printed:
        kind, *rest = line.split()
        if kind == "DONE":
            assert (int(rest[0]), rest[1]) in done, f"{line} was printed after commit but is missing"
    calls = store.llm_calls_df(RUN)
    assert calls["call_id"].is_unique
    printed_calls = {line.split()[1] for line in printed if line.startswith("CALL")}
    assert printed_calls <= set(calls["call_id"]), "a committed LLM call was lost"


def test_sigkill_mid_step_then_resume(tmp_path):
    store_dir = tmp_path / "exp"
    rng = random.Random(1234)
    all_printed: list[str] = []
    expected_resume = (0, "plan")
    for _ in range(3):
        printed = kill_mid_step(store_dir, at_call=rng.randint(1, 2 * fx.ROWS_PER_STEP))
        all_printed += printed
        # Each process resumed where the store said, not from scratch.
        assert printed[0] == f"RESUME {expected_resume[0]} {expected_resume[1]}"
        with RunStore.open(store_dir) as store:
            check_consistent(store, all_printed)
            last_begin = [line for line in printed if line.startswith("BEGIN")][-1].split()
            killed_step = (int(last_begin[1]), last_begin[2])
            assert not store.is_step_done(RUN, killed_step[0], killed_step[1], scope=fx.PROBLEM)
            expected_resume = store.resume_point(RUN, fx.STEPS, scope=fx.PROBLEM)
            assert expected_resume == killed_step

    # Two kills at arbitrary moments, then finish the run without interruption.
    for after_s in (0.15, 0.3):
        all_printed += kill_at_random_time(store_dir, after_s)
        with RunStore.open(store_dir) as store:
            check_consistent(store, all_printed)
    with RunStore.open(store_dir) as store:
        expected_resume = store.resume_point(RUN, fx.STEPS, scope=fx.PROBLEM)
    with start(store_dir) as proc:
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    final = [line for line in out.split("\n") if line]
    assert final[0] == f"RESUME {expected_resume[0]} {expected_resume[1]}"
    assert final[-1] == "FINISHED"
    all_printed += final
    with RunStore.open(store_dir) as store:
        check_consistent(store, all_printed)
        assert len(store.completed_steps(RUN, scope=fx.PROBLEM)) == TOTAL_STEPS
        assert len(store.kernels_df(RUN)) == TOTAL_STEPS * fx.ROWS_PER_STEP
        assert len(store.problems_df(RUN)) == 1
        assert store.get_run(RUN)["status"] == "finished"
        # No step was completed twice: completed steps are never re-run after a resume.
        dones = Counter(tuple(line.split()[1:]) for line in all_printed if line.startswith("DONE"))
        assert all(n == 1 for n in dones.values())
        # LLM calls made in killed steps stay on the bill (they were paid for), once each. A kill
        # at an arbitrary moment may land between a call's commit and its CALL line.
        printed_calls = sum(line.startswith("CALL") for line in all_printed)
        assert printed_calls <= len(store.llm_calls_df(RUN)) <= printed_calls + 2
