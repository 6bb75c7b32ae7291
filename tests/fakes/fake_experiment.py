"""A fake experiment loop that writes to the run store, for the crash (SIGKILL) test.

It stands in for the real search loop at the process boundary: each iteration runs the
steps ``plan``, ``execute``, ``select``; each step pays for LLM calls (recorded at once
through the ledger path, ``record_llm_call``) and buffers deterministic kernels and
evaluations that commit with the step. It resumes from ``RunStore.resume_point``.

Progress goes to stdout, one flushed line per event, so the test knows what the process
had done when it was killed:

    RESUME <iteration> <step>      where this process starts
    BEGIN <iteration> <step>
    CALL <call_id>                 an LLM call was committed
    PAUSED                         (with PAUSE_AT_CALL) blocked mid-step, waiting to be killed
    DONE <iteration> <step>        the step's commit returned
    FINISHED

Usage: python fake_experiment.py STORE_DIR RUN_ID ITERATIONS [DELAY_S [PAUSE_AT_CALL]]

With PAUSE_AT_CALL = n > 0 the process stops inside a step right after its n-th LLM call
and waits on stdin, so a test can kill it at a known point without racing it.
"""
from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path

# Run as a script from anywhere: make the project importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from accelopt_nb.store import RunStore  # noqa: E402

STEPS = ("plan", "execute", "select")
PROBLEM = "softmax"
ROWS_PER_STEP = 3
CONFIG = {"problem": PROBLEM, "steps": list(STEPS), "rows_per_step": ROWS_PER_STEP}


def kernel_source(iteration: int, step: str, j: int) -> str:
    return f"# iteration {iteration}, step {step}, candidate {j}\ndef kernel(x):\n    return x * {j + 1}\n"


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main(store_dir: str, run_id: str, iterations: int, delay: float, pause_at_call: int = 0) -> None:
    store = RunStore.open(store_dir)
    store.create_run(run_id, CONFIG)
    store.add_problem(run_id, PROBLEM, {"shape": [4, 128]})
    it, step = store.resume_point(run_id, STEPS, scope=PROBLEM)
    say(f"RESUME {it} {step}")
    index = STEPS.index(step)
    calls = 0
    while it < iterations:
        for step in STEPS[index:]:
            say(f"BEGIN {it} {step}")
            with store.step(run_id, it, step, scope=PROBLEM) as st:
                for j in range(ROWS_PER_STEP):
                    call_id = uuid.uuid4().hex
                    store.record_llm_call({"call_id": call_id, "run_id": run_id, "iteration": it,
                                           "role": step, "model": "fake", "status": "ok",
                                           "prompt_tokens": 100, "completion_tokens": 10, "cost_usd": 0.001})
                    say(f"CALL {call_id}")
                    calls += 1
                    if calls == pause_at_call:
                        say("PAUSED")
                        sys.stdin.readline()
                    kid = st.add_kernel(problem_id=PROBLEM, source=kernel_source(it, step, j), iteration=it,
                                        plan_id=f"{step}-{j}")
                    st.add_evaluation(kernel_id=kid, backend="fake", status="ok", correct=True,
                                      latency_us=float(10 * it + j))
                    time.sleep(delay)
            say(f"DONE {it} {step}")
        index = 0
        it += 1
    store.set_run_status(run_id, "finished")
    say("FINISHED")
    store.close()


if __name__ == "__main__":
    args = sys.argv[1:]
    main(args[0], args[1], int(args[2]), float(args[3]) if len(args) > 3 else 0.01,
         int(args[4]) if len(args) > 4 else 0)
