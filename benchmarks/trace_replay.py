"""Trace-only loop replay: the same trace, in less time, and what screening then costs.

For every kernel, side by side in one run: NumPy fp32 computing the same result, the trace-only
simulation with every loop iteration executed (``SimOptions(loop_replay=False)``) and with loop replay
(the default), whether the two traces are equal field by field and give the same performance-model
profile, the share of instructions replay extrapolated, and the time of ``accelopt_nb.perf.estimate``
on the trace (screening a candidate costs trace-only simulation + estimate). Cases come from
``benchmarks/sim_speed.py``: our 14 NKIBench baselines at a preset, our arange/mask-heavy kernel
(``benchmarks/kernels/arange_mask.py``, ragged tiles on both axes) and, with ``--accelopt-repo DIR``,
the paper's 14 baselines unchanged at the paper's shapes.

CPU seconds of this process (``time.process_time``), best of ``--repeat``; ratios are to NumPy, timed after
one untimed call (the first call's page faults vary between runs).

    python benchmarks/trace_replay.py --accelopt-repo DIR --no-ours [--only matmul,lora] [--repeat 2]
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from sim_speed import Case, best_of, failure_text, geomean, replay_table  # noqa: E402

from accelopt_nb.perf import estimate  # noqa: E402
from accelopt_nb.sim import SimOptions, load_kernel, simulate  # noqa: E402
from accelopt_nb.sim.trace import trace_fields  # noqa: E402


def measure(case: Case, repeat: int) -> dict:
    row: dict = {"name": case.name}
    try:
        host, nki_inputs = case.make()
        case.numpy_fp32(*host)   # untimed: the first call's page faults made NumPy up to 6x slower
        row["numpy"], _ = best_of(lambda: case.numpy_fp32(*host), repeat)
        kernel = load_kernel(case.kernel_path)
        row["full"], full = best_of(lambda: simulate(kernel, *nki_inputs,
                                                     options=SimOptions(trace_only=True, loop_replay=False)), repeat)
        row["replay"], fast = best_of(lambda: simulate(kernel, *nki_inputs, options=SimOptions(trace_only=True)),
                                      repeat)
        row["instructions"] = len(fast.trace)
        row["replayed"] = fast.trace.replayed / max(1, len(fast.trace))
        row["same_trace"] = trace_fields(full.trace) == trace_fields(fast.trace)
        del full
        row["estimate"], prof_fast = best_of(lambda: estimate(fast.trace), repeat)
        row["same_profile"] = prof_fast.to_dict() == estimate(
            simulate(kernel, *nki_inputs, options=SimOptions(trace_only=True, loop_replay=False)).trace).to_dict()
    except Exception as exc:  # report and go on: one failing kernel must not hide the others
        row["failure"] = failure_text(exc)
    return row


def main() -> None:
    def summary(ok: list[dict]) -> str:
        return (f"(replay+estimate)/np {geomean([(r['replay'] + r['estimate']) / r['numpy'] for r in ok]):.2f}; "
                f"worst replay/np {max(r['replay'] / r['numpy'] for r in ok):.2f}; "
                f"traces equal {sum(r['same_trace'] for r in ok)}/{len(ok)}, "
                f"profiles equal {sum(r['same_profile'] for r in ok)}/{len(ok)}")

    replay_table(__doc__, "trace-only loop replay", measure,
                 [("estimate s", "---:"), ("(replay+est)/np", "---:"), ("same trace", "---"), ("same profile", "---")],
                 lambda r: [f"{r['estimate']:.2f}", f"{(r['replay'] + r['estimate']) / r['numpy']:.2f}",
                            "yes" if r["same_trace"] else "NO", "yes" if r["same_profile"] else "NO"], summary)


if __name__ == "__main__":
    main()
