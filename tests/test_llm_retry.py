"""Retry classification and backoff."""
from __future__ import annotations

import random
from email.utils import format_datetime
from datetime import datetime, timedelta, timezone

import httpx2
import openai
import pytest

from accelopt_nb.errors import ConfigError
from accelopt_nb.llm import RetryPolicy
from accelopt_nb.llm.response import MalformedResponse
from accelopt_nb.llm.retry import classify_failure, parse_retry_after


def _status_error(status: int, headers: dict | None = None) -> openai.APIStatusError:
    request = httpx2.Request("POST", "http://x/v1/chat/completions")
    response = httpx2.Response(status, headers=headers or {}, request=request)
    cls = {429: openai.RateLimitError, 500: openai.InternalServerError, 401: openai.AuthenticationError,
           404: openai.NotFoundError, 400: openai.BadRequestError}.get(status, openai.APIStatusError)
    return cls(f"status {status}", response=response, body={"error": {"message": f"scripted {status}"}})


def test_exponential_backoff_with_jitter_bounds():
    policy = RetryPolicy(base_delay_s=1.0, max_delay_s=10.0, jitter=0.5)
    rng = random.Random(0)
    for n, full in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 10.0), (9, 10.0)]:
        for _ in range(20):
            d = policy.delay(n, rng=rng)
            assert full * 0.5 <= d <= full


def test_retry_after_replaces_backoff_and_is_capped():
    policy = RetryPolicy(base_delay_s=5.0, max_retry_after_s=30.0)
    assert policy.delay(1, retry_after=0.25) == 0.25
    assert policy.delay(1, retry_after=600) == 30.0


def test_parse_retry_after_forms():
    assert parse_retry_after({"retry-after": "2"}) == 2.0
    assert parse_retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    future = format_datetime(datetime.now(timezone.utc) + timedelta(seconds=30), usegmt=True)
    assert 25 <= parse_retry_after({"retry-after": future}) <= 31
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


@pytest.mark.parametrize("status, kind, transient, fatal", [
    (429, "rate_limited", True, False), (500, "http_500", True, False), (503, "http_503", True, False),
    (401, "auth", False, True), (404, "not_found", False, True), (400, "http_400", False, False),
])
def test_status_classification(status, kind, transient, fatal):
    f = classify_failure(_status_error(status, {"retry-after": "3"}))
    assert (f.kind, f.transient, f.fatal) == (kind, transient, fatal)
    assert f"scripted {status}" in f.message
    if status == 429:
        assert f.retry_after == 3.0


def test_transport_and_body_failures_are_transient():
    request = httpx2.Request("POST", "http://x")
    assert classify_failure(openai.APITimeoutError(request)).kind == "timeout"
    assert classify_failure(openai.APIConnectionError(request=request)).kind == "connection"
    assert classify_failure(MalformedResponse("no choices")).kind == "malformed_response"
    assert classify_failure(ValueError("a bug")) is None


def test_bad_policy_values():
    with pytest.raises(ConfigError):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ConfigError):
        RetryPolicy(jitter=2)
