"""Unattended smoke runs against a FAKE model server that injects faults; does anything crash?

    .venv/bin/python benchmarks/unattended_smoke.py [--runs 20] [--parallel 2] [--workers 2] [--seed 0]

``--runs`` searches (smoke preset, NKIBench matmul at the small shapes) run as experiment arms,
``--parallel`` at a time, sharing ``--workers`` evaluation workers. The fake server answers as the
package's fake NKI model, but injects HTTP 500/503, 429 with Retry-After, stalls past the
client's timeout, truncated answers (finish_reason: length), empty answers and refusals
(:mod:`accelopt_nb.fake_model.faults`). A run whose step lost every call is resumable, not
crashed; the batch is run a second time (resume) to finish those.

Printed: runs complete after each pass, crashes (exceptions other than the expected, resumable
AccelOptError outcomes), the faults injected, and whether the ledgers of all runs equal what the
server served: HTTP requests vs ledger attempts, and tokens served vs tokens recorded.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from accelopt_nb.experiments import run_arms  # noqa: E402
from accelopt_nb.fake_model.faults import FaultInjector  # noqa: E402
from accelopt_nb.fake_model.server import FakeOpenAIServer  # noqa: E402
from accelopt_nb.reproduce.offline import fake_nki_model  # noqa: E402
from accelopt_nb.store import DEFAULT_FILENAME, RunStore  # noqa: E402

MODEL = {"model": "fake-nki", "price": "gpt-oss-120b@self-hosted", "timeout_s": 1.5,
         "retry": {"max_attempts": 4, "base_delay_s": 0.05, "max_delay_s": 0.2}}


def ledger_totals(root: Path) -> dict[str, int]:
    totals = {"calls": 0, "attempts": 0, "prompt_tokens": 0, "completion_tokens": 0}
    for db in root.glob(f"*/*/{DEFAULT_FILENAME}"):
        with RunStore.open(db.parent) as store:
            for row in store.rows("llm_calls"):
                totals["calls"] += 1
                totals["attempts"] += int(row["attempts"] or 0)
                totals["prompt_tokens"] += int(row["prompt_tokens"] or 0)
                totals["completion_tokens"] += int(row["completion_tokens"] or 0)
    return totals


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    arms = [{"name": f"run{i:02d}", "preset": "smoke", "overrides": {"seed": i}} for i in range(args.runs)]
    faults = FaultInjector(fake_nki_model().responder, seed=args.seed)
    crashes = 0
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="accelopt-unattended-") as tmp, \
            FakeOpenAIServer(models=["fake-nki"], responder=faults) as srv:
        root = Path(tmp)
        for attempt in (1, 2):
            try:
                outcomes = run_arms(arms, ["matmul"], root, default_model={**MODEL, "base_url": srv.url},
                                    progress=False, parallel=args.parallel, eval_workers=args.workers)
            except Exception:  # a crash: anything that is not a resumable outcome
                crashes += 1
                traceback.print_exc()
                continue
            done = sum(o.complete for o in outcomes)
            reasons = sorted({(o.error or "")[:90] for o in outcomes if not o.complete})
            print(f"pass {attempt}: {done}/{len(outcomes)} runs complete"
                  + (f"; not complete: {reasons}" if reasons else ""), flush=True)
        ledger = ledger_totals(root)
        served = {"requests": srv.chat_requests,
                  "prompt_tokens": sum(u.get("prompt_tokens", 0) for u in srv.served),
                  "completion_tokens": sum(u.get("completion_tokens", 0) for u in srv.served)}
    print(f"crashes: {crashes}; wall {time.perf_counter() - t0:.0f} s")
    print(f"faults injected: {dict(faults.injected)}")
    print(f"server: {served['requests']} HTTP requests, {len(srv.served)} answers served")
    print(f"ledger: {ledger['calls']} calls, {ledger['attempts']} HTTP attempts")
    equal = (ledger["attempts"] == served["requests"] and ledger["prompt_tokens"] == served["prompt_tokens"]
             and ledger["completion_tokens"] == served["completion_tokens"])
    print(f"ledger equals what the server served: {equal} "
          f"(attempts {ledger['attempts']} vs {served['requests']}, prompt tokens {ledger['prompt_tokens']} vs "
          f"{served['prompt_tokens']}, output tokens {ledger['completion_tokens']} vs {served['completion_tokens']})")
    return 0 if crashes == 0 and equal else 1


if __name__ == "__main__":
    sys.exit(main())
