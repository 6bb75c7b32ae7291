"""Screenshots of the teaching course in a real JupyterLab, one per notebook, into docs/screenshots/course/.

    python scripts/course_screenshots.py [--only 03 07] [--out docs/screenshots/course]

Runs each course notebook (``notebooks/0*.ipynb``) with papermill and the reference answers filled in,
serves the executed copies from a JupyterLab on loopback, opens each in Debian's ``chromium`` through
Playwright (never a downloaded browser; set ACCELOPT_CHROMIUM to another path), scrolls to the cell that
shows the notebook's main idea, and saves a screenshot. Needs the ``notebook`` extra.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from accelopt_nb.notebook.lab import chromium, jupyterlab, lab_env

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
OUT = ROOT / "docs" / "screenshots" / "course"

# the first cell whose source contains this text is scrolled to the top: the notebook's main idea, with its output
FOCUS = {
    "01_nki_basics": 'side_by_side(("basics"',                      # the two NKI styles side by side
    "02_memory_and_roofline": "ax.set_xscale",                       # DMA bandwidth vs transfer size
    "03_matmul_step_by_step": "moving = moving_sweep(",              # the moving width sweep and its claims
    "04_fusion_and_overlap": 'loops["swish_sequential"].timeline(',  # the sequential loop's timeline
    "05_agent_step_by_hand": "%accelopt step evaluate",              # the learner's kernel evaluated
    "06_sbuf_capacity_and_spills": "ax.axvline",                     # latency vs working set
    "07_trn2": "timed = {label",                                      # the kernels on trn1 and trn2
    "08_model_limits": "mamba = mamba_progression(",                # Mamba: measured against the model
}


def execute(names: list[str], work: Path) -> list[Path]:
    import nbformat
    import papermill

    from accelopt_nb.teaching.answers import REFERENCE_ANSWERS
    from accelopt_nb.teaching.notebook import fill_exercises
    done = []
    for name in names:
        nb = fill_exercises(nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4), REFERENCE_ANSWERS)
        src, out = work / f"in-{name}.ipynb", work / f"{name}.ipynb"
        nbformat.write(nb, src)
        t = time.time()
        papermill.execute_notebook(str(src), str(out), cwd=str(NOTEBOOKS), kernel_name="python3", progress_bar=False,
                                   parameters={"strict": True, "out_dir": str(work / "figures")})
        src.unlink()
        print(f"executed {name} in {time.time() - t:.0f} s", flush=True)
        done.append(out)
    return done


def shoot(notebooks: list[Path], root: Path, out: Path) -> None:
    import nbformat
    from playwright.sync_api import sync_playwright
    browser_path = chromium()
    if not browser_path:
        raise SystemExit("no chromium on PATH (Debian: apt-get install -y chromium); set ACCELOPT_CHROMIUM to its path")
    state = root / ".lab"
    for nb in notebooks:     # trusted: their HTML outputs (claims, side-by-side code) render unsanitised
        subprocess.run([sys.executable, "-m", "jupyter", "trust", str(nb)], env=lab_env(state), check=True,
                       capture_output=True)
    with jupyterlab(root, state) as lab:
        out.mkdir(parents=True, exist_ok=True)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=browser_path, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1600, "height": 1100})
            sidebar_open = True
            for nb in notebooks:
                page.goto(lab.url(nb.name))
                page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
                page.wait_for_timeout(6000)
                if sidebar_open:                  # the file browser off: the notebook gets the width
                    page.keyboard.press("Control+b")
                    sidebar_open = False
                    page.wait_for_timeout(1000)
                sources = [c.source for c in nbformat.read(nb, as_version=4).cells]
                hits = [i for i, src in enumerate(sources) if FOCUS.get(nb.stem, "\0") in src]
                if hits:
                    page.evaluate("(i) => document.querySelectorAll('.jp-Notebook .jp-Cell')[i].scrollIntoView({block: 'start'})",
                                  hits[0])
                    page.wait_for_timeout(2500)
                    page.evaluate("(i) => document.querySelectorAll('.jp-Notebook .jp-Cell')[i].scrollIntoView({block: 'start'})",
                                  hits[0])
                    page.wait_for_timeout(1000)
                path = out / f"{nb.stem}.png"
                page.screenshot(path=str(path))
                print(f"wrote {path}", flush=True)
            browser.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", nargs="*", default=[], help="notebook numbers or stems (default: every course notebook)")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    names = sorted(q.stem for q in NOTEBOOKS.glob("0*.ipynb"))
    if args.only:
        names = [n for n in names if any(n.startswith(o) for o in args.only)]
    with tempfile.TemporaryDirectory(prefix="course-shots-") as tmp:
        work = Path(tmp)
        shoot(execute(names, work), work, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
