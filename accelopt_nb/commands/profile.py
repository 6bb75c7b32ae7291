"""`accelopt profile KERNEL.py --task TASK.py`: correctness and the Trainium profile of one kernel.

By default the kernel goes through the evaluation service, like ``accelopt evaluate``: sandboxed,
checked on the paper's seeds and the task's adversarial inputs, then profiled (estimated by the
performance model on the simulator, measured with neuron-profile on ``--backend neuron``); the
status values are the service's. ``--trace-only`` skips arithmetic and correctness and runs the
simulator in-process to get the instruction stream only, for fast profiling of large shapes.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accelopt_nb.commands import emit_json
from accelopt_nb.evaluation.backends import backend_names
from nkibench.problem import DEFAULT_TOLERANCE

NAME = "profile"
HELP = "simulate a kernel against an NKIBench task and print its estimated Trainium profile"


@dataclass
class ProfileRun:
    """A trace-only profile: the instruction stream's estimated profile, correctness not checked."""

    kernel: str
    task: str
    hw: str
    profile: Any = None                   # accelopt_nb.perf.Profile

    def to_dict(self) -> dict[str, Any]:
        """Shaped like ``EvalResult.to_dict()``: the profile follows the contract (``latency_ms``)."""
        from accelopt_nb.evaluation.backends.simulator import raw_profile
        from accelopt_nb.evaluation.profile import profile_record

        profile = profile_record(raw_profile(self.profile), source="simulator", hw=self.hw).to_dict() \
            if self.profile else None
        return {"status": "not_checked", "kernel": self.kernel, "task": self.task, "hw": self.hw,
                "trace_only": True, "correct": None, "profile": profile}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", choices=backend_names(), default="simulator",
                        help="simulator (default; estimated profile) or neuron (real Trainium, measured)")
    parser.add_argument("--seeds", type=int, nargs="+", default=None,
                        help="input seeds of the correctness check (default: the paper's 0 21 42 63 84)")
    parser.add_argument("--no-adversarial", action="store_true", help="skip the task's adversarial inputs")
    parser.add_argument("--timeout", type=float, default=None, help="wall-time limit, s (default 180)")
    parser.add_argument("--memory-mb", type=int, default=None, help="memory limit, MiB (default 4096)")
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
    parser.add_argument("--tolerance", type=float, default=None,
                        help=f"max L2 relative error per output (default: the task's, {DEFAULT_TOLERANCE:g} unless it says otherwise)")


def profile_kernel(kernel: Path, task: Path, *, hw: str = "trn1", kernel_name: str = "kernel") -> ProfileRun:
    """Trace ``kernel`` on ``task``'s input shapes (no arithmetic) and estimate its profile, in-process."""
    from accelopt_nb.evaluation.backends.simulator import trace_profile
    from accelopt_nb.evaluation.job import PROFILE_SEED
    from accelopt_nb.sim import load_kernel
    from accelopt_nb.taskfile import load_task

    t = load_task(task)
    kern = load_kernel(kernel, name=kernel_name)
    return ProfileRun(kernel=str(kernel), task=str(task), hw=str(hw),
                      profile=trace_profile(kern, t.to_nki(t.get_inputs(seed=PROFILE_SEED)), hw))


def format_run(run: ProfileRun) -> str:
    from accelopt_nb.perf import format_profile

    return "\n".join([f"kernel   {run.kernel}", f"task     {run.task}",
                      "correct  not checked (--trace-only)", "", format_profile(run.profile)])


def run(args: argparse.Namespace) -> int:
    if args.trace_only:
        result = profile_kernel(args.kernel, args.task, hw=args.hw, kernel_name=args.kernel_name)
        if args.json:
            emit_json(result.to_dict(), indent=2)
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
        emit_json(result.to_dict(), indent=2)
    else:
        print(f"kernel   {args.kernel}\ntask     {args.task}")
        print(result.summary())
        if result.profile:
            print()
            print(format_profile(result.profile))
    return 0 if result.status is Status.CORRECT else 1
