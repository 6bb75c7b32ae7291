"""The sandbox contains whatever the payload does: errors, hangs, memory blow-ups and crashes."""
import os
import textwrap

import pytest

from accelopt_nb.evaluation.sandbox import SandboxLimits, run_sandboxed

PAYLOADS = textwrap.dedent('''
    import os, signal, sys, time

    def double(p):
        return {"value": p["x"] * 2, "cwd": os.getcwd(), "env": sorted(os.environ)}

    def fail(p):
        raise ValueError("payload says no")

    def hang(p):
        while True:
            pass

    def sleep_child(p):
        # a grandchild must die with the group on timeout
        import subprocess
        subprocess.Popen([sys.executable, "-c", f"import time; time.sleep(60)  # {p['token']}"])
        time.sleep(60)

    def allocate(p):
        import numpy as np
        a = np.ones((p["mb"], 1024 * 1024 // 8))
        return float(a.sum())

    def segfault(p):
        os.kill(os.getpid(), signal.SIGSEGV)

    def hard_exit(p):
        os._exit(7)

    def system_exit(p):
        sys.exit(3)

    def chatty(p):
        print("x" * 10000)
        return 1
''')


@pytest.fixture
def payload_dir(tmp_path):
    (tmp_path / "sandbox_payloads.py").write_text(PAYLOADS)
    return tmp_path


def run(payload_dir, fn, payload=None, **limits):
    return run_sandboxed(f"sandbox_payloads:{fn}", payload or {}, SandboxLimits(**limits),
                         extra_pythonpath=[str(payload_dir)])


def test_ok_value_runs_in_a_clean_dir_with_a_scrubbed_env(payload_dir, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    out = run(payload_dir, "double", {"x": 21})
    assert out.kind == "ok", out
    assert out.value["value"] == 42
    assert out.value["cwd"] != os.getcwd() and "accelopt-eval-" in out.value["cwd"]
    assert "OPENAI_API_KEY" not in out.value["env"]
    assert not os.path.exists(out.value["cwd"]), "the working directory is removed afterwards"


def test_exception_is_reported_with_type_and_traceback(payload_dir):
    out = run(payload_dir, "fail")
    assert out.kind == "error"
    assert out.error["type"] == "ValueError"
    assert "payload says no" in out.error["message"]
    assert "sandbox_payloads.py" in out.error["traceback"]


def test_infinite_loop_times_out_and_the_group_is_killed(payload_dir):
    out = run(payload_dir, "hang", timeout_s=1.5)
    assert out.kind == "timeout"
    assert 1.5 <= out.wall_time_s < 10
    assert "timed out" in out.describe()


def test_timeout_kills_grandchildren_too(payload_dir):
    import psutil

    import uuid

    token = uuid.uuid4().hex  # only this test's grandchild carries it (other test runs may share the machine)
    out = run(payload_dir, "sleep_child", {"token": token}, timeout_s=2)
    assert out.kind == "timeout"
    leftover = [p for p in psutil.process_iter(["cmdline"]) if token in " ".join(p.info["cmdline"] or [])]
    assert leftover == []


def test_memory_limit_gives_out_of_memory(payload_dir):
    out = run(payload_dir, "allocate", {"mb": 2048}, memory_mb=700)
    assert out.kind == "out_of_memory", out
    assert "ran out of memory" in out.describe()


def test_allocation_within_the_limit_succeeds(payload_dir):
    out = run(payload_dir, "allocate", {"mb": 64}, memory_mb=1500)
    assert out.kind == "ok", out


@pytest.mark.parametrize("fn, rc", [("segfault", -11), ("hard_exit", 7)])
def test_a_dying_process_is_a_crash_not_an_exception_in_the_caller(payload_dir, fn, rc):
    out = run(payload_dir, fn)
    assert out.kind == "crashed"
    assert out.returncode == rc
    assert ("SIGSEGV" in out.describe()) == (rc == -11)


def test_system_exit_is_reported_as_an_error(payload_dir):
    out = run(payload_dir, "system_exit")
    assert out.kind == "error" and out.error["type"] == "SystemExit"


def test_stdout_is_captured_as_a_tail(payload_dir):
    out = run(payload_dir, "chatty")
    assert out.kind == "ok"
    assert 0 < len(out.stdout_tail) <= 4000
