"""Per-model settings as data: presets, request parameters, API keys from the environment."""
from __future__ import annotations

import pytest
import yaml

from accelopt_nb.errors import ConfigError
from accelopt_nb.llm import ModelConfig, RetryPolicy, load_model_presets
from accelopt_nb.llm.config import NO_API_KEY


def test_gpt_oss_preset_uses_medium_reasoning_effort():
    cfg = ModelConfig.from_preset("gpt-oss-120b")
    assert cfg.model == "openai/gpt-oss-120b"
    assert cfg.request_params() == {"reasoning_effort": "medium"}
    assert cfg.price == "gpt-oss-120b@self-hosted"


def test_claude_preset_thinking_budget_and_output_limit():
    cfg = ModelConfig.from_preset("claude-sonnet-4")
    params = cfg.request_params()
    assert params["max_tokens"] == 20000
    assert params["temperature"] == 1.0
    assert params["extra_body"] == {"thinking": {"type": "enabled", "budget_tokens": 10000}}
    assert "reasoning_effort" not in params
    assert cfg.api_key_env == "ANTHROPIC_API_KEY"


def test_overrides_and_retry_mapping():
    cfg = ModelConfig.from_preset("gpt-oss-20b", base_url="http://10.0.0.5:9000/v1",
                                  retry={"max_attempts": 3, "base_delay_s": 0.1})
    assert cfg.base_url == "http://10.0.0.5:9000/v1"
    assert cfg.retry == RetryPolicy(max_attempts=3, base_delay_s=0.1)
    assert cfg.name == "gpt-oss-20b"
    assert cfg.to_dict()["retry"]["max_attempts"] == 3


def test_api_key_comes_from_named_environment_variable(monkeypatch):
    cfg = ModelConfig.from_preset("claude-sonnet-4")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        cfg.api_key()
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    assert cfg.api_key() == "sk-test"
    assert "sk-test" not in repr(cfg.to_dict())


def test_optional_key_for_local_vllm(monkeypatch):
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    assert ModelConfig.from_preset("gpt-oss-120b").api_key() == NO_API_KEY
    assert ModelConfig(model="m", base_url="http://x/v1").api_key() == NO_API_KEY


def test_unknown_setting_and_bad_values_are_errors():
    with pytest.raises(ConfigError, match="unknown model setting"):
        ModelConfig.from_dict({"model": "m", "base_url": "http://x", "temprature": 0.5})
    with pytest.raises(ConfigError, match="reasoning_effort"):
        ModelConfig(model="m", base_url="http://x", reasoning_effort="extreme")
    with pytest.raises(ConfigError, match="http"):
        ModelConfig(model="m", base_url="localhost:8000")
    with pytest.raises(ConfigError, match="unknown model preset"):
        ModelConfig.from_preset("gpt-7")


def test_user_presets_merge_over_shipped(tmp_path):
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump({
        "gpt-oss-120b": {"base_url": "http://gpu-box:8000/v1"},
        "my-model": {"model": "qwen", "base_url": "http://q/v1", "temperature": 0.2}}))
    presets = load_model_presets(path)
    cfg = ModelConfig.from_preset("gpt-oss-120b", presets=presets)
    assert cfg.base_url == "http://gpu-box:8000/v1"
    assert cfg.reasoning_effort == "medium"  # untouched fields kept
    assert ModelConfig.from_preset("my-model", presets=presets).request_params() == {"temperature": 0.2}


def test_every_shipped_preset_is_valid_and_priced():
    from accelopt_nb.llm import PriceTable

    table = PriceTable.default()
    for name in load_model_presets():
        cfg = ModelConfig.from_preset(name)
        assert cfg.price is not None and cfg.price in table, name
