"""`accelopt optimize`: run AccelOpt (beam search + memory, or repeated sampling) on one problem."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from accelopt_nb.errors import ConfigError

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
    g.add_argument("--prompts-dir", type=Path, help="directory of prompt templates overriding the shipped ones")
    g.add_argument("--seed", type=int, help="seed of every random choice of the search")
    e = parser.add_argument_group("evaluation")
    e.add_argument("--shape-preset", choices=["small", "paper"], help="problem shapes (default: the preset's)")
    e.add_argument("--task", type=Path, help="an NKIBench-format task file (instead of a problem name)")
    e.add_argument("--kernel", type=Path, help="the baseline kernel file that goes with --task")
    e.add_argument("--backend", choices=["simulator", "neuron"], help="where kernels run")
    e.add_argument("--hw", choices=["trn1", "trn2"], help="hardware generation")
    e.add_argument("--workers", type=int, help="parallel evaluations (default: one per core)")
    e.add_argument("--scheduler", help="Dask scheduler address for distributed evaluation")
    m = parser.add_argument_group("model")
    m.add_argument("--model-preset", help="model preset (see `accelopt llm presets`)")
    m.add_argument("--base-url", help="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1")
    m.add_argument("--model", help="served model name, e.g. openai/gpt-oss-120b")
    m.add_argument("--api-key-env", help="environment variable holding the API key")
    m.add_argument("--price", help="price-table key for the cost ledger (see `accelopt llm prices`)")
    m.add_argument("--prices", type=Path, help="a price YAML whose entries override the shipped, dated table")
    m.add_argument("--cap-usd", type=float, help="stop making LLM calls once this much is spent")
    m.add_argument("--concurrency", type=int, default=16, help="LLM requests in flight (default: 16)")
    m.add_argument("--reasoning-effort", choices=["minimal", "low", "medium", "high"])
    m.add_argument("--temperature", type=float)
    m.add_argument("--max-tokens", type=int)
    m.add_argument("--timeout", type=float, help="per-request timeout in seconds")
    m.add_argument("--cassette", type=Path, help="record/replay LLM traffic to this JSONL file")
    m.add_argument("--cassette-mode", choices=["record", "replay", "auto"], default="auto")
    r = parser.add_argument_group("run")
    r.add_argument("--run-dir", type=Path, help="experiment directory (default: runs/<problem>)")
    r.add_argument("--run-id", help="run id (default: generated; with --resume: the latest run)")
    r.add_argument("--resume", action="store_true", help="continue the run from its last completed step")
    r.add_argument("--no-progress", action="store_true", help="no progress display")
    r.add_argument("--skip-check", action="store_true",
                   help="do not check that the LLM endpoint answers before starting")
    r.add_argument("--json", action="store_true", help="print the final report as JSON")


def _search_config(args: argparse.Namespace):
    from accelopt_nb.search.config import SearchConfig

    overrides: dict[str, Any] = {
        "iterations": args.iterations, "beam_width": args.beam_width, "plans_per_kernel": args.plans,
        "samples_per_plan": args.samples, "strategy": args.strategy, "seed": args.seed,
        "memory.top_k": args.top_k, "memory.capacity": args.exp_n,
        "evaluation.shape_preset": args.shape_preset, "evaluation.backend": args.backend, "evaluation.hw": args.hw}
    if args.no_memory:
        overrides["memory.enabled"] = False
    if args.share_memory:
        overrides["memory.shared"] = True
    if args.show_peak:
        overrides["planner.show_peak"] = True
    if args.show_hints:
        overrides["planner.show_hints"] = True
    return SearchConfig.from_preset(args.preset, **overrides)


def _model_config(args: argparse.Namespace, stored: dict[str, Any] | None):
    from accelopt_nb.llm.config import ModelConfig

    overrides = {k: v for k, v in {"base_url": args.base_url, "model": args.model, "api_key_env": args.api_key_env,
                                   "price": args.price, "reasoning_effort": args.reasoning_effort,
                                   "temperature": args.temperature, "max_tokens": args.max_tokens,
                                   "timeout_s": args.timeout}.items() if v is not None}
    if args.model_preset:
        return ModelConfig.from_preset(args.model_preset, **overrides)
    if stored:  # resuming: the run's own model settings, with any explicit overrides
        return ModelConfig.from_dict({**stored, **overrides})
    if not (args.base_url and args.model):
        raise ConfigError("give --model-preset, or both --base-url and --model "
                          "(for a local vLLM: --base-url http://localhost:8000/v1 --model openai/gpt-oss-120b)")
    return ModelConfig.from_dict(overrides)


def _preflight(model) -> None:
    """Fail in seconds, with the reason, when the endpoint is down, instead of a run of failed calls."""
    import asyncio
    import sys

    from accelopt_nb.llm.check import preflight

    reachable, message = asyncio.run(preflight(model))
    if not reachable:
        raise ConfigError(message + " (start the server, fix --base-url, or pass --skip-check; "
                          "`accelopt llm check` diagnoses the endpoint)")
    if message:
        print(message, file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from accelopt_nb.agents.prompts import PromptSet
    from accelopt_nb.llm import Cassette, Ledger, LLMClient, PriceTable
    from accelopt_nb.search.memory import OptimizationMemory
    from accelopt_nb.search.problem import SearchProblem
    from accelopt_nb.errors import BudgetExceededError
    from accelopt_nb.search.progress import StepProgress
    from accelopt_nb.search.report import build_report
    from accelopt_nb.search.session import Session
    from accelopt_nb.store import DEFAULT_FILENAME, RunStore

    if (args.task or args.kernel) and not (args.task and args.kernel):
        raise ConfigError("--task and --kernel go together (a task file and its baseline kernel)")
    run_dir = args.run_dir or Path("runs") / args.problem
    stored: dict[str, Any] = {}
    stored_prices: dict[str, Any] | None = None
    run_id = args.run_id
    if args.resume:
        if not (Path(run_dir) / DEFAULT_FILENAME).is_file():
            raise ConfigError(f"--resume: no run store in {run_dir}")
        store = RunStore.open(run_dir)
        run_id = run_id or store.latest_run_id()
        if run_id is None:
            raise ConfigError(f"--resume: no run to resume in {run_dir}")
        record = store.get_run(run_id)
        stored, stored_prices = record["config"], record["prices"]
        config = None
        model = _model_config(args, stored.get("llm", {}).get("model"))
        if not args.skip_check and not (args.cassette and args.cassette_mode == "replay"):
            _preflight(model)
    else:
        config = _search_config(args)
        model = _model_config(args, None)  # validated before anything is written
        if not args.skip_check and not (args.cassette and args.cassette_mode == "replay"):
            _preflight(model)
        store = RunStore.open(run_dir)
    shape_preset = stored.get("shape_preset") or (config.evaluation.shape_preset if config else "small")
    if args.task:
        problem = SearchProblem.from_files(args.task, args.kernel, name=args.problem)
    elif args.resume:
        problem = None  # the run store holds the problem as it was when the run started
    else:
        problem = SearchProblem.from_nkibench(args.problem, shape_preset)

    if stored_prices:  # resume: price calls with the table the run started with
        prices = PriceTable.from_snapshot(stored_prices)
    else:
        prices = PriceTable.load(args.prices, base=PriceTable.default()) if args.prices else PriceTable.default()
    ledger = Ledger.for_store(store, run_id, prices=prices, cap_usd=args.cap_usd) if run_id else None
    if ledger is None:  # a new run: its id is made now, so the ledger can name it
        from accelopt_nb.search.session import _new_run_id
        run_id = _new_run_id(problem.name if problem is not None else args.problem)
        ledger = Ledger.for_store(store, run_id, prices=prices, cap_usd=args.cap_usd)
    cassette = Cassette(args.cassette, args.cassette_mode) if args.cassette else None
    client = LLMClient(model, ledger, cassette, concurrency=args.concurrency)
    executor = _eval_executor(args)
    progress = None if args.no_progress else StepProgress()
    memory = OptimizationMemory.load(args.memory_in) if args.memory_in else None
    common = dict(llm=client, memory=memory, progress=progress, eval_executor=executor,
                  prompts=PromptSet(args.prompts_dir) if args.prompts_dir else None)
    try:
        if args.resume:
            session = Session.resume(run_dir, run_id=run_id, problem=problem, **common)
        else:
            if memory is not None:
                memory.capacity = config.memory.capacity
            session = Session.create(problem, run_dir=run_dir, config=config, run_id=run_id,
                                     llm_settings={"model": model.to_dict()},
                                     prices=prices.snapshot(), **common)
        with session:
            try:
                report = session.run(args.iterations)
                status = 0
            except BudgetExceededError as exc:
                # Everything paid for is stored; `--resume` with a higher --cap-usd continues.
                print(f"accelopt optimize: stopped: {exc}", file=sys.stderr)
                report = build_report(session)
                status = 3
    finally:
        client.close()
        if executor is not None:
            executor.shutdown()
    best_path = Path(run_dir) / f"best_kernel-{report.run_id}.py"
    best_path.write_text(report.best_source)
    report_path = Path(run_dir) / f"report-{report.run_id}.json"
    report_path.write_text(json.dumps(report.to_dict(), indent=2, default=str))
    if args.json:
        print(json.dumps(report.to_dict(), default=str))
    else:
        print(report.to_text())
        print(f"  best kernel: {best_path}\n  report: {report_path}\n  run store: {store.path} (run {report.run_id})")
    sys.stdout.flush()
    return status


def _eval_executor(args: argparse.Namespace):
    if args.scheduler:
        from accelopt_nb.evaluation import DaskEvaluator
        return DaskEvaluator(args.scheduler)
    if args.workers:
        from accelopt_nb.evaluation import LocalPoolEvaluator
        return LocalPoolEvaluator(args.workers)
    return None
