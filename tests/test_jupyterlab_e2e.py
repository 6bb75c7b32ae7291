"""End to end in a real JupyterLab: headless Chromium runs the walkthrough notebook and clicks the panel.

Needs the ``notebook`` extra (jupyterlab, playwright) and Debian's ``chromium`` (never a downloaded
browser). Screenshots go to ``test-artifacts/jupyterlab/`` (gitignored; the ones in ``docs/screenshots/``
were copied from there). With ``ACCELOPT_REPRODUCE_OUT`` pointing at an ``accelopt reproduce`` output, a
second test opens each executed reproduction notebook and photographs its figures.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
import urllib.request
from pathlib import Path

import pytest

from accelopt_nb.notebook.lab import Lab, chromium, jupyterlab

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "11_magics_and_panel.ipynb"
ARTIFACTS = ROOT / "test-artifacts" / "jupyterlab"
RUN_TIMEOUT_MS = 180_000
# One UI step (a click and its answer). Generous: a wait that succeeds returns at once, and on a busy 2-core
# machine a step that takes 2 s idle has taken over 30 s.
STEP_TIMEOUT_MS = 120_000


def _chromium() -> str:
    path = chromium()
    if not path:
        pytest.skip("no chromium on PATH (Debian: apt-get install -y chromium); set ACCELOPT_CHROMIUM to its path")
    return path


def _jupyterlab(tmp_path: Path, root: Path) -> contextlib.AbstractContextManager[Lab]:
    return jupyterlab(root, tmp_path / "state", env={"ACCELOPT_CACHE_DIR": str(tmp_path / "cache")},
                      auto_start_kernel=True)


@pytest.fixture
def lab(tmp_path):
    """The walkthrough in JupyterLab, its fake model answering after 1 s (like a real model) once the panel
    is up, so the panel can be watched mid-run and stopped."""
    pytest.importorskip("jupyterlab")
    import nbformat

    root = tmp_path / "lab"
    root.mkdir()
    nb = nbformat.read(NOTEBOOK, as_version=4)
    panel_cell = next(i for i, c in enumerate(nb.cells) if c.source.strip() == "%accelopt panel")
    nb.cells.insert(panel_cell, nbformat.v4.new_code_cell("%accelopt fake-model --latency 1"))
    nbformat.write(nb, root / NOTEBOOK.name)
    with _jupyterlab(tmp_path, root) as running:
        yield running.base, running.token, root


@pytest.mark.slow
def test_walkthrough_and_panel_in_jupyterlab(lab):
    sync_api = pytest.importorskip("playwright.sync_api")
    base, token, workdir = lab
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for old in ARTIFACTS.glob("*.png"):                  # this test's; figures/ is the other test's
        old.unlink()
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


def _open(page, base: str, token: str, path: str) -> None:
    # JupyterLab's bundles take minutes to load on a busy 2-core machine: wait for the page's DOM, then the notebook
    page.goto(f"{base}/lab/tree/{path}?token={token}", wait_until="domcontentloaded", timeout=RUN_TIMEOUT_MS)
    # the notebook in front: tabs opened before stay in the page, hidden
    page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook").first.wait_for(timeout=RUN_TIMEOUT_MS)
    select = page.locator(".jp-Dialog button", has_text="Select")
    try:                                                                      # the kernel choice, if asked
        select.wait_for(timeout=10_000)
        select.click()
    except Exception:
        pass


def _wait_for_a_connected_kernel(base: str, token: str, timeout_s: float = 300) -> None:
    """Until the server has a kernel that is idle and has the page connected (JupyterLab's idle dot can
    show before that)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{base}/api/kernels?token={token}", timeout=5) as r:
                if any(k.get("execution_state") == "idle" and k.get("connections", 0) > 0 for k in json.load(r)):
                    return
        except OSError:                                  # the server busy starting the kernel: ask again
            pass
        time.sleep(1)
    pytest.fail(f"no kernel connected to the notebook in {timeout_s:.0f} s")


def _drive(page, base: str, token: str) -> None:
    _open(page, base, token, NOTEBOOK.name)
    page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").first.wait_for(timeout=STEP_TIMEOUT_MS)
    _wait_for_a_connected_kernel(base, token)
    started = page.locator(".jp-InputPrompt", has_text=re.compile(r"\[(\*|\d+)\]"))
    for _ in range(3):          # on a busy machine the first Run All can come before the kernel takes requests
        page.get_by_role("menuitem", name="Run", exact=True).click()
        page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
        try:
            started.first.wait_for(timeout=60_000)
            break
        except Exception:
            continue
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

    # The person plays the planner, then submits a kernel without writing one: refused, in red.
    tab("play the planner")
    panel.locator("textarea").first.fill("Unroll the K loop by two.")
    button("submit plans").click()
    panel.locator("text=/plan: \\d+ item/").wait_for(timeout=STEP_TIMEOUT_MS)
    tab("play the executor")
    button("submit kernel").click()
    error = panel.locator(".accelopt-error")
    error.wait_for(timeout=STEP_TIMEOUT_MS)
    assert "choose a plan" in error.inner_text()
    panel.screenshot(path=str(ARTIFACTS / "panel_error_in_red.png"))

    # ... writes a kernel that does not build (no executor calls for the other plans) and evaluates it:
    # the banner names a kernel failure as such, not as an LLM failure.
    kernel = (ROOT / "accelopt_nb" / "fake_model" / "kernels" / "matmul_column_outer.py").read_text()
    panel.locator("input[type=checkbox]").first.check()  # first, so it reaches the kernel before the click does
    panel.locator("textarea").nth(1).fill(kernel.replace("def kernel(lhs, rhs):", "def kernel(lhs, rhs)"))
    page.wait_for_timeout(2000)
    button("submit kernel").click()
    panel.locator("text=/execute: \\d+ item/").wait_for(timeout=STEP_TIMEOUT_MS)
    button("evaluate").click()
    banner = panel.locator(".accelopt-failure", has_text="kernel build failed")
    banner.wait_for(timeout=STEP_TIMEOUT_MS)
    assert "LLM" not in banner.inner_text() and "kernels: 1 kernel build failed" in banner.inner_text()
    panel.screenshot(path=str(ARTIFACTS / "panel_kernel_failure_named.png"))
    for phase in ("select", "summarize"):
        button(phase).click()
        panel.locator(f"text=/{phase}: /").first.wait_for(timeout=STEP_TIMEOUT_MS)

    # The agents take a whole iteration: the bar moves as answers arrive (1 s each); Stop mid-run keeps what
    # finished, and running the step again makes only the calls still missing.
    button("step").click()
    panel.locator("text=running step").wait_for(timeout=STEP_TIMEOUT_MS)
    bar_label = panel.locator(".widget-hbox .widget-html").first
    for _ in range(240):                                                      # some answers in, not all
        if re.search(r"(plan|execute|evaluate) [1-9]\d*/", bar_label.inner_text()):
            break
        page.wait_for_timeout(250)
    panel.screenshot(path=str(ARTIFACTS / "panel_mid_run_progress.png"))
    button("stop").click()
    stopped = panel.locator(".accelopt-stopped")
    stopped.wait_for(timeout=STEP_TIMEOUT_MS)
    assert "not made" in stopped.inner_text()
    panel.screenshot(path=str(ARTIFACTS / "panel_stopped.png"))
    button("step").click()
    panel.locator("text=step: done").wait_for(timeout=RUN_TIMEOUT_MS)
    tab("leaderboard")
    panel.screenshot(path=str(ARTIFACTS / "panel_resumed_after_stop.png"))
    page.screenshot(path=str(ARTIFACTS / "notebook.png"))


@pytest.mark.slow
def test_reproduction_figures_in_jupyterlab(tmp_path):
    """Each reproduction notebook of an `accelopt reproduce` output, opened in JupyterLab: its figures."""
    out = os.environ.get("ACCELOPT_REPRODUCE_OUT")
    if not out or not (Path(out) / "index.md").is_file():
        pytest.skip("set ACCELOPT_REPRODUCE_OUT to the --out folder of an `accelopt reproduce` run")
    sync_api = pytest.importorskip("playwright.sync_api")
    pytest.importorskip("jupyterlab")
    executed = sorted(Path(out).glob("2*/2*.ipynb")) + sorted(Path(out).glob("10_*/10_*.ipynb"))
    assert executed, f"no executed reproduction notebooks under {out}"
    root = tmp_path / "lab"
    for nb in executed:
        (root / nb.parent.name).mkdir(parents=True)
        shutil.copy(nb, root / nb.parent.name / nb.name)
    shots = ARTIFACTS / "figures"
    shutil.rmtree(shots, ignore_errors=True)
    shots.mkdir(parents=True)
    with _jupyterlab(tmp_path, root) as running, sync_api.sync_playwright() as pw:
        base, token = running.base, running.token
        browser = pw.chromium.launch(executable_path=_chromium(), headless=True, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1500, "height": 1100})
        try:
            for nb in executed:
                _open(page, base, token, f"{nb.parent.name}/{nb.name}")
                # the notebook in front (earlier tabs stay open, hidden)
                images = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-RenderedImage img")
                images.first.wait_for(state="attached", timeout=RUN_TIMEOUT_MS)
                page.wait_for_timeout(2000)                  # let the outputs lay out
                for i in range(images.count()):
                    if not images.nth(i).is_visible():
                        continue
                    images.nth(i).scroll_into_view_if_needed()
                    images.nth(i).screenshot(path=str(shots / f"{nb.stem}_{i}.png"))
        finally:
            browser.close()
    assert {p.name.rsplit("_", 1)[0] for p in shots.glob("*.png")} >= {nb.stem for nb in executed}
