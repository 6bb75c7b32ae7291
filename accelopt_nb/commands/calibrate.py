"""`accelopt calibrate KERNEL... --task TASK... --profiles JSON... --out hw.yaml`: fit the model to real profiles.

For a user with Trainium access: profile some kernels with neuron-profile (summary-json), point
this command at the kernels, their tasks and the JSONs; it traces each kernel (trace-only
simulation at the task's shapes), fits the performance model's few free hardware parameters
(``accelopt_nb.perf.calibrate.FREE_PARAMETERS``) and writes a ``base: trn1`` YAML that
``--hw FILE`` (and ``estimate(hw=FILE)``) then uses. With three or more kernels it also runs
leave-one-out and writes the held-out error as the file's ``model_error``; with ``--source`` labels
from two or more sources it also fits on all but one source and reports each source held out.
Only held-out numbers say what to expect on new kernels: the in-sample error is printed for
reference only (docs/perf_model.md §7).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

NAME = "calibrate"
HELP = "fit the performance model's free hardware parameters to neuron-profile summaries of your kernels"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kernels", type=Path, nargs="+", help="kernel files (written against neuronxcc.nki)")
    parser.add_argument("--task", type=Path, nargs="+", required=True,
                        help="NKIBench-format task module per kernel (or one for all kernels)")
    parser.add_argument("--profiles", type=Path, nargs="+", required=True,
                        help="neuron-profile summary-json per kernel, in the same order (total_time or latency)")
    parser.add_argument("--out", type=Path, required=True, help="hardware YAML to write (base: --base)")
    parser.add_argument("--base", default="trn1", help="hardware preset or YAML the fit starts from (default trn1)")
    parser.add_argument("--kernel-name", default="kernel", help="kernel function name (default: kernel)")
    parser.add_argument("--no-loo", action="store_true", help="skip the leave-one-out estimate of model_error")
    parser.add_argument("--source", nargs="+", default=None,
                        help="where each measurement comes from (one label per kernel, or one for all): with two or "
                             "more sources each is also held out in turn (fit on the others)")


def _traces(kernels: list[Path], tasks: list[Path], kernel_name: str) -> list:
    from accelopt_nb.errors import ConfigError
    from accelopt_nb.evaluation.job import PROFILE_SEED
    from accelopt_nb.sim import SimOptions, load_kernel, simulate
    from accelopt_nb.taskfile import load_task

    if len(tasks) not in (1, len(kernels)):
        raise ConfigError(f"calibrate: give one --task for all kernels or one per kernel "
                          f"({len(kernels)} kernels, {len(tasks)} tasks)")
    traces = []
    for k, kernel in enumerate(kernels):
        t = load_task(tasks[0] if len(tasks) == 1 else tasks[k])
        result = simulate(load_kernel(kernel, name=kernel_name), *t.to_nki(t.get_inputs(seed=PROFILE_SEED)),
                          options=SimOptions(trace_only=True))
        traces.append(result.trace)
    return traces


def run(args: argparse.Namespace) -> int:
    from accelopt_nb.errors import ConfigError
    from accelopt_nb.perf.calibrate import (error_stats, fit, leave_one_out, leave_one_source_out,
                                            read_profile_latency, write_hw_yaml)

    if len(args.profiles) != len(args.kernels):
        raise ConfigError(f"calibrate: need one --profiles JSON per kernel ({len(args.kernels)} kernels, "
                          f"{len(args.profiles)} profiles)")
    measured = [read_profile_latency(p) for p in args.profiles]
    traces = _traces(list(args.kernels), list(args.task), args.kernel_name)

    def say(msg: str) -> None:
        print(f"  {msg}", file=sys.stderr, flush=True)

    sources = list(args.source) if args.source else ["measured"]
    if len(sources) not in (1, len(traces)):
        raise ConfigError(f"calibrate: give one --source for all kernels or one per kernel "
                          f"({len(traces)} kernels, {len(sources)} labels)")
    if len(sources) == 1:
        sources = sources * len(traces)
    cal = fit(traces, measured, base=args.base, progress=say)
    print(f"{'kernel':40s} {'measured ms':>12s} {'before':>8s} {'after':>8s}")
    for k, m, rb, ra in zip(args.kernels, measured, cal.ratios_before, cal.ratios_after):
        print(f"{str(k)[-40:]:40s} {m * 1e3:12.4f} {rb:7.3f}x {ra:7.3f}x")
    print(f"RMS log error {cal.error_before:.3f} -> {cal.error_after:.3f} (in sample: the fit saw these kernels)")
    for key, v in cal.overrides.items():
        print(f"  {key}: {v:.6g}")
    if len(traces) >= 3 and not args.no_loo:
        held_out = leave_one_out(traces, measured, names=[str(k) for k in args.kernels], base=args.base,
                                 progress=say)
        err = held_out.median_error - 1
        cal.overrides["model_error"] = round(err, 3)
        print(held_out.format())
        print(f"leave-one-out: median held-out error x{held_out.median_error:.3f} (written as model_error)")
    if len(set(sources)) >= 2 and not args.no_loo:
        print("per source held out (fitted on the other sources):")
        for label, held in leave_one_source_out(traces, measured, sources, base=args.base, progress=say).items():
            st = error_stats([r * m for r, m in zip(held.ratios, held.measured_s)], list(held.measured_s))
            print(f"  {label[:30]:30s} {st.row()}")
    write_hw_yaml(cal, args.out, note=f"{len(traces)} kernel(s)")
    print(f"wrote {args.out}; use it with --hw {args.out}")
    return 0
