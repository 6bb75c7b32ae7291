"""Hostile kernels: each one gets its own clear status, and none takes the caller down."""
from pathlib import Path

from accelopt_nb.evaluation import EvalOptions, Status, evaluate

HOSTILE = Path(__file__).parent / "fixtures" / "hostile"
SCALE_TASK = HOSTILE / "scale_task.py"
SOFTMAX_TASK = HOSTILE / "softmax_task.py"


def run(kernel: str, task: Path = SCALE_TASK, **opts):
    options = EvalOptions(kernel_filename=f"{kernel}.py", **opts)
    return evaluate(task, (HOSTILE / f"{kernel}.py").read_text(), options=options, cache=False)


def test_a_correct_kernel_is_correct_and_profiled_fields_are_filled():
    r = run("good_scale")
    assert r.status is Status.CORRECT, r.summary()
    assert [c.index for c in r.seed_checks()] == [0, 21, 42, 63, 84]
    assert all(c.passed for c in r.checks)
    assert r.dtypes_used == ["float32"]
    assert r.compile_time_s is not None and r.wall_time_s > 0
    assert r.error is None


def test_syntax_error_is_build_failed_with_its_line():
    r = run("syntax_error")
    assert r.status is Status.BUILD_FAILED
    assert r.error["type"] == "KernelLoadError" and r.error["line"] == 7
    assert r.error["file"] == "syntax_error.py"


def test_forbidden_import_is_rejected_before_running():
    r = run("forbidden_import")
    assert r.status is Status.REJECTED
    assert r.error["line"] == 1 and "subprocess" in r.error["message"]
    assert r.checks == []


def test_os_system_is_rejected():
    r = run("os_system")
    assert r.status is Status.REJECTED
    assert r.error["line"] == 7 and "'os'" in r.error["message"]
    assert not Path("pwned").exists()


def test_infinite_loop_times_out():
    r = run("infinite_loop", timeout_s=3)
    assert r.status is Status.TIMEOUT
    assert "3 s" in r.message
    assert 3 <= r.wall_time_s < 30


def test_huge_allocation_hits_the_memory_limit():
    r = run("huge_allocation", memory_mb=1024)
    assert r.status is Status.OUT_OF_MEMORY, r.summary()
    assert r.error["type"] == "MemoryError" and r.error["line"] == 9
    assert "1024 MiB" in r.message


def test_wrong_output_shape_is_incorrect():
    r = run("wrong_shape")
    assert r.status is Status.INCORRECT
    assert "(256, 256)" in r.checks[0].reason


def test_nan_output_is_incorrect():
    r = run("nan_output")
    assert r.status is Status.INCORRECT
    assert "NaN where the reference is finite" in r.checks[0].reason


def test_uninitialized_read_is_incorrect_with_the_rule():
    r = run("uninitialized_read")
    assert r.status is Status.INCORRECT
    assert r.error["type"] == "UninitializedReadError"
    assert r.error["line"] == 12
    assert "written before it is read" in r.error["rule"]


def test_partial_output_write_is_incorrect():
    r = run("partial_write")
    assert r.status is Status.INCORRECT
    assert r.checks[0].reason.startswith("partial output write: 65536 of 131072 elements")


def test_first_tile_max_softmax_is_a_cheat():
    r = run("softmax_first_tile_max", task=SOFTMAX_TASK)
    assert r.status is Status.CHEAT, r.summary()
    assert all(c.passed for c in r.seed_checks()) and len(r.seed_checks()) == 5
    assert r.adversarial_checks()[0].passed is False
    assert "passes all 5 seeds but fails adversarial input #0" in r.message


def test_correct_softmax_passes_the_adversarial_inputs():
    r = run("softmax_good", task=SOFTMAX_TASK)
    assert r.status is Status.CORRECT, r.summary()
    assert len(r.adversarial_checks()) == 2 and all(c.passed for c in r.adversarial_checks())


def test_reading_inputs_as_numpy_on_the_host_is_incorrect():
    r = run("host_numpy_read")
    assert r.status is Status.INCORRECT
    assert r.error["type"] == "OpaqueTensorError" and r.error["line"] == 10


def test_lowered_precision_is_decided_from_the_dtypes_used():
    r = run("lowered_precision")
    assert r.status is Status.INCORRECT
    assert r.checks[0].reason.startswith("precision lowering: the kernel uses bfloat16")
    # the correct kernel mentions bfloat16 in a comment and a string, and is not flagged
    assert run("good_scale").status is Status.CORRECT

