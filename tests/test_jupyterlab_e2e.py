"""End to end in a real JupyterLab: headless Chromium runs the walkthrough notebook and clicks the panel.

Needs the ``notebook`` extra (jupyterlab, playwright) and Debian's ``chromium`` (never a downloaded
browser). Screenshots go to ``test-artifacts/jupyterlab/`` (gitignored).
"""
from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "11_magics_and_panel.ipynb"
ARTIFACTS = ROOT / "test-artifacts" / "jupyterlab"
RUN_TIMEOUT_MS = 180_000


def _chromium() -> str:
    path = os.environ.get("ACCELOPT_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        pytest.skip("no chromium on PATH (Debian: apt-get install -y chromium); set ACCELOPT_CHROMIUM to its path")
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lab(tmp_path):
    """JupyterLab on loopback, a random port and token, serving a copy of the walkthrough."""
    pytest.importorskip("jupyterlab")
    root = tmp_path / "lab"
    root.mkdir()
    shutil.copy(NOTEBOOK, root / NOTEBOOK.name)
    shutil.copytree(NOTEBOOK.parent / "cassettes", root / "cassettes")
    news = tmp_path / "settings" / "@jupyterlab" / "apputils-extension"
    news.mkdir(parents=True)
    (news / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    port, token = _free_port(), secrets.token_hex(16)
    env = {**os.environ, "ACCELOPT_CACHE_DIR": str(tmp_path / "cache"), "JUPYTER_CONFIG_DIR": str(tmp_path / "cfg"),
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt")}
    log = open(tmp_path / "lab.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
                             f"--ServerApp.port={port}", f"--IdentityProvider.token={token}",
                             f"--ServerApp.root_dir={root}", f"--LabApp.user_settings_dir={tmp_path / 'settings'}",
                             "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate", "--allow-root"],
                            cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=1)
                break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail(f"jupyterlab exited: {(tmp_path / 'lab.log').read_text()[-2000:]}")
                time.sleep(0.5)
        yield base, token, root
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.mark.slow
def test_walkthrough_and_panel_in_jupyterlab(lab):
    sync_api = pytest.importorskip("playwright.sync_api")
    base, token, workdir = lab
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    ARTIFACTS.mkdir(parents=True)
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=_chromium(), headless=True, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            _drive(page, base, token)
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "failure.png"), full_page=True)
            raise
        finally:
            browser.close()
    assert list(workdir.glob("runs/walkthrough/best_kernel-*.py"))


def _drive(page, base: str, token: str) -> None:
    page.goto(f"{base}/lab/tree/{NOTEBOOK.name}?token={token}")
    page.locator(".jp-Notebook").first.wait_for(timeout=60_000)
    select = page.locator(".jp-Dialog button", has_text="Select")
    try:                                                                      # the kernel choice, if asked
        select.wait_for(timeout=10_000)
        select.click()
    except Exception:
        pass
    page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").first.wait_for(timeout=60_000)
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
    panel = page.locator(".accelopt-panel")
    panel.wait_for(timeout=RUN_TIMEOUT_MS)                                    # the widget rendered
    assert page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']").count() == 0

    profile = page.locator(".jp-OutputArea-output", has=page.locator(".accelopt-result")).first
    profile.scroll_into_view_if_needed()                                      # a table with % of peak
    assert "% of peak" in profile.text_content()
    profile.screenshot(path=str(ARTIFACTS / "profile_view.png"))
    assert page.locator(".jp-RenderedImage img").count() >= 2                 # timeline and progress plot
    diff = page.locator(".accelopt-diff").first
    diff.scroll_into_view_if_needed()
    diff.screenshot(path=str(ARTIFACTS / "diff_viewer.png"))
    panel.scroll_into_view_if_needed()

    def tab(name: str) -> None:
        panel.locator(".lm-TabBar-tab", has_text=name).click()

    def button(name: str):
        return panel.locator("button", has_text=name).first

    # The person plays the planner in the panel, then submits a kernel without writing one: refused, in red.
    tab("play the planner")
    panel.locator("textarea").first.fill("Unroll the K loop by two.")
    button("submit plans").click()
    panel.locator("text=/plan: \\d+ item/").wait_for(timeout=60_000)
    tab("play the executor")
    button("submit kernel").click()
    error = panel.locator(".accelopt-error")
    error.wait_for(timeout=30_000)
    assert "choose a plan" in error.inner_text()
    panel.screenshot(path=str(ARTIFACTS / "panel_error_in_red.png"))

    # ... writes it (no executor calls for the other plan), and evaluates it: busy while it runs.
    kernel = (ROOT / "accelopt_nb" / "fake_model" / "kernels" / "matmul_resident_rhs.py").read_text()
    panel.locator("textarea").nth(1).fill("# unrolled by hand\n" + kernel)
    panel.locator("input[type=checkbox]").first.check()
    page.wait_for_timeout(1000)                          # let the checkbox reach the kernel before the click does
    button("submit kernel").click()
    panel.locator("text=/execute: \\d+ item/").wait_for(timeout=60_000)
    button("evaluate").click()
    panel.locator("text=running evaluate").wait_for(timeout=30_000)         # busy: buttons off, bar running
    panel.screenshot(path=str(ARTIFACTS / "panel_mid_run.png"))
    panel.locator("text=/evaluate: \\d+ item/").wait_for(timeout=120_000)
    tab("diff")
    panel.screenshot(path=str(ARTIFACTS / "panel_after_evaluate_diff.png"))

    # The agents take over: their calls are not in the cassette, so the step fails, loudly, in red.
    failure = panel.locator(".accelopt-error, .accelopt-failure", has_text="no response for request").first
    button("step").click()
    panel.locator("text=/step: done|no response for request/").first.wait_for(timeout=120_000)
    if not failure.count():
        button("plan").click()
    failure.wait_for(timeout=60_000)
    panel.screenshot(path=str(ARTIFACTS / "panel_failure_in_red.png"))
    page.screenshot(path=str(ARTIFACTS / "notebook.png"))
