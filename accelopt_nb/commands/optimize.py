"""`accelopt optimize`: run AccelOpt (beam search + memory, or repeated sampling) on one problem.

Exit codes: 0 the run is complete, every iteration with all its candidates but for the model's
unusable answers; 3 stopped by the spending cap; 4 stopped by a step left open (its LLM calls all
failed, or some got no answer from the endpoint: ``--resume`` makes exactly those calls again);
5 complete, but some iteration had fewer candidates because the endpoint failed calls that
``--allow-transport-failures`` let pass. The report says how many candidates each iteration had.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from accelopt_nb.commands import emit_json
from accelopt_nb.evaluation.backends import backend_names
from accelopt_nb.perf.hardware import presets as hardware_names
from accelopt_nb.renamed import add_renamed
from nkibench.problem import PRESETS

NAME = "optimize"
HELP = "optimize an NKIBench problem with the AccelOpt agents (beam search + optimization memory)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("problem", help="NKIBench problem name (or a label, with --task/--kernel)")
    g = parser.add_argument_group("search")
    g.add_argument("--preset", default="paper",
                   help="search preset: paper, smoke, or a YAML file (default: paper)")
    g.add_argument("-T", "--iterations", type=int, help="iterations to complete (a resumed run continues to T)")
    g.add_argument("-B", "--beam-width", type=int, help="beam width B")
    g.add_argument("-N", "--plans", type=int, help="plans per beam kernel N")
    g.add_argument("-K", "--samples", type=int, help="executor samples per plan K")
    g.add_argument("--strategy", choices=["beam", "repeated"], help="beam search or the repeated-sampling ablation")
    g.add_argument("--top-k", type=int, help="new memory items per iteration (TopK)")
    g.add_argument("--exp-n", type=int, help="memory capacity (ExpN)")
    g.add_argument("--no-memory", action="store_true", help="disable the optimization memory")
    g.add_argument("--memory-in", type=Path, help="start from this memory JSON (e.g. from another problem)")
    g.add_argument("--share-memory", action="store_true", help="show memory items of other problems too")
    g.add_argument("--show-peak", action="store_true", help="tell the planner the kernel's %% of peak and bound")
    g.add_argument("--show-hints", action="store_true", help="show the profiler's bottleneck notes to the planner")
    g.add_argument("--prompt-set", choices=["paper", "extended"], help="prompt set (default: the preset's)")
    g.add_argument("--prompts-dir", type=Path, help="prompt templates overriding the shipped ones, or the authors' "
                   "prompt directory (read unchanged; see docs/search.md)")
    g.add_argument("--unusable-retries", type=int, help="re-asks after an unusable answer (paper preset: 0)")
    g.add_argument("--fix-attempts", type=int, metavar="F",
                   help="repairs of a candidate that failed with a kernel error or wrong numbers (fixer agent; "
                        "default: the preset's, 0 = off)")
    g.add_argument("--seed", type=int, help="seed of every random choice of the search, and of every LLM call: "
                   "each call gets its own seed, derived from this one and the call's iteration, beam slot, "
                   "plan and sample (sent to the model as `seed`)")
    e = parser.add_argument_group("evaluation")
    e.add_argument("--shapes", choices=PRESETS, help="problem shape preset (default: the search preset's)")
    add_renamed(e, "--shape-preset", "--shapes", dest="shapes", choices=PRESETS)
    e.add_argument("--fidelity", help="full: evaluate every candidate fully; multi: screen them all, confirm the "
                   "best (default: the preset's; search.config.SEARCH_FIDELITIES)")
    e.add_argument("--task", type=Path, help="an NKIBench-format task file (instead of a problem name)")
    e.add_argument("--kernel", type=Path, help="the baseline kernel file that goes with --task")
    e.add_argument("--backend", choices=backend_names(), help="where kernels run")
    e.add_argument("--hw", choices=hardware_names(), help="hardware generation")
    e.add_argument("--workers", type=int, help="parallel evaluations (default: the preset's; 0 = one per core)")
    e.add_argument("--scheduler", help="Dask scheduler address for distributed evaluation")
    e.add_argument("--no-pipeline", action="store_true",
                   help="run plan, execute and evaluate one after the other instead of as one stream")
    m = parser.add_argument_group("model")
    m.add_argument("--model-preset", help="model preset (see `accelopt llm presets`), or a YAML file of your own "
                   "(one model's settings, or presets: FILE.yaml:NAME)")
    m.add_argument("--base-url", help="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1")
    m.add_argument("--model", help="served model name, e.g. openai/gpt-oss-120b")
    m.add_argument("--api-key-env", help="environment variable holding the API key")
    m.add_argument("--price", help="price-table key for the cost ledger (see `accelopt llm prices`)")
    m.add_argument("--prices", type=Path, help="a price YAML whose entries override the shipped, dated table")
    m.add_argument("--cap-usd", type=float, help="stop making LLM calls once this much is spent")
    m.add_argument("--concurrency", type=int, help="LLM requests in flight (default: the preset's, 16)")
    m.add_argument("--reasoning-effort", choices=["minimal", "low", "medium", "high"])
    m.add_argument("--temperature", type=float)
    m.add_argument("--max-tokens", type=int)
    m.add_argument("--timeout", type=float, help="per-request timeout in seconds")
    m.add_argument("--extra-body", metavar="JSON",
                   help="settings sent in every request's body, e.g. '{\"top_k\": 20}' for vLLM, or "
                        "'{\"chat_template_kwargs\": {\"enable_thinking\": false}}'")
    m.add_argument("--retry-for", type=float, metavar="SECONDS",
                   help="keep retrying a call the endpoint does not answer (down, 5xx, timeouts) this long "
                        "before it counts as failed (default 300)")
    m.add_argument("--allow-transport-failures", type=float, metavar="FRACTION",
                   help="fraction of a step's calls that may still fail that way and the step count as done "
                        "(default 0: any such failure leaves the step open, and --resume redraws the calls)")
    m.add_argument("--cassette", type=Path, help="record/replay LLM traffic to this JSONL file")
    m.add_argument("--cassette-mode", choices=["record", "replay", "auto"], default="auto")
    r = parser.add_argument_group("run")
    r.add_argument("--run-dir", type=Path, help="experiment directory (default: runs/<problem>)")
    r.add_argument("--store", metavar="PATH_OR_URL",
                   help="run store (default: <run-dir>/accelopt.sqlite): another SQLite file, or "
                        "postgresql://user@host/db for a database a team shares")
    r.add_argument("--run-id", help="run id (default: generated; with --resume: the latest run)")
    r.add_argument("--resume", action="store_true", help="continue the run from its last completed step")
    r.add_argument("--allow-model-change", action="store_true",
                   help="with --resume: continue with another model than the run was made with (recorded in the run)")
    r.add_argument("--no-progress", action="store_true", help="no progress display")
    r.add_argument("--skip-check", action="store_true",
                   help="do not check that the LLM endpoint answers before starting")
    r.add_argument("--json", action="store_true", help="print the final report as JSON")


def search_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """Dotted SearchConfig overrides from the command line (None: keep the preset's)."""
    overrides: dict[str, Any] = {
        "iterations": args.iterations, "beam_width": args.beam_width, "plans_per_kernel": args.plans,
        "samples_per_plan": args.samples, "strategy": args.strategy, "seed": args.seed,
        "memory.top_k": args.top_k, "memory.capacity": args.exp_n, "prompts.set": args.prompt_set,
        "sampling.unusable_retries": args.unusable_retries, "evaluation.fidelity": args.fidelity,
        "fixer.attempts": args.fix_attempts,
        "evaluation.shape_preset": args.shapes, "evaluation.backend": args.backend, "evaluation.hw": args.hw}
    flags = {"memory.enabled": (args.no_memory, False), "memory.shared": (args.share_memory, True),
             "planner.show_peak": (args.show_peak, True), "planner.show_hints": (args.show_hints, True)}
    overrides.update({key: value for key, (given, value) in flags.items() if given})
    return {k: v for k, v in overrides.items() if v is not None}


def launch_spec(args: argparse.Namespace):
    from accelopt_nb.search.launch import LaunchSpec
    from accelopt_nb.search.progress import StepProgress

    model = {"model_preset": args.model_preset, "base_url": args.base_url, "model": args.model,
             "api_key_env": args.api_key_env, "price": args.price, "reasoning_effort": args.reasoning_effort,
             "temperature": args.temperature, "max_tokens": args.max_tokens, "timeout_s": args.timeout,
             "seed": args.seed, "extra_body": args.extra_body, "retry_for_s": args.retry_for}
    return LaunchSpec(problem=args.problem, run_dir=args.run_dir, store=args.store, task=args.task, kernel=args.kernel,
                      run_id=args.run_id, resume="resume" if args.resume else "new", preset=args.preset,
                      overrides=search_overrides(args), model=model, prices=args.prices, cap_usd=args.cap_usd,
                      cassette=args.cassette, cassette_mode=args.cassette_mode, llm_concurrency=args.concurrency,
                      eval_workers=args.workers, pipeline=False if args.no_pipeline else None,
                      transport_failures_allowed=args.allow_transport_failures,
                      scheduler=args.scheduler, memory_in=args.memory_in, prompts_dir=args.prompts_dir,
                      progress=None if args.no_progress else StepProgress(), check_endpoint=not args.skip_check,
                      allow_model_change=args.allow_model_change)


def run(args: argparse.Namespace) -> int:
    from accelopt_nb.errors import BudgetExceededError, StepFailedError
    from accelopt_nb.search.launch import open_session
    from accelopt_nb.search.report import build_report

    spec = launch_spec(args)
    with open_session(spec) as session:
        try:
            report = session.run(args.iterations)
            status = 5 if report.transport_losses else 0
        except (BudgetExceededError, StepFailedError) as exc:
            # Everything paid for is stored; `--resume` (with a higher --cap-usd) continues.
            print(f"accelopt optimize: stopped: {exc}", file=sys.stderr)
            report = build_report(session.state)
            status = 3 if isinstance(exc, BudgetExceededError) else 4
    run_dir = spec.directory
    best_path = run_dir / f"best_kernel-{report.run_id}.py"
    best_path.write_text(report.best_source)
    report_path = run_dir / f"report-{report.run_id}.json"
    report_path.write_text(json.dumps(report.to_dict(), indent=2, default=str))
    if args.json:
        emit_json(report.to_dict(), default=str)
    else:
        print(report.to_text())
        print(f"  best kernel: {best_path}\n  report: {report_path}\n  run store: {session.store.location} "
              f"(run {report.run_id})")
    sys.stdout.flush()
    return status
