"""Which failures of an LLM request are worth retrying, and how long to wait.

The openai SDK's own retries are switched off (``max_retries=0``) so every attempt is
visible here: counted in the ledger, subject to the spending cap, and delayed by
:class:`RetryPolicy` (exponential backoff with jitter, or the server's ``Retry-After``).
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from datetime import datetime, timezone
from typing import Any

import openai

from accelopt_nb.errors import ConfigError
from accelopt_nb.llm.response import MalformedResponse

__all__ = ["RetryPolicy", "Failure", "classify_failure", "is_transient_kind", "parse_retry_after"]


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries of transient failures (connection, timeout, 429, 5xx, malformed body).

    ``max_attempts`` counts HTTP requests for one response, first try included; ``retry_for_s``
    keeps retrying past it until that many seconds have passed since the first attempt, so an
    endpoint that restarts, or is down for a minute, costs a wait and no answer. The n-th
    retry waits ``min(max_delay_s, base_delay_s * 2**(n-1))`` scaled by a random factor in
    ``[1 - jitter, 1]``; a ``Retry-After`` header replaces that delay (capped at
    ``max_retry_after_s``), because the server knows when it will have capacity again.
    """

    max_attempts: int = 6
    base_delay_s: float = 1.0
    max_delay_s: float = 60.0
    max_retry_after_s: float = 300.0
    jitter: float = 0.5
    retry_for_s: float = 0.0

    def gives_up(self, attempts: int, elapsed_s: float) -> bool:
        """Whether a transient failure after ``attempts`` requests and ``elapsed_s`` seconds is final."""
        return attempts >= self.max_attempts and elapsed_s >= self.retry_for_s

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigError(f"RetryPolicy.max_attempts must be >= 1, got {self.max_attempts}")
        if not 0.0 <= self.jitter <= 1.0:
            raise ConfigError(f"RetryPolicy.jitter must be in [0, 1], got {self.jitter}")
        if self.base_delay_s < 0 or self.max_delay_s < 0 or self.max_retry_after_s < 0 or self.retry_for_s < 0:
            raise ConfigError("RetryPolicy delays must be non-negative")

    def delay(self, retry_number: int, retry_after: float | None = None,
              rng: random.Random | None = None) -> float:
        """Seconds to wait before retry number ``retry_number`` (1 = first retry)."""
        if retry_after is not None and retry_after >= 0:
            return min(retry_after, self.max_retry_after_s)
        backoff = min(self.max_delay_s, self.base_delay_s * 2 ** max(0, retry_number - 1))
        u = (rng or random).random()
        return backoff * (1.0 - self.jitter * u)


@dataclass(frozen=True)
class Failure:
    """One failed attempt, classified.

    ``transient`` failures are retried; ``fatal`` ones (bad key, unknown model) stop the
    call with :class:`~accelopt_nb.errors.LLMEndpointError`; the rest (e.g. 400: prompt
    too long) fail this call only.
    """

    kind: str
    message: str
    transient: bool
    fatal: bool = False
    retry_after: float | None = None


def parse_retry_after(headers: Any) -> float | None:
    """Seconds from ``retry-after-ms`` / ``retry-after`` (number or HTTP date); None if absent."""
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - datetime.now(timezone.utc)).total_seconds())


def _status_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return f"HTTP {exc.status_code}: {err['message']}"
    return f"HTTP {exc.status_code}: {exc.message}"


_TRANSIENT_KINDS = frozenset({"timeout", "connection", "malformed_response", "rate_limited", "http_408", "http_409"})


def is_transient_kind(kind: str) -> bool:
    """Whether a failure kind (``Failure.kind``, as in ``Completion.transport_failures``) is retried."""
    return kind in _TRANSIENT_KINDS or (kind.startswith("http_5") and kind[5:].isdigit())


def classify_failure(exc: BaseException) -> Failure | None:
    """Classify an exception raised by one request; None if it is not a request failure
    (a bug, a cancellation), which the caller must let propagate."""
    if isinstance(exc, openai.APITimeoutError):
        return Failure("timeout", "request timed out", transient=True)
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc.__context__
        detail = f" ({type(cause).__name__}: {cause})" if cause else ""
        return Failure("connection", f"connection error{detail}", transient=True)
    if isinstance(exc, (MalformedResponse, json.JSONDecodeError, UnicodeDecodeError,
                        openai.APIResponseValidationError)):
        return Failure("malformed_response", f"malformed response: {exc}", transient=True)
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        message = _status_message(exc)
        retry_after = parse_retry_after(exc.response.headers if exc.response is not None else None)
        if status == 429:
            return Failure("rate_limited", message, transient=True, retry_after=retry_after)
        if status >= 500:
            return Failure(f"http_{status}", message, transient=True, retry_after=retry_after)
        if status in (408, 409):
            return Failure(f"http_{status}", message, transient=True, retry_after=retry_after)
        if status in (401, 403):
            return Failure("auth", message, transient=False, fatal=True)
        if status == 404:
            return Failure("not_found", message, transient=False, fatal=True)
        return Failure(f"http_{status}", message, transient=False)
    return None
