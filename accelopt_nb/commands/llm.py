"""`accelopt llm`: check an LLM endpoint, print or start the vLLM server, list presets and prices."""
from __future__ import annotations

import argparse

from accelopt_nb.errors import ConfigError
from accelopt_nb.renamed import add_renamed

NAME = "llm"
HELP = "LLM endpoints: check one, print or start the vLLM server command, list presets and prices"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="llm_command", metavar="ACTION")
    sub.required = True

    check = sub.add_parser("check", help="reachability, model listed, one tiny completion, tokens/s",
                           description="Check that an OpenAI-compatible endpoint serves a model.")
    check.add_argument("--model-preset", help="model preset name (see `accelopt llm presets`)")
    add_renamed(check, "--preset", "--model-preset", dest="model_preset")
    check.add_argument("--base-url", help="endpoint base URL, e.g. http://localhost:8000/v1")
    check.add_argument("--model", help="served model name, e.g. openai/gpt-oss-120b")
    check.add_argument("--api-key-env", help="environment variable holding the API key")
    check.add_argument("--max-tokens", type=int, default=512,
                       help="output limit of the test completion (reasoning models think first)")
    check.add_argument("--timeout", type=float, default=120.0, help="request timeout in seconds")

    serve = sub.add_parser("serve-cmd", help="print (or --run) the model server command for a preset",
                           description="Build the server command line for a self-hosted model preset: vLLM for "
                                       "the paper's models, llama.cpp for smollm2-135m (a tiny CPU model).")
    serve.add_argument("--model-preset", default="gpt-oss-120b", help="model preset (default: gpt-oss-120b)")
    add_renamed(serve, "--preset", "--model-preset", dest="model_preset")
    serve.add_argument("--tp", "--tensor-parallel-size", dest="tp", type=int,
                       help="GPUs to shard the model over")
    serve.add_argument("--port", type=int, help="port (default: from the preset's base_url)")
    serve.add_argument("--host", help="interface to bind (default: from the preset's base_url)")
    serve.add_argument("--max-model-len", type=int, help="context length limit")
    serve.add_argument("--gpu-memory-utilization", type=float, help="fraction of GPU memory to use")
    serve.add_argument("--vllm-arg", action="append", default=[], metavar="ARG",
                       help="extra argument passed to vllm serve (repeatable)")
    serve.add_argument("--run", action="store_true",
                       help="start the server (needs vllm, or accelopt_nb[llm-server] for llama.cpp presets) "
                            "instead of printing the command")

    sub.add_parser("presets", help="list the model presets")
    sub.add_parser("prices", help="show the price table (USD per 1M tokens)")


def _check_config(args: argparse.Namespace):
    from accelopt_nb.llm.config import ModelConfig

    overrides = {"timeout_s": args.timeout}
    if args.base_url:
        overrides["base_url"] = args.base_url
    if args.model:
        overrides["model"] = args.model
    if args.api_key_env:
        overrides["api_key_env"] = args.api_key_env
    if args.model_preset:
        return ModelConfig.from_preset(args.model_preset, **overrides)
    if not (args.base_url and args.model):
        raise ConfigError("give --model-preset, or both --base-url and --model")
    return ModelConfig(model=args.model, base_url=args.base_url, api_key_env=args.api_key_env,
                       timeout_s=args.timeout)


def _run_check(args: argparse.Namespace) -> int:
    from accelopt_nb.llm.check import check_endpoint_sync

    report = check_endpoint_sync(_check_config(args), max_tokens=args.max_tokens)
    print("\n".join(report.lines()))
    return 0 if report.ok else 1


def _run_serve(args: argparse.Namespace) -> int:
    from accelopt_nb.llm.config import ModelConfig
    from accelopt_nb.llm.serving import format_command, serve_command, start_server

    config = ModelConfig.from_preset(args.model_preset)
    if (config.serve or {}).get("engine") == "llama_cpp":
        vllm_only = {"--tp": args.tp, "--max-model-len": args.max_model_len,
                     "--gpu-memory-utilization": args.gpu_memory_utilization, "--vllm-arg": args.vllm_arg or None}
        given = [flag for flag, value in vllm_only.items() if value is not None]
        if given:
            raise ConfigError(f"{', '.join(given)}: vLLM options; {args.model_preset} is served by llama.cpp")
        overrides: dict = dict(port=args.port, host=args.host)
    else:
        overrides = dict(tensor_parallel_size=args.tp, port=args.port, host=args.host,
                         max_model_len=args.max_model_len, gpu_memory_utilization=args.gpu_memory_utilization,
                         extra_args=tuple(args.vllm_arg) or None)
    if not args.run:
        print(format_command(serve_command(config, **overrides)))
        return 0
    proc = start_server(config, **overrides)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        return proc.wait()


def _run_presets() -> int:
    from accelopt_nb.llm.config import load_model_presets

    for name, p in sorted(load_model_presets().items()):
        key = f", key from ${p['api_key_env']}" if p.get("api_key_env") else ""
        print(f"{name:22s} {p.get('model')} at {p.get('base_url')} (price: {p.get('price')}{key})")
    return 0


def _run_prices() -> int:
    from accelopt_nb.llm.prices import PriceTable

    table = PriceTable.default()
    print(f"prices as of {table.as_of}, USD per 1M tokens (input / output)")
    for key in table.keys():
        price = table.get(key)
        print(f"{key:26s} {price.input:8.3f} / {price.output:8.3f}   {price.rule}")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.llm_command == "check":
        return _run_check(args)
    if args.llm_command == "serve-cmd":
        return _run_serve(args)
    if args.llm_command == "presets":
        return _run_presets()
    if args.llm_command == "prices":
        return _run_prices()
    raise ConfigError(f"unknown llm action {args.llm_command!r}")  # pragma: no cover - argparse guards
