"""Starting a model server: the ``vllm serve`` command line for a model preset.

The paper serves gpt-oss with vLLM (``vllm serve openai/gpt-oss-120b``). A preset's
``serve`` section (``data/models.yaml``) holds the Hugging Face model id, the default
tensor-parallel size and the reasoning parser; the port and host come from the preset's
``base_url`` so the client and the server agree. ``vllm`` is an optional extra
(``pip install accelopt_nb[vllm]`` on a GPU machine); building the command needs nothing.

The API key is never put on the command line (visible in ``ps``): vLLM reads it from the
``VLLM_API_KEY`` environment variable, which :func:`start_vllm` sets from the preset's
``api_key_env`` when that variable is set.
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field, replace
from typing import Any, Sequence
from urllib.parse import urlparse

from accelopt_nb.errors import ConfigError, ServingUnavailableError
from accelopt_nb.llm.config import ModelConfig

__all__ = ["VLLMServeOptions", "serve_options", "build_vllm_command", "format_command", "find_vllm",
           "start_vllm"]


@dataclass(frozen=True)
class VLLMServeOptions:
    """Everything ``vllm serve`` needs for one model."""

    hf_model: str
    served_model_name: str
    host: str = "127.0.0.1"
    port: int = 8000
    tensor_parallel_size: int = 1
    reasoning_parser: str | None = None
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None
    extra_args: tuple[str, ...] = field(default_factory=tuple)
    api_key_env: str | None = None

    def __post_init__(self) -> None:
        if self.tensor_parallel_size < 1:
            raise ConfigError(f"tensor_parallel_size must be >= 1, got {self.tensor_parallel_size}")
        if not 0 < self.port < 65536:
            raise ConfigError(f"port must be in 1..65535, got {self.port}")
        if self.gpu_memory_utilization is not None and not 0 < self.gpu_memory_utilization <= 1:
            raise ConfigError("gpu_memory_utilization must be in (0, 1]")


def serve_options(config: ModelConfig, **overrides: Any) -> VLLMServeOptions:
    """Serve options from a model config's ``serve`` section, with keyword overrides."""
    if not config.serve:
        raise ConfigError(f"model {config.name or config.model} has no 'serve' section: it is a hosted "
                          "model, or add one (hf_model, tensor_parallel_size, reasoning_parser)")
    serve = dict(config.serve)
    known = {"hf_model", "tensor_parallel_size", "reasoning_parser", "max_model_len",
             "gpu_memory_utilization", "extra_args"}
    unknown = sorted(set(serve) - known)
    if unknown:
        raise ConfigError(f"unknown serve setting(s) {unknown} for {config.name or config.model}")
    url = urlparse(config.base_url)
    host = url.hostname or "127.0.0.1"
    options = VLLMServeOptions(
        hf_model=serve.get("hf_model") or config.model,
        served_model_name=config.model,
        host="127.0.0.1" if host == "localhost" else host,
        port=url.port or (443 if url.scheme == "https" else 80),
        tensor_parallel_size=int(serve.get("tensor_parallel_size", 1)),
        reasoning_parser=serve.get("reasoning_parser"),
        max_model_len=serve.get("max_model_len"),
        gpu_memory_utilization=serve.get("gpu_memory_utilization"),
        extra_args=tuple(str(a) for a in serve.get("extra_args") or ()),
        api_key_env=config.api_key_env,
    )
    changes = {k: v for k, v in overrides.items() if v is not None}
    if "extra_args" in changes:
        changes["extra_args"] = options.extra_args + tuple(changes["extra_args"])
    return replace(options, **changes)


def build_vllm_command(options: VLLMServeOptions, executable: str = "vllm") -> list[str]:
    """The argv of ``vllm serve`` for ``options``."""
    cmd = [executable, "serve", options.hf_model,
           "--served-model-name", options.served_model_name,
           "--host", options.host,
           "--port", str(options.port),
           "--tensor-parallel-size", str(options.tensor_parallel_size)]
    if options.reasoning_parser:
        cmd += ["--reasoning-parser", options.reasoning_parser]
    if options.max_model_len is not None:
        cmd += ["--max-model-len", str(options.max_model_len)]
    if options.gpu_memory_utilization is not None:
        cmd += ["--gpu-memory-utilization", f"{options.gpu_memory_utilization:g}"]
    cmd += list(options.extra_args)
    return cmd


def format_command(cmd: Sequence[str]) -> str:
    """A shell-ready rendering of ``cmd``."""
    return shlex.join(cmd)


def find_vllm() -> str | None:
    """Path of the ``vllm`` executable, or None when vLLM is not installed."""
    return shutil.which("vllm")


def _server_env(options: VLLMServeOptions) -> dict[str, str]:
    env = dict(os.environ)
    if options.api_key_env and options.api_key_env != "VLLM_API_KEY" and env.get(options.api_key_env):
        env["VLLM_API_KEY"] = env[options.api_key_env]
    return env


def start_vllm(options: VLLMServeOptions) -> subprocess.Popen:
    """Start ``vllm serve`` as a child process (its output goes to this process's).

    Raises :class:`ServingUnavailableError` when vLLM is not installed.
    """
    exe = find_vllm()
    if exe is None:
        raise ServingUnavailableError(
            "vLLM is not installed on this machine (no 'vllm' executable on PATH). Install it on a GPU "
            "machine with `pip install 'accelopt_nb[vllm]'`, then run: "
            + format_command(build_vllm_command(options)))
    return subprocess.Popen(build_vllm_command(options, executable=exe), env=_server_env(options))
