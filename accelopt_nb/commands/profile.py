"""`accelopt profile KERNEL.py --task TASK.py`: correctness and the Trainium profile of one kernel.

By default the kernel goes through the evaluation service, like ``accelopt evaluate``: sandboxed,
checked on the paper's seeds and the task's adversarial inputs, then profiled (estimated by the
performance model on the simulator, measured with neuron-profile on ``--backend neuron``); the
status values are the service's. ``--trace-only`` skips arithmetic and correctness and runs the
simulator in-process to get the instruction stream only, for fast profiling of large shapes.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NAME = "profile"
HELP = "simulate a kernel against an NKIBench task and print its estimated Trainium profile"

DEFAULT_TOLERANCE = 2e-5
SEED = 42


@dataclass
class ProfileRun:
    """Everything `accelopt profile` reports for one kernel (reusable by the evaluation service)."""

    kernel: str
    task: str
    hw: str
    trace_only: bool
    correct: bool | None                  # None when correctness was not checked
    errors: list[float] = field(default_factory=list)
    tolerance: float = DEFAULT_TOLERANCE
    profile: Any = None                   # accelopt_nb.perf.Profile

    def to_dict(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "task": self.task, "hw": self.hw, "trace_only": self.trace_only,
                "correct": self.correct, "l2_relative_errors": self.errors,
                "max_l2_relative_error": max(self.errors) if self.errors else None,
                "tolerance": self.tolerance, "profile": self.profile.to_dict() if self.profile else None}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", choices=("simulator", "neuron"), default="simulator",
                        help="simulator (default; estimated profile) or neuron (real Trainium, measured)")
    parser.add_argument("--seeds", type=int, nargs="+", default=None,
                        help="input seeds of the correctness check (default: the paper's 0 21 42 63 84)")
    parser.add_argument("--no-adversarial", action="store_true", help="skip the task's adversarial inputs")
    parser.add_argument("--timeout", type=float, default=180.0, help="wall-time limit, s (default 180)")
    parser.add_argument("--memory-mb", type=int, default=4096, help="memory limit, MiB (default 4096)")
    parser.add_argument("--no-cache", action="store_true", help="do not read or write the result cache")
    parser.add_argument("kernel", type=Path, help="kernel file written against neuronxcc.nki")
    parser.add_argument("--task", type=Path, required=True,
                        help="NKIBench-format task module (get_inputs, forward, transform_to_nki_inputs, "
                             "transform_nki_outputs)")
    parser.add_argument("--hw", default="trn1", help="hardware: trn1 or trn2 (with --trace-only also a YAML config path)")
    parser.add_argument("--kernel-name", default="kernel", help="kernel function name (default: kernel)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--trace-only", action="store_true",
                        help="skip arithmetic and the correctness check; only build the instruction stream")
    parser.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE,
                        help=f"max L2 relative error per output (default {DEFAULT_TOLERANCE})")


def profile_kernel(kernel: Path, task: Path, *, hw: str = "trn1", kernel_name: str = "kernel",
                   trace_only: bool = False, tolerance: float = DEFAULT_TOLERANCE) -> ProfileRun:
    """Simulate ``kernel`` on ``task``'s inputs, check it, and estimate its profile."""
    from accelopt_nb.perf import estimate
    from accelopt_nb.sim import SimOptions, load_kernel, simulate
    from accelopt_nb.taskfile import as_output_tuple, l2_relative_error, load_task

    t = load_task(task)
    kern = load_kernel(kernel, name=kernel_name)
    inputs = t.get_inputs(seed=SEED)
    nki_inputs = t.to_nki(inputs)
    result = simulate(kern, *nki_inputs, options=SimOptions(trace_only=trace_only))
    run = ProfileRun(kernel=str(kernel), task=str(task), hw=str(hw), trace_only=trace_only, correct=None,
                     tolerance=tolerance)
    if not trace_only:
        ref_raw = t.forward(*inputs)
        ref = as_output_tuple(ref_raw)
        k_res = result.outputs[0] if len(result.outputs) == 1 else result.outputs
        outs = t.from_nki(k_res, ref_raw)
        if len(outs) != len(ref):
            from accelopt_nb.errors import ProblemError
            raise ProblemError(f"kernel produced {len(outs)} output(s) after transform_nki_outputs, "
                               f"the reference has {len(ref)}")
        run.errors = [l2_relative_error(o, r) for o, r in zip(outs, ref)]
        run.correct = all(e <= tolerance for e in run.errors)
    run.profile = estimate(result.trace, hw=hw)
    return run


def format_run(run: ProfileRun) -> str:
    from accelopt_nb.perf import format_profile

    lines = [f"kernel   {run.kernel}", f"task     {run.task}"]
    if run.correct is None:
        lines.append("correct  not checked (--trace-only)")
    else:
        errs = ", ".join(f"{e:.3g}" for e in run.errors)
        lines.append(f"correct  {'yes' if run.correct else 'NO'} (L2 relative error {errs}; tolerance {run.tolerance:g})")
    lines.append("")
    lines.append(format_profile(run.profile))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if args.trace_only:
        result = profile_kernel(args.kernel, args.task, hw=args.hw, kernel_name=args.kernel_name,
                                trace_only=True, tolerance=args.tolerance)
        if args.json:
            print(json.dumps(dict(result.to_dict(), status="not_checked"), indent=2))
        else:
            print(format_run(result))
        return 0
    return _run_service(args)


def _run_service(args: argparse.Namespace) -> int:
    from accelopt_nb.errors import ConfigError
    from accelopt_nb.evaluation import EvalOptions, Status, evaluate_task_file
    from accelopt_nb.perf import format_profile

    if not Path(args.task).is_file():
        raise ConfigError(f"task file not found: {args.task}")
    options = EvalOptions(timeout_s=args.timeout, memory_mb=args.memory_mb, tolerance=args.tolerance,
                          adversarial=not args.no_adversarial, kernel_name=args.kernel_name)
    if args.seeds:
        options = EvalOptions(**{**options.__dict__, "seeds": tuple(args.seeds)})
    result = evaluate_task_file(args.kernel, args.task, backend=args.backend, hw=args.hw, options=options,
                                cache=not args.no_cache)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print(f"kernel   {args.kernel}\ntask     {args.task}")
        print(result.summary())
        if result.profile:
            print()
            print(format_profile(result.profile))
    return 0 if result.status is Status.CORRECT else 1
