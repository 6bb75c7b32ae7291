"""The JupyterLab helper the end-to-end test and the course screenshots share (no browser needed here)."""
from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from accelopt_nb.notebook.lab import jupyterlab


@pytest.mark.slow
def test_jupyterlab_serves_the_root_on_loopback_behind_its_token(tmp_path):
    pytest.importorskip("jupyterlab")
    root = tmp_path / "root"
    root.mkdir()
    (root / "hello.txt").write_text("hi")
    with jupyterlab(root, tmp_path / "state", auto_start_kernel=True, timeout_s=240) as lab:
        assert lab.base.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(f"{lab.base}/api/contents?token={lab.token}", timeout=30) as r:
            assert [item["name"] for item in json.load(r)["content"]] == ["hello.txt"]
        with pytest.raises(urllib.error.HTTPError) as refused:       # no token, no contents
            urllib.request.urlopen(f"{lab.base}/api/contents", timeout=30)
        assert refused.value.code == 403
        assert lab.url("a b.ipynb") == f"{lab.base}/lab/tree/a b.ipynb?token={lab.token}"
    tracker = tmp_path / "state" / "settings" / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
    assert json.loads(tracker.read_text()) == {"windowingMode": "none", "autoStartDefaultKernel": True}
    with pytest.raises(OSError):                                      # stopped with the block
        urllib.request.urlopen(f"{lab.base}/api/status?token={lab.token}", timeout=5)
