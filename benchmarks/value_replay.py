"""Loop replay with values: the same outputs and trace as running every iteration, and the time it saves.

For every kernel, side by side in one run: NumPy fp32 computing the same result, the simulation with
values running every loop iteration (``SimOptions(loop_replay=False)``) and with loop replay (the
default: probe iterations run, the others re-run their recorded memory effects, see
``accelopt_nb.sim.effects``), whether the outputs are bit-equal and the traces equal field by field, and
the share of instructions replayed. Cases as in ``benchmarks/sim_speed.py`` (our 14 at a preset, the
arange/mask kernel, with ``--accelopt-repo DIR`` the paper's 14 unchanged at the paper's shapes).

CPU seconds of this process (``time.process_time``), best of ``--repeat`` rounds, each round NumPy, full,
replay (interleaved, as in ``sim_speed.py``).

    python benchmarks/value_replay.py [--accelopt-repo DIR] [--no-ours] [--only adamw] [--repeat 2]
"""
from __future__ import annotations

import argparse
import gc
import sys
import traceback
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).parent))
from sim_speed import Case, arange_mask_case, our_cases, paper_cases, timed  # noqa: E402

from accelopt_nb.sim import SimOptions, load_kernel, simulate  # noqa: E402
from accelopt_nb.sim.replay import trace_fields  # noqa: E402

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
                with threadpool_limits(limits=1, user_api="blas"):
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
        row["failure"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"[:160]
        if "-v" in sys.argv:
            traceback.print_exc()
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="paper", help="shape preset of our problems (paper or small)")
    ap.add_argument("--only", default="", help="comma-separated problem names")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--accelopt-repo", type=Path, default=None, help="checkout of github.com/zhang677/AccelOpt")
    ap.add_argument("--no-ours", action="store_true", help="skip our 14 baselines and the arange/mask kernel")
    ap.add_argument("--arange-shape", default="4000x3000", help="rows x cols of the arange/mask kernel")
    ap.add_argument("-v", action="store_true", help="print the traceback of kernels that raise")
    args = ap.parse_args()
    only = {s.strip() for s in args.only.split(",") if s.strip()} or None
    cases = [] if args.no_ours else our_cases(args.preset, only)
    if not args.no_ours and (not only or "arange_mask" in only):
        rows_, cols_ = (int(v) for v in args.arange_shape.lower().split("x"))
        cases.append(arange_mask_case(rows_, cols_))
    if args.accelopt_repo is not None:
        cases += paper_cases(args.accelopt_repo, only)
    print(f"# loop replay with values, CPU seconds, best of {args.repeat}")
    print("| kernel | instr | replayed | numpy s | full s | replay s | full/np | replay/np | full/replay "
          "| rel L2 | same values | same trace |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    rows = []
    for case in cases:
        r = measure(case, args.repeat)
        rows.append(r)
        if "failure" in r:
            print(f"| {r['name']} | {r['failure']} |", flush=True)
            continue
        print(f"| {r['name']} | {r['instructions']} | {100 * r['replayed']:.0f}% | {r['numpy']:.3f} | {r['full']:.2f} "
              f"| {r['replay']:.2f} | {r['full'] / r['numpy']:.2f} | {r['replay'] / r['numpy']:.2f} "
              f"| {r['full'] / r['replay']:.2f} | {r['l2']:.1e} | {'yes' if r['same_values'] else 'NO'} "
              f"| {'yes' if r['same_trace'] else 'NO'} |", flush=True)
    ok = [r for r in rows if "failure" not in r]
    if ok:
        gm = lambda xs: float(np.exp(np.mean(np.log(xs))))  # noqa: E731
        print(f"geometric mean: full/np {gm([r['full'] / r['numpy'] for r in ok]):.2f}, "
              f"replay/np {gm([r['replay'] / r['numpy'] for r in ok]):.2f}, "
              f"full/replay {gm([r['full'] / r['replay'] for r in ok]):.2f}; "
              f"values equal {sum(r['same_values'] for r in ok)}/{len(ok)}, "
              f"traces equal {sum(r['same_trace'] for r in ok)}/{len(ok)}")


if __name__ == "__main__":
    main()
