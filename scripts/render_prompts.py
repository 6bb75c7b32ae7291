#!/usr/bin/env python
"""Render the planner, executor and summarizer prompts for one NKIBench problem, as sent.

The baseline is evaluated (simulator by default) so the planner prompt shows its real profile.
Give ``--fast KERNEL.py`` to render the summarizer prompt for a real pair (the speedup is
measured); without it the baseline is paired with itself.

    python scripts/render_prompts.py matmul --shapes small --fast accelopt_nb/fake_model/kernels/matmul_column_outer.py
    python scripts/render_prompts.py silu --out prompts_silu/     # one .md file per role
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from accelopt_nb.agents import Executor, Planner, PromptSet, Summarizer, format_profile
from accelopt_nb.agents.prompts import PeakInfo, reference_for_agents
from accelopt_nb.evaluation import evaluate
from accelopt_nb.perf.hardware import presets as hardware_names
from accelopt_nb.renamed import add_renamed
from accelopt_nb.search.memory import MemoryItem
from accelopt_nb.search.problem import SearchProblem

DEMO_PLAN = ("The profile shows the kernel is limited by HBM traffic: the same input tiles are loaded once per "
             "output tile.\n\n**Plan:**\nHoist the loads of the reused operand out of the inner loop so each tile "
             "is read from HBM once and kept in SBUF.")
DEMO_LESSON = MemoryItem(title="Hoist loop-invariant loads", speedup=1.21, summary=(
    "**Hoist loop-invariant loads**\nWhen a tile loaded inside a loop does not depend on that loop's index, "
    "load it once before the loop and reuse it; this removes repeated HBM reads.\nOriginal code:\n```python\n"
    "for j in nl.affine_range(n):\n    w = nl.load(w_hbm[i])\n    acc[j] = nl.multiply(x[j], w)\n```\n"
    "Optimized code:\n```python\nw = nl.load(w_hbm[i])\nfor j in nl.affine_range(n):\n"
    "    acc[j] = nl.multiply(x[j], w)\n```"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("problem")
    ap.add_argument("--shapes", default="small", help="shape preset (default: small)")
    add_renamed(ap, "--preset", "--shapes", dest="shapes")
    ap.add_argument("--hw", default="trn1", choices=hardware_names())
    ap.add_argument("--fast", type=Path, help="a faster kernel for the summarizer example")
    ap.add_argument("--plan", default=DEMO_PLAN, help="the plan text shown to the executor")
    ap.add_argument("--no-memory", action="store_true", help="render the planner without a memory example")
    ap.add_argument("--show-peak", action="store_true", help="include the optional %%-of-peak section")
    ap.add_argument("--fields", default="paper", choices=["paper", "extended", "all"])
    ap.add_argument("--prompts-dir", type=Path, help="templates of your own, or the authors' prompt directory")
    ap.add_argument("--prompt-set", default="paper", choices=["paper", "extended"], help="prompt set (default: paper)")
    ap.add_argument("--show-adversarial", action="store_true", help="show the agents the adversarial generator")
    ap.add_argument("--out", type=Path, help="write planner.md, executor.md, summarizer.md here")
    args = ap.parse_args(argv)

    problem = SearchProblem.from_nkibench(args.problem, args.shapes)
    base = evaluate(args.problem, problem.baseline_source, preset=args.shapes, hw=args.hw)
    if not base.correct:
        print(f"baseline is {base.status.value}: {base.message}", file=sys.stderr)
        return 1
    prompts = PromptSet(args.prompts_dir) if args.prompts_dir else None
    profile = dict(base.profile or {}, latency=base.latency_ms)
    peak = None
    if args.show_peak and problem.peak(args.hw):
        ms, bound = problem.peak(args.hw)
        peak = PeakInfo(percent=100 * ms / base.latency_ms, peak_ms=ms, bound=bound)
    reference = reference_for_agents(problem.reference_source, args.show_adversarial)  # as the search shows it
    planner = Planner(prompts, hw=args.hw, dtypes=problem.dtypes, fields=args.fields,
                      prompt_set=args.prompt_set).messages(
        problem_name=problem.name, reference_source=reference, kernel_source=problem.baseline_source,
        profile_lines=format_profile(profile, fields=args.fields),
        memory_items=[] if args.no_memory else [DEMO_LESSON], peak=peak)
    executor = Executor(prompts, hw=args.hw, dtypes=problem.dtypes, tolerance=problem.tolerance,
                        adversarial=problem.adversarial and args.show_adversarial,
                        prompt_set=args.prompt_set).messages(
        problem_name=problem.name, reference_source=reference, kernel_source=problem.baseline_source,
        plan=args.plan)
    fast_src, fast_ms = problem.baseline_source, base.latency_ms
    if args.fast:
        fast_src = args.fast.read_text()
        fast = evaluate(args.problem, fast_src, preset=args.shapes, hw=args.hw)
        if not fast.correct:
            print(f"--fast kernel is {fast.status.value}: {fast.message}", file=sys.stderr)
            return 1
        fast_ms = fast.latency_ms
    summarizer = Summarizer(prompts, hw=args.hw, measured_on=f"estimated by the {args.hw} performance model",
                            prompt_set=args.prompt_set).messages(
        slow_source=problem.baseline_source, fast_source=fast_src, speedup=base.latency_ms / fast_ms,
        slow_ms=base.latency_ms, fast_ms=fast_ms)

    rendered = {role: "\n".join(f"=== {m['role']} ===\n{m['content']}" for m in msgs)
                for role, msgs in (("planner", planner), ("executor", executor), ("summarizer", summarizer))}
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        for role, text in rendered.items():
            (args.out / f"{role}.md").write_text(text)
        print(f"wrote {', '.join(str(args.out / f'{r}.md') for r in rendered)}")
    else:
        for role, text in rendered.items():
            print(f"\n################ {role.upper()} ################\n{text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
