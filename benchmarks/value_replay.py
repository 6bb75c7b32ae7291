"""Loop replay with values: the same outputs and trace as running every iteration, and the time it saves.

For every kernel, side by side in one run: NumPy fp32 computing the same result, the simulation with
values running every loop iteration (``SimOptions(loop_replay=False)``) and with loop replay (the
default: probe iterations run, the others re-run their recorded memory effects, see
``accelopt_nb.sim.replay.values``), whether the outputs are bit-equal and the traces equal field by field, and
the share of instructions replayed. Cases as in ``benchmarks/sim_speed.py`` (our 14 at a preset, the
arange/mask kernel, with ``--accelopt-repo DIR`` the paper's 14 unchanged at the paper's shapes).

CPU seconds of this process (``time.process_time``), best of ``--repeat`` rounds, each round NumPy, full,
replay (interleaved, as in ``sim_speed.py``).

    python benchmarks/value_replay.py [--accelopt-repo DIR] [--no-ours] [--only adamw] [--repeat 2]
"""
from __future__ import annotations

import gc
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from sim_speed import Case, failure_text, geomean, replay_table, timed  # noqa: E402

from accelopt_nb.sim import SimOptions, load_kernel, simulate  # noqa: E402
from accelopt_nb.sim.trace import trace_fields  # noqa: E402

FULL = SimOptions(loop_replay=False)


def measure(case: Case, repeat: int) -> dict:
    row: dict = {"name": case.name}
    try:
        host, nki_inputs = case.make()
        kernel = load_kernel(case.kernel_path)
        best: dict[str, float] = {}
        for _ in range(max(1, repeat)):
            for key, fn in (("numpy", lambda: case.numpy_fp32(*host)),
                            ("full", lambda: simulate(kernel, *nki_inputs, options=FULL)),
                            ("replay", lambda: simulate(kernel, *nki_inputs))):
                gc.collect()
                t, res = timed(fn)
                best[key] = min(t, best.get(key, t))
                if key != "numpy":
                    row[key + "_res"] = res
                del res
        full, fast = row.pop("full_res"), row.pop("replay_res")
        row.update(best)
        row["instructions"] = len(fast.trace)
        row["replayed"] = fast.trace.replayed / max(1, len(fast.trace))
        row["same_values"] = len(full.outputs) == len(fast.outputs) and all(
            a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")
            for a, b in zip(full.outputs, fast.outputs))
        row["same_trace"] = trace_fields(full.trace) == trace_fields(fast.trace)
        row["l2"] = case.error(list(fast.outputs), host)
    except Exception as exc:  # report and go on: one failing kernel must not hide the others
        row["failure"] = failure_text(exc)
    return row


def main() -> None:
    def summary(ok: list[dict]) -> str:
        return (f"full/replay {geomean([r['full'] / r['replay'] for r in ok]):.2f}; "
                f"values equal {sum(r['same_values'] for r in ok)}/{len(ok)}, "
                f"traces equal {sum(r['same_trace'] for r in ok)}/{len(ok)}")

    replay_table(__doc__, "loop replay with values", measure,
                 [("full/replay", "---:"), ("rel L2", "---:"), ("same values", "---"), ("same trace", "---")],
                 lambda r: [f"{r['full'] / r['replay']:.2f}", f"{r['l2']:.1e}", "yes" if r["same_values"] else "NO",
                            "yes" if r["same_trace"] else "NO"], summary)


if __name__ == "__main__":
    main()
