"""The outage experiment: the model server goes down in the middle of an execute step.

    .venv/bin/python benchmarks/endpoint_outage.py [--outage 60] [--retry-for 20] [--calls-before 4]

Each arm is ``accelopt optimize`` as a user runs it (in this process, through ``cli.main``) on the
tiny ``axpb`` task against a FAKE model server on loopback (not a real LLM), one iteration of
B·N·K = 1·8·2 = 16 executor calls. After ``--calls-before`` executor answers the server stops
listening (and drops kept-alive connections) for ``--outage`` seconds, then comes back on the
same port (``FakeOpenAIServer.outage``).

* ``default``: the model's default retry window (``RetryPolicy.retry_for_s``, 300 s): the outage
  costs a wait, no call is lost;
* ``short``: ``--retry-for`` seconds, shorter than the outage: the calls it catches fail, the
  execute step stays open and the run stops (exit 4); ``--resume`` once the server is back makes
  exactly the lost calls again and completes (exit 0).

Printed per arm: exit codes, wall time, the ledger's calls by role and status, and the report's
candidates per iteration.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from accelopt_nb.cli import main as cli  # noqa: E402
from accelopt_nb.fake_model.nki_model import FakeNKIModel, double_tile, role_of, set_tile, write_axpb_problem  # noqa: E402
from accelopt_nb.fake_model.server import FakeOpenAIServer  # noqa: E402
from accelopt_nb.store import RunStore  # noqa: E402

MODEL = "fake-nki-model"


def responder(srv: FakeOpenAIServer, calls_before: int, outage_s: float, events: dict):
    model = FakeNKIModel(plans=["DOUBLE the tile width.", "Use 512-column tiles: WIDE512.",
                                "NARROW to 64 columns."],
                         rewrites=[("DOUBLE", double_tile), ("WIDE512", set_tile(512)), ("NARROW", set_tile(64))])
    lock = threading.Lock()

    def answer(body: dict):
        if role_of(body) == "executor":
            with lock:
                events["executor"] = events.get("executor", 0) + 1
                if events["executor"] == calls_before and "down_at" not in events:
                    events["down_at"] = time.monotonic()
                    events["restart"] = srv.outage(outage_s)
        return model.responder(body)
    return answer


def optimize(run_dir: Path, task: Path, kernel: Path, url: str, *extra: str) -> tuple[int, str]:
    argv = ["optimize", "axpb", "--task", str(task), "--kernel", str(kernel), "--preset", "smoke",
            "--shapes", "small", "-T", "1", "-B", "1", "-N", "8", "-K", "2", "--base-url", url, "--model", MODEL,
            "--run-dir", str(run_dir), "--no-progress", "--skip-check", "--workers", "2", *extra]
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        rc = cli(argv)
    return rc, out.getvalue()


def arm(name: str, root: Path, args: argparse.Namespace) -> dict:
    task, kernel = write_axpb_problem(root / "problem")
    run_dir = root / name
    extra = ["--retry-for", str(args.retry_for)] if name == "short" else []
    events: dict = {}
    with FakeOpenAIServer(models=[MODEL]) as srv:
        srv.responder = responder(srv, args.calls_before, args.outage, events)
        t0 = time.monotonic()
        rc, out = optimize(run_dir, task, kernel, srv.url, *extra)
        codes, lines = [rc], [out]
        if rc == 4:   # the step stayed open: resume once the server is back, as a user would
            events["restart"].join()
            rc2, out2 = optimize(run_dir, task, kernel, srv.url, "--resume", *extra)
            codes.append(rc2)
            lines.append(out2)
        wall = time.monotonic() - t0
        if "restart" in events:
            events["restart"].join()
    store = RunStore.open(run_dir)
    run_id = store.latest_run_id()
    calls = store.llm_calls_df(run_id)
    by_status = {f"{r}/{s}": int(n) for (r, s), n in calls.groupby(["role", "status"]).size().items()}
    report = json.loads(next(run_dir.glob(f"report-{run_id}.json")).read_text())
    cand = [h.get("candidates") for h in report["history"]]
    text = lines[-1]
    cand_line = next((ln.strip() for ln in text.splitlines() if "candidates per iteration" in ln), "")
    stopped = next((ln.strip() for ln in lines[0].splitlines() if "stopped:" in ln), "")
    return {"arm": name, "exit_codes": codes, "wall_s": round(wall, 1), "calls": by_status, "candidates": cand,
            "report_line": cand_line, "stopped": stopped}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--outage", type=float, default=60.0, help="seconds the server is down")
    ap.add_argument("--retry-for", type=float, default=20.0, help="the short arm's retry window, s")
    ap.add_argument("--calls-before", type=int, default=4, help="executor answers before the outage")
    ap.add_argument("--arms", nargs="+", default=["default", "short"], choices=["default", "short"])
    ap.add_argument("--json", type=Path, help="write the results here")
    args = ap.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="accelopt-outage-") as tmp:
        for name in args.arms:
            r = arm(name, Path(tmp), args)
            results.append(r)
            print(f"{name:<8} exit codes {r['exit_codes']}  wall {r['wall_s']} s  calls {r['calls']}", flush=True)
            if r["stopped"]:
                print(f"         first run: {r['stopped']}")
            print(f"         report: {r['report_line']}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
