"""`accelopt simulate KERNEL.py --task TASK.py`: run a kernel on a task's inputs and check it."""
from __future__ import annotations

import argparse
import time

import numpy as np

from accelopt_nb.commands import emit_json
from accelopt_nb.errors import KernelError
from accelopt_nb.evaluation.job import PROFILE_SEED
from accelopt_nb.sim import SimOptions, load_kernel, simulate
from accelopt_nb.taskfile import as_output_tuple, l2_relative_error, load_task
from nkibench.problem import DEFAULT_TOLERANCE

NAME = "simulate"
HELP = "run an NKI kernel file on the CPU simulator against an NKIBench-format task module"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("kernel", help="kernel .py file (imports neuronxcc.nki, defines `kernel`)")
    p.add_argument("--task", required=True, help="task .py file: get_inputs, forward, transform_to_nki_inputs, "
                   "transform_nki_outputs")
    p.add_argument("--seed", type=int, default=PROFILE_SEED, help=f"seed for get_inputs (default {PROFILE_SEED})")
    p.add_argument("--rtol", type=float, default=DEFAULT_TOLERANCE,
                   help=f"L2 relative error tolerance (default {DEFAULT_TOLERANCE:g})")
    p.add_argument("--name", default="kernel", help="kernel function name (default: kernel)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--hw", default=None, help="target hardware (trn1, trn2 or a hardware YAML): generation-specific "
                   "semantics and API availability follow it (default: unknown target, every generation's APIs "
                   "accepted)")


def run_simulation(kernel_path: str, task_path: str, *, seed: int = PROFILE_SEED, rtol: float = DEFAULT_TOLERANCE,
                   name: str = "kernel", hw: str | None = None) -> dict:
    """Simulate a kernel on a task's inputs; return a JSON-ready report (never raises KernelError)."""
    task = load_task(task_path)
    report: dict = {"kernel": kernel_path, "task": task_path, "seed": seed, "rtol": rtol, "hw": hw}
    inputs = task.get_inputs(seed)
    ref_raw = task.forward(*inputs)
    ref = as_output_tuple(ref_raw)
    t0 = time.perf_counter()
    try:
        kern = load_kernel(kernel_path, name=name)
        result = simulate(kern, *task.to_nki(inputs), options=SimOptions(hw=hw))
    except KernelError as exc:
        report.update(status="error", error=exc.to_dict(), correct=False)
        return report
    report["sim_seconds"] = round(time.perf_counter() - t0, 4)
    outs = task.from_nki(result.outputs if len(result.outputs) > 1 else result.outputs[0], ref_raw)
    per_output = []
    ok = len(outs) == len(ref)
    for i, (o, r) in enumerate(zip(outs, ref)):
        o, r = np.asarray(o), np.asarray(r)
        entry = {"index": i, "shape": list(o.shape), "ref_shape": list(r.shape)}
        if o.shape != r.shape:
            entry.update(match=False, reason="shape mismatch")
            ok = False
        else:
            err = l2_relative_error(o, r)
            entry.update(l2_rel_error=err, match=bool(err < rtol))
            ok = ok and err < rtol
        per_output.append(entry)
    report.update(status="correct" if ok else "incorrect", correct=ok, outputs=per_output,
                  instructions=len(result.trace), log=result.log[:50], warnings=result.warnings)
    if len(outs) != len(ref):
        report["reason"] = f"kernel produced {len(outs)} outputs, reference has {len(ref)}"
    return report


def run(args: argparse.Namespace) -> int:
    report = run_simulation(args.kernel, args.task, seed=args.seed, rtol=args.rtol, name=args.name, hw=args.hw)
    if args.json:
        emit_json(report, indent=2, default=float)
    else:
        if report["status"] == "error":
            e = report["error"]
            print(f"ERROR {e['type']} at {e['file']}:{e['line']}\n  api:  {e['api']}\n  {e['message']}\n  rule: {e['rule']}")
        else:
            print(f"{report['status'].upper()}  ({report['instructions']} instructions, {report['sim_seconds']} s)")
            for o in report["outputs"]:
                err = o.get("l2_rel_error")
                print(f"  output {o['index']} shape {tuple(o['shape'])}: "
                      + (f"L2 rel error {err:.3e} ({'ok' if o['match'] else 'FAIL'}, tol {args.rtol:g})"
                         if err is not None else o.get("reason", "")))
            for line in report["log"]:
                print(f"  [device_print] {line}")
    return 0 if report.get("correct") else 1
