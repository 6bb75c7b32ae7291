"""benchmarks/sim_fingerprint.py: a recording compares equal to itself, and a changed field is named."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = str(ROOT / "benchmarks" / "sim_fingerprint.py")


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, cwd=ROOT, timeout=600)


def test_fingerprint_record_and_compare(tmp_path):
    before = tmp_path / "before.json"
    # ragged tiles on both axes, 13 row tiles: loop replay extrapolates most of them
    done = _run("record", str(before), "--shapes", "small", "--only", "arange", "--arange-shape", "1600x600")
    assert done.returncode == 0, done.stderr
    kernels = json.loads(before.read_text())["kernels"]
    name = "arange_mask 1600x600"
    assert list(kernels) == [name]
    modes = kernels[name]
    assert set(modes) == {"values", "values-full", "trace", "trace-full"}
    assert all("error" not in m and m["instructions"] > 0 for m in modes.values())
    assert modes["values"]["replayed"] > 0 and modes["values-full"]["replayed"] == 0
    # replay changes nothing: outputs and traces equal those of running every iteration
    for replayed, full in (("values", "values-full"), ("trace", "trace-full")):
        assert modes[replayed]["outputs"] == modes[full]["outputs"]
        assert modes[replayed]["trace"] == modes[full]["trace"]

    same = _run("compare", str(before), str(before))
    assert same.returncode == 0 and "4 (kernel, mode) pairs identical, 0 differ" in same.stdout

    data = json.loads(before.read_text())
    data["kernels"][name]["trace"]["trace"] = "0" * 20
    after = tmp_path / "after.json"
    after.write_text(json.dumps(data))
    diff = _run("compare", str(before), str(after))
    assert diff.returncode == 1
    assert f"{name} [trace]: trace:" in diff.stdout and "3 (kernel, mode) pairs identical, 1 differ" in diff.stdout
