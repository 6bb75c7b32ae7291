"""Usage extraction across API dialects, and response parsing."""
from __future__ import annotations

import pytest

from accelopt_nb.llm import Usage, extract_usage, parse_chat_response
from accelopt_nb.llm.response import MalformedResponse


def test_chat_completions_usage():
    u = extract_usage({"prompt_tokens": 100, "completion_tokens": 50, "total_tokens": 150,
                       "completion_tokens_details": {"reasoning_tokens": 30},
                       "prompt_tokens_details": {"cached_tokens": 64}})
    assert u == Usage(100, 50, 30, 64)
    assert u.total_tokens == 150


def test_responses_and_anthropic_usage_names():
    assert extract_usage({"input_tokens": 7, "output_tokens": 3,
                          "output_tokens_details": {"reasoning_tokens": 2},
                          "input_tokens_details": {"cached_tokens": 1}}) == Usage(7, 3, 2, 1)
    assert extract_usage({"input_tokens": 7, "output_tokens": 3, "cache_read_input_tokens": 5}) == Usage(7, 3, 0, 5)


@pytest.mark.parametrize("raw", [None, {}, {"prompt_tokens": None}, {"prompt_tokens": "x"}, "junk",
                                 {"completion_tokens_details": None, "prompt_tokens": 4}])
def test_usage_extraction_never_raises(raw):
    u = extract_usage(raw)
    assert u.completion_tokens == 0


def test_usage_adds():
    assert Usage(1, 2, 3, 4) + Usage(10, 20, 30, 40) == Usage(11, 22, 33, 44)


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_parse_reads_reasoning_from_either_field(field):
    p = parse_chat_response({"id": "x", "model": "m", "choices": [
        {"message": {"role": "assistant", "content": "answer", field: "because"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 2}})
    assert (p.text, p.reasoning, p.finish_reason, p.usage) == ("answer", "because", "stop", Usage(1, 2))


def test_null_content_is_empty_text():
    p = parse_chat_response({"choices": [{"message": {"content": None}, "finish_reason": "length"}]})
    assert p.text == "" and p.finish_reason == "length"


@pytest.mark.parametrize("body", [[], {"choices": []}, {"choices": [{}]}, {"choices": [{"message": 3}]},
                                  {"choices": [{"message": {"content": 5}}]}])
def test_malformed_bodies(body):
    with pytest.raises(MalformedResponse):
        parse_chat_response(body)
