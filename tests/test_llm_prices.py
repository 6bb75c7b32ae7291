"""The dated price table: arithmetic, proxies for self-hosted models, GPU-hour rule, overrides."""
from __future__ import annotations

import pytest
import yaml

from accelopt_nb.errors import ConfigError
from accelopt_nb.llm import PriceTable, Usage


def test_default_table_is_dated_and_has_paper_models():
    table = PriceTable.default()
    assert table.as_of == "2026-11"
    for key in ("claude-sonnet-4", "gpt-oss-120b@self-hosted", "gpt-oss-20b@self-hosted"):
        assert key in table
    sonnet = table.get("claude-sonnet-4")
    assert (sonnet.input, sonnet.output, sonnet.cached_input) == (3.0, 15.0, 0.30)


def test_cost_arithmetic_with_cached_tokens():
    price = PriceTable.default().get("claude-sonnet-4")
    usage = Usage(prompt_tokens=10_000, completion_tokens=2_000, reasoning_tokens=1_500, cached_tokens=4_000)
    # 6000 fresh input at $3, 4000 cached at $0.30, 2000 output (reasoning included) at $15.
    expected = (6000 * 3.0 + 4000 * 0.30 + 2000 * 15.0) / 1e6
    assert price.cost(usage) == pytest.approx(expected)


def test_long_context_tier_applies_above_threshold():
    price = PriceTable.default().get("claude-sonnet-4")
    below = price.cost(Usage(prompt_tokens=200_000, completion_tokens=1_000))
    above = price.cost(Usage(prompt_tokens=200_001, completion_tokens=1_000))
    assert below == pytest.approx((200_000 * 3.0 + 1000 * 15.0) / 1e6)
    assert above == pytest.approx((200_001 * 6.0 + 1000 * 22.5) / 1e6)


def test_self_hosted_proxy_states_its_rule():
    table = PriceTable.default()
    hosted = table.get("gpt-oss-120b@groq")
    proxy = table.get("gpt-oss-120b@self-hosted")
    assert (proxy.input, proxy.output) == (hosted.input, hosted.output)
    assert "proxy of gpt-oss-120b@groq" in proxy.rule
    # The paper's cost claim: Sonnet 4 is an order of magnitude dearer than gpt-oss-120b.
    usage = Usage(prompt_tokens=30_000, completion_tokens=10_000)
    ratio = table.cost("claude-sonnet-4", usage) / table.cost("gpt-oss-120b@self-hosted", usage)
    assert 15 < ratio < 40


def test_gpu_hours_rule():
    table = PriceTable.default().with_gpu_hours("gpt-oss-120b@my-h100", usd_per_gpu_hour=2.0, gpus=2,
                                                prefill_tokens_per_s=20_000, decode_tokens_per_s=1_000)
    price = table.get("gpt-oss-120b@my-h100")
    # 4 USD/hour = 1/900 USD per second; 1M decode tokens take 1000 s.
    assert price.output == pytest.approx(1000 / 900)
    assert price.input == pytest.approx(50 / 900)
    assert "GPU-hours" in price.rule and "2 GPUs" in price.rule


def test_override_file_replaces_entries(tmp_path):
    path = tmp_path / "my_prices.yaml"
    path.write_text(yaml.safe_dump({"as_of": "2027-01", "entries": {
        "gpt-oss-120b@groq": {"kind": "per_token", "input": 0.10, "output": 0.40},
        "mine": {"kind": "proxy", "same_as": "gpt-oss-120b@groq"}}}))
    table = PriceTable.load(path, base=PriceTable.default())
    assert table.get("gpt-oss-120b@groq").input == 0.10
    assert table.get("mine").output == 0.40
    # The self-hosted proxy follows the overridden hosted price.
    assert table.get("gpt-oss-120b@self-hosted").output == 0.40
    assert table.as_of == "2026-11+2027-01"
    snap = table.snapshot()
    assert snap["entries"]["mine"]["same_as"] == "gpt-oss-120b@groq"
    assert str(path) in snap["sources"]


@pytest.mark.parametrize("entries, message", [
    ({"a": {"kind": "proxy", "same_as": "b"}, "b": {"kind": "proxy", "same_as": "a"}}, "cycle"),
    ({"a": {"kind": "per_token", "input": -1, "output": 1}}, "non-negative"),
    ({"a": {"kind": "bogus"}}, "unknown kind"),
    ({"a": {"kind": "proxy", "same_as": "nowhere"}}, "no price for 'nowhere'"),
])
def test_broken_tables_fail_at_load(entries, message):
    with pytest.raises(ConfigError, match=message):
        PriceTable(entries, as_of="x")


def test_undated_table_is_refused(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"entries": {}}))
    with pytest.raises(ConfigError, match="dated"):
        PriceTable.load(path)


def test_unknown_key_names_known_keys():
    with pytest.raises(ConfigError, match="known keys: .*claude-sonnet-4"):
        PriceTable.default().get("gpt-5")


def test_snapshot_round_trips_for_resumed_runs():
    from accelopt_nb.llm import PriceTable
    table = PriceTable.default()
    again = PriceTable.from_snapshot(table.snapshot())
    assert again.as_of == table.as_of and again.keys() == table.keys()
    assert again.snapshot()["resolved_rules"] == table.snapshot()["resolved_rules"]
