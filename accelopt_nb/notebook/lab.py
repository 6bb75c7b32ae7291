"""JupyterLab on loopback, for what drives it in a headless browser (the end-to-end test, the course screenshots).

    with jupyterlab(root, state) as lab:
        page.goto(lab.url("notebook.ipynb"))

The server listens on 127.0.0.1 at a free port with a random token, serves ``root``, and keeps its
configuration, data, runtime files, user settings and log under ``state``; news fetching and update checks are
off, and every cell is kept in the page (``windowingMode: none``) so a browser can find cells out of view.
Needs the ``notebook`` extra (jupyterlab).
"""
from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping

from accelopt_nb.pyutil import free_port

__all__ = ["Lab", "LabStartError", "chromium", "jupyterlab", "lab_env"]


class LabStartError(RuntimeError):
    """JupyterLab exited or did not answer in time; the message ends with its log's tail."""


@dataclass(frozen=True)
class Lab:
    base: str       # http://127.0.0.1:PORT
    token: str
    log: Path

    def url(self, path: str) -> str:
        """The page that opens ``path`` (relative to the served root)."""
        return f"{self.base}/lab/tree/{path}?token={self.token}"


def chromium() -> str | None:
    """The system's Chromium (``ACCELOPT_CHROMIUM``, else ``chromium`` or ``chromium-browser`` on PATH):
    never a browser downloaded by Playwright."""
    return os.environ.get("ACCELOPT_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


def lab_env(state: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of the server (and of ``jupyter trust``, whose database it must share)."""
    return {**os.environ, "JUPYTER_CONFIG_DIR": str(state / "cfg"), "JUPYTER_DATA_DIR": str(state / "data"),
            "JUPYTER_RUNTIME_DIR": str(state / "rt"), **(extra or {})}


def _write_settings(settings: Path, auto_start_kernel: bool) -> None:
    news = settings / "@jupyterlab" / "apputils-extension"
    news.mkdir(parents=True, exist_ok=True)
    (news / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    tracker = settings / "@jupyterlab" / "notebook-extension"
    tracker.mkdir(parents=True, exist_ok=True)
    # autoStartDefaultKernel: no kernel dialog (on a busy machine it came after a test had stopped looking for it)
    (tracker / "tracker.jupyterlab-settings").write_text(
        json.dumps({"windowingMode": "none", "autoStartDefaultKernel": auto_start_kernel}))


@contextlib.contextmanager
def jupyterlab(root: Path, state: Path, *, env: Mapping[str, str] | None = None, auto_start_kernel: bool = False,
               timeout_s: float = 300) -> Iterator[Lab]:
    """JupyterLab serving ``root`` until the block ends; raises :class:`LabStartError` when it exits first or
    does not answer in ``timeout_s`` (a busy 2-core machine takes minutes to start it)."""
    state.mkdir(parents=True, exist_ok=True)
    settings = state / "settings"
    _write_settings(settings, auto_start_kernel)
    port, token = free_port(), secrets.token_hex(16)
    log_path = state / "lab.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
                                 f"--ServerApp.port={port}", f"--IdentityProvider.token={token}",
                                 f"--ServerApp.root_dir={root}", f"--LabApp.user_settings_dir={settings}",
                                 "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate", "--allow-root"],
                                cwd=root, env=lab_env(state, env), stdout=log, stderr=subprocess.STDOUT)
        lab = Lab(f"http://127.0.0.1:{port}", token, log_path)
        try:
            _wait_until_up(lab, proc, timeout_s)
            yield lab
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_until_up(lab: Lab, proc: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            urllib.request.urlopen(f"{lab.base}/api/status?token={lab.token}", timeout=2)
            return
        except OSError:
            if proc.poll() is not None:
                raise LabStartError(f"jupyterlab exited with status {proc.returncode}: "
                                    f"{lab.log.read_text()[-2000:]}") from None
            if time.monotonic() > deadline:
                raise LabStartError(f"jupyterlab did not answer in {timeout_s:.0f} s: "
                                    f"{lab.log.read_text()[-2000:]}") from None
            time.sleep(0.5)
