"""The vLLM launch command for the paper's models, and starting it when vLLM exists."""
from __future__ import annotations

import os
import stat
import sys

import pytest

from accelopt_nb.cli import main
from accelopt_nb.errors import ConfigError, ServingUnavailableError
from accelopt_nb.llm import ModelConfig
from accelopt_nb.llm.serving import build_vllm_command, serve_options, start_vllm


def test_gpt_oss_120b_command():
    cmd = build_vllm_command(serve_options(ModelConfig.from_preset("gpt-oss-120b")))
    assert cmd[:3] == ["vllm", "serve", "openai/gpt-oss-120b"]
    args = dict(zip(cmd[3::2], cmd[4::2]))
    assert args["--served-model-name"] == "openai/gpt-oss-120b"  # what the client asks for
    assert args["--port"] == "8000" and args["--host"] == "127.0.0.1"
    assert args["--tensor-parallel-size"] == "1"
    assert args["--reasoning-parser"] == "openai_gptoss"
    assert cmd[-1] == "--async-scheduling"


def test_overrides_and_port_from_base_url():
    cfg = ModelConfig.from_preset("gpt-oss-20b", base_url="http://0.0.0.0:9001/v1")
    cmd = build_vllm_command(serve_options(cfg, tensor_parallel_size=4, max_model_len=32768,
                                           gpu_memory_utilization=0.9, extra_args=("--enable-prefix-caching",)))
    text = " ".join(cmd)
    assert "serve openai/gpt-oss-20b" in text
    assert "--port 9001" in text and "--host 0.0.0.0" in text
    assert "--tensor-parallel-size 4" in text and "--max-model-len 32768" in text
    assert "--gpu-memory-utilization 0.9" in text
    assert cmd[-2:] == ["--async-scheduling", "--enable-prefix-caching"]


def test_hosted_model_has_nothing_to_serve():
    with pytest.raises(ConfigError, match="hosted"):
        serve_options(ModelConfig.from_preset("claude-sonnet-4"))


def test_invalid_options():
    with pytest.raises(ConfigError, match="tensor_parallel_size"):
        serve_options(ModelConfig.from_preset("gpt-oss-120b"), tensor_parallel_size=0)


def test_start_without_vllm_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ServingUnavailableError, match="vLLM is not installed.*vllm serve openai/gpt-oss-120b"):
        start_vllm(serve_options(ModelConfig.from_preset("gpt-oss-120b")))


def test_start_runs_vllm_with_the_key_in_the_environment(monkeypatch, tmp_path):
    # A fake `vllm` executable at the process boundary: records its argv and key.
    record = tmp_path / "argv.txt"
    fake = tmp_path / "vllm"
    fake.write_text(f"#!{sys.executable}\nimport os, sys\n"
                    f"open({str(record)!r}, 'w').write(' '.join(sys.argv[1:]) + '|' + "
                    "os.environ.get('VLLM_API_KEY', ''))\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(tmp_path) + os.pathsep + os.environ.get("PATH", ""))
    monkeypatch.setenv("MY_VLLM_KEY", "k-123")
    cfg = ModelConfig.from_preset("gpt-oss-120b", api_key_env="MY_VLLM_KEY")
    proc = start_vllm(serve_options(cfg, tensor_parallel_size=2))
    assert proc.wait(timeout=30) == 0
    argv, key = record.read_text().split("|")
    assert argv.startswith("serve openai/gpt-oss-120b") and "--tensor-parallel-size 2" in argv
    assert key == "k-123" and "k-123" not in argv


def test_cli_prints_the_command(capsys):
    assert main(["llm", "serve-cmd", "--model-preset", "gpt-oss-120b", "--tp", "8", "--port", "8123"]) == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith("vllm serve openai/gpt-oss-120b")
    assert "--tensor-parallel-size 8" in out and "--port 8123" in out


def test_cli_run_without_vllm(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main(["llm", "serve-cmd", "--run"]) == 2
    assert "vLLM is not installed" in capsys.readouterr().err


def test_cli_lists_presets_and_prices(capsys):
    assert main(["llm", "presets"]) == 0
    assert "claude-sonnet-4" in capsys.readouterr().out
    assert main(["llm", "prices"]) == 0
    out = capsys.readouterr().out
    assert "as of 2026-11" in out and "proxy of gpt-oss-120b@groq" in out


def test_the_tiny_cpu_model_is_served_by_llama_cpp_from_a_packaged_gguf(tmp_path, monkeypatch, capsys):
    from accelopt_nb.llm.serving import build_llama_cpp_command, find_gguf, llama_cpp_options, serve_command

    cfg = ModelConfig.from_preset("smollm2-135m")
    with pytest.raises(ConfigError, match="llama.cpp, not vLLM"):
        serve_options(cfg)
    # the GGUF inside an installed package, found without importing the package
    pkg = tmp_path / "site" / "fake_gguf_pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('never imported')\n")
    (pkg / "m.gguf").write_bytes(b"GGUF")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert find_gguf({"gguf_package": "fake_gguf_pkg", "gguf_file": "m.gguf"}) == pkg / "m.gguf"
    with pytest.raises(ServingUnavailableError, match="pip install"):
        find_gguf({"gguf_package": "no_such_pkg_here", "gguf_file": "m.gguf"})
    local = cfg.replace(serve={"engine": "llama_cpp", "gguf": str(pkg / "m.gguf"), "n_ctx": 4096})
    cmd = build_llama_cpp_command(llama_cpp_options(local, port=9123), python="py")
    assert cmd[:3] == ["py", "-m", "llama_cpp.server"]
    args = dict(zip(cmd[3::2], cmd[4::2]))
    assert args == {"--model": str(pkg / "m.gguf"), "--model_alias": "smollm2-135m", "--host": "127.0.0.1",
                    "--port": "9123", "--n_ctx": "4096"}
    assert serve_command(local)[serve_command(local).index("--port") + 1] == "8011"  # from the base_url
    with pytest.raises(ConfigError, match="unknown serve engine"):
        serve_command(cfg.replace(serve={"engine": "tgi"}))
    assert main(["llm", "serve-cmd", "--model-preset", "smollm2-135m", "--tp", "2"]) != 0
    assert "--tp: vLLM options; smollm2-135m is served by llama.cpp" in capsys.readouterr().err
