"""`--json` output stays machine-readable when the kernel prints: its prints go to stderr."""
import json
from pathlib import Path

from accelopt_nb.cli import main
from accelopt_nb.commands import emit_json, stdout_for_json_only

DATA = Path(__file__).parent / "data"
TASK = str(DATA / "matmul_task.py")


def _chatty_kernel(tmp_path: Path) -> str:
    src = (DATA / "accelopt_style_matmul.py").read_text()
    src = src.replace("@nki.jit\n", "print('loading the kernel module')\n\n@nki.jit\n", 1)
    src = src.replace("    M, K = v1.shape\n", "    M, K = v1.shape\n    print('kernel says hello', M, K)\n", 1)
    path = tmp_path / "chatty.py"
    path.write_text(src)
    return str(path)


def test_simulate_json_stdout_is_one_json_document_when_the_kernel_prints(tmp_path, capsys):
    assert main(["simulate", _chatty_kernel(tmp_path), "--task", TASK, "--json"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)          # the whole of stdout parses
    assert report["status"] == "correct"
    assert "kernel says hello" in captured.err and "loading the kernel module" in captured.err


def test_simulate_without_json_keeps_the_kernels_prints_on_stdout(tmp_path, capsys):
    assert main(["simulate", _chatty_kernel(tmp_path), "--task", TASK]) == 0
    out = capsys.readouterr().out
    assert "kernel says hello" in out and "CORRECT" in out


def test_profile_trace_only_json_is_not_corrupted_by_kernel_prints(tmp_path, capsys):
    assert main(["profile", _chatty_kernel(tmp_path), "--task", TASK, "--trace-only", "--json"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["trace_only"] is True and report["profile"] is not None
    assert "kernel says hello" in captured.err


def test_emit_json_writes_the_real_stdout_and_prints_inside_go_to_stderr(capsys):
    with stdout_for_json_only(True):
        print("chatter")
        emit_json({"a": 1})
    captured = capsys.readouterr()
    assert captured.out == '{"a": 1}\n' and captured.err == "chatter\n"
    with stdout_for_json_only(False):
        print("plain")
    assert capsys.readouterr().out == "plain\n"
