"""Fault injection for the FAKE model server: the failures a real endpoint produces, seeded.

:class:`FaultInjector` wraps a responder; each request gets, with the given probabilities, an
HTTP 500/503, a 429 with ``Retry-After``, a stall longer than the client's timeout (then the
connection drops, so nothing is served), an answer cut off at the token limit
(``finish_reason: length``), an empty answer, or a refusal; otherwise the wrapped responder's
answer. It counts what it injected, so a test can check the ledger against the server.
"""
from __future__ import annotations

import random
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from accelopt_nb.fake_model.server import Action, Disconnect, Fail, Reply, Slow

__all__ = ["FaultInjector", "FaultRates"]

REFUSAL = "I'm sorry, but I can't help with that."


@dataclass
class FaultRates:
    """Probability of each fault per request (the rest are answered normally)."""

    http_5xx: float = 0.05
    rate_limited: float = 0.05
    stall: float = 0.02
    truncated: float = 0.04
    empty: float = 0.03
    refusal: float = 0.03

    def items(self) -> list[tuple[str, float]]:
        return [(k, getattr(self, k)) for k in ("http_5xx", "rate_limited", "stall", "truncated", "empty",
                                                "refusal")]


@dataclass
class FaultInjector:
    """A responder that injects faults before delegating to ``inner`` (see the module docstring)."""

    inner: Callable[[dict], Action]
    rates: FaultRates = field(default_factory=FaultRates)
    stall_s: float = 3.0      # longer than the client's timeout in the smoke runs
    seed: int = 0
    injected: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._lock = threading.Lock()

    def __call__(self, body: dict) -> Action:
        with self._lock:
            draw = self._rng.random()
        for kind, p in self.rates.items():
            if draw < p:
                with self._lock:
                    self.injected[kind] += 1
                return self._fault(kind, body)
            draw -= p
        return self.inner(body)

    def _fault(self, kind: str, body: dict) -> Action:
        if kind == "http_5xx":
            return Fail(503 if len(self.injected) % 2 else 500, "injected server error")
        if kind == "rate_limited":
            return Fail(429, "injected rate limit", retry_after=0.05)
        if kind == "stall":
            return Slow(self.stall_s, Disconnect())
        if kind == "truncated":
            answer = self.inner(body)
            text = answer.content if isinstance(answer, Reply) else "```python\nimport numpy"
            return Reply(text[: max(1, len(text) // 2)], finish_reason="length")
        if kind == "empty":
            return Reply("")
        return Reply(REFUSAL)
