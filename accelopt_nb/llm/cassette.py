"""Record and replay of LLM requests, so notebooks and figures re-run offline.

A cassette is a JSONL file of ``{key, request, response, ...}`` entries. The key is the
SHA-256 of the canonical JSON of the request (model, messages, every sampling setting,
``extra_body``) plus the caller's ``sample`` index, the call's ``slot`` (its identity in the
run, e.g. the kernel id it produces) and the unusable-output retry number.
Endpoint URL, API key and timeout are not part of the key, so a cassette recorded against
one server replays anywhere.

Identical requests (repeated sampling of one prompt) may occur several times; replay hands
out their recorded responses in recording order. The search passes each call's ``slot``, so
two plans that happen to produce identical executor requests still replay kernel by kernel,
independent of scheduling.

Modes: ``record`` (call the server, append every response), ``replay`` (never call a
server; a miss raises :class:`~accelopt_nb.errors.ReplayMissError`), ``auto`` (replay
hits, record misses).
"""
from __future__ import annotations

import hashlib
import json
import threading
import warnings
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, Mapping

from accelopt_nb.errors import ConfigError, ReplayMissError

__all__ = ["Cassette", "CassetteEntry", "request_key", "CassetteMode"]

CassetteMode = Literal["record", "replay", "auto"]


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def request_key(request: Mapping[str, Any], *, sample: int | None = None, retry: int = 0,
                slot: str | None = None) -> str:
    """Canonical hash of a request body (see the module docstring for what it covers)."""
    material: dict[str, Any] = {"request": request, "sample": sample, "retry": retry}
    if slot is not None:  # absent when unused, so cassettes recorded before slots still replay
        material["slot"] = slot
    return hashlib.sha256(_canonical(material).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class CassetteEntry:
    key: str
    request: dict[str, Any]
    response: dict[str, Any]
    latency_s: float
    attempts: int = 1
    transport_failures: list[str] = field(default_factory=list)
    sample: int | None = None
    retry: int = 0
    recorded_at: str = ""
    slot: str | None = None


def _describe(request: Mapping[str, Any]) -> str:
    messages = request.get("messages") or []
    last = messages[-1].get("content", "") if messages and isinstance(messages[-1], Mapping) else ""
    snippet = str(last).replace("\n", " ")[:80]
    return f"model={request.get('model')!r}, {len(messages)} message(s), last: {snippet!r}"


class Cassette:
    """A JSONL cassette file; thread-safe. See the module docstring for the modes."""

    def __init__(self, path: str | Path, mode: CassetteMode = "replay") -> None:
        if mode not in ("record", "replay", "auto"):
            raise ConfigError(f"cassette mode must be record, replay or auto, got {mode!r}")
        self.path = Path(path)
        self.mode: CassetteMode = mode
        self._lock = threading.Lock()
        self._entries: dict[str, list[CassetteEntry]] = defaultdict(list)
        self._cursor: dict[str, int] = defaultdict(int)
        self.hits = 0
        self.misses = 0
        if mode == "replay" and not self.path.exists():
            raise ConfigError(f"replay cassette {self.path} does not exist; record it first "
                              "(mode='record') or use mode='auto'")
        if self.path.exists():
            self._load()
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def _load(self) -> None:
        lines = self.path.read_text(encoding="utf-8").splitlines()
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
                entry = CassetteEntry(**raw)
            except (json.JSONDecodeError, TypeError) as exc:
                if n == len(lines):  # cut short by a crash while recording: that call was in flight
                    warnings.warn(f"cassette {self.path}: ignoring incomplete last line", stacklevel=3)
                    continue
                raise ConfigError(f"cassette {self.path} line {n} is corrupt: {exc}") from exc
            self._entries[entry.key].append(entry)

    def __len__(self) -> int:
        with self._lock:
            return sum(len(v) for v in self._entries.values())

    @property
    def replays(self) -> bool:
        return self.mode in ("replay", "auto")

    @property
    def records(self) -> bool:
        return self.mode in ("record", "auto")

    def lookup(self, key: str, request: Mapping[str, Any], *,
               fallback: str | None = None) -> CassetteEntry | None:
        """The next recorded response for ``key`` (or, failing that, for ``fallback``: the key
        the request had before calls carried slots, so older cassettes still replay); None on
        a miss in ``auto`` mode. In ``replay`` mode a miss raises ReplayMissError naming the request.
        """
        with self._lock:
            for k in (key, fallback):
                if k is None:
                    continue
                entries = self._entries.get(k, [])
                i = self._cursor[k]
                if i < len(entries):
                    self._cursor[k] = i + 1
                    self.hits += 1
                    return entries[i]
            entries = self._entries.get(key, [])
            self.misses += 1
        if self.mode == "replay":
            seen = f" (recorded {len(entries)} time(s), all used)" if entries else ""
            raise ReplayMissError(f"cassette {self.path} has no response for request {key[:12]}"
                                  f"{seen}: {_describe(request)}")
        return None

    def record(self, key: str, request: Mapping[str, Any], response: Mapping[str, Any], *,
               latency_s: float, attempts: int, transport_failures: list[str],
               sample: int | None, retry: int, slot: str | None = None) -> None:
        entry = CassetteEntry(key=key, request=dict(request), response=dict(response),
                              latency_s=latency_s, attempts=attempts,
                              transport_failures=list(transport_failures), sample=sample, retry=retry,
                              slot=slot,
                              recorded_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
        line = json.dumps(entry.__dict__, sort_keys=True, ensure_ascii=False)
        with self._lock:
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(line + "\n")
                fh.flush()
            self._entries[key].append(entry)
            # A response recorded now must not be replayed again in this session.
            self._cursor[key] = len(self._entries[key])
