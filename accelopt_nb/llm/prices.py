"""Dated, overridable LLM price table (USD per million tokens).

The shipped table is ``data/prices.yaml``; users merge their own YAML file or entries on
top. Three kinds of entry exist:

* ``per_token`` prices published by a provider;
* ``proxy``: a self-hosted model priced as a named hosted offer of the same model;
* ``gpu_hours``: a self-hosted model priced by amortised GPU time. The stated rule is
  ``USD/token = USD per GPU-hour x GPUs / 3600 / tokens per second``, with separate
  prefill (input) and decode (output) throughputs that the user measured.

Self-hosted vLLM has no marginal token price, so how it is priced decides any cost
comparison with hosted models; :meth:`PriceTable.snapshot` is stored with every run.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

import yaml

from accelopt_nb.errors import ConfigError
from accelopt_nb.llm.response import Usage

__all__ = ["Price", "PriceTable"]

_PER_MILLION = 1_000_000.0


@dataclass(frozen=True)
class Price:
    """A resolved price: USD per 1M tokens plus the rule that produced it."""

    key: str
    input: float
    output: float
    cached_input: float | None = None
    long_threshold_tokens: int | None = None
    long_input: float | None = None
    long_output: float | None = None
    rule: str = "published per-token price"
    source: str | None = None

    def cost(self, usage: Usage) -> float:
        """USD for ``usage``; cached prompt tokens at the cached rate, reasoning as output."""
        input_rate, output_rate, cached_rate = self.input, self.output, self.cached_input
        if self.long_threshold_tokens is not None and usage.prompt_tokens > self.long_threshold_tokens:
            scale = (self.long_input / self.input) if self.input and self.long_input else 1.0
            input_rate = self.long_input if self.long_input is not None else input_rate
            output_rate = self.long_output if self.long_output is not None else output_rate
            cached_rate = cached_rate * scale if cached_rate is not None else None
        cached = min(usage.cached_tokens, usage.prompt_tokens)
        if cached_rate is None:
            cached_rate = input_rate
        return ((usage.prompt_tokens - cached) * input_rate + cached * cached_rate
                + usage.completion_tokens * output_rate) / _PER_MILLION


def _number(entry: Mapping[str, Any], key: str, name: str) -> float:
    value = entry.get(name)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
        raise ConfigError(f"price entry {key!r}: {name!r} must be a non-negative number, got {value!r}")
    return float(value)


class PriceTable:
    """Price entries keyed by a price key such as ``claude-sonnet-4`` or ``gpt-oss-120b@groq``."""

    def __init__(self, entries: Mapping[str, Mapping[str, Any]], *, as_of: str,
                 sources: tuple[str, ...] = ()) -> None:
        self._entries = {k: dict(v) for k, v in entries.items()}
        self.as_of = str(as_of)
        self.sources = sources
        for key in self._entries:
            self.get(key)  # validate eagerly: a broken table fails at load, not mid-run

    # -- construction ------------------------------------------------------------------
    @classmethod
    def default(cls) -> "PriceTable":
        """The table shipped with accelopt_nb (``accelopt_nb/llm/data/prices.yaml``)."""
        text = resources.files("accelopt_nb.llm").joinpath("data/prices.yaml").read_text()
        return cls._from_document(yaml.safe_load(text), "accelopt_nb/llm/data/prices.yaml")

    @classmethod
    def load(cls, path: str | Path, *, base: "PriceTable | None" = None) -> "PriceTable":
        """Load a price YAML file; with ``base``, its entries override the base table's."""
        path = Path(path)
        try:
            doc = yaml.safe_load(path.read_text())
        except OSError as exc:
            raise ConfigError(f"cannot read price table {path}: {exc}") from exc
        table = cls._from_document(doc, str(path))
        return base.merged(table) if base is not None else table

    @classmethod
    def from_snapshot(cls, snapshot: Mapping[str, Any]) -> "PriceTable":
        """The table a run recorded with :meth:`snapshot`, so a resumed run prices calls as it began."""
        return cls(snapshot["entries"], as_of=str(snapshot["as_of"]), sources=tuple(snapshot.get("sources", ())))

    @classmethod
    def _from_document(cls, doc: Any, origin: str) -> "PriceTable":
        if not isinstance(doc, Mapping) or not isinstance(doc.get("entries"), Mapping):
            raise ConfigError(f"price table {origin} must be a mapping with an 'entries' mapping")
        if "as_of" not in doc:
            raise ConfigError(f"price table {origin} has no 'as_of' date; prices must be dated")
        return cls(doc["entries"], as_of=str(doc["as_of"]), sources=(origin,))

    def merged(self, other: "PriceTable") -> "PriceTable":
        """A new table: ``other``'s entries replace ours; the date becomes both dates."""
        entries = {**self._entries, **other._entries}
        as_of = self.as_of if self.as_of == other.as_of else f"{self.as_of}+{other.as_of}"
        return PriceTable(entries, as_of=as_of, sources=self.sources + other.sources)

    def with_entries(self, entries: Mapping[str, Mapping[str, Any]], *,
                     as_of: str | None = None) -> "PriceTable":
        """A new table with ``entries`` added or replaced (e.g. your negotiated prices)."""
        # Merge before validating, so a new proxy may point at an existing entry.
        merged = {**self._entries, **entries}
        return PriceTable(merged, as_of=as_of or self.as_of, sources=self.sources + ("overrides",))

    def with_gpu_hours(self, key: str, *, usd_per_gpu_hour: float, gpus: int,
                       prefill_tokens_per_s: float, decode_tokens_per_s: float,
                       note: str = "") -> "PriceTable":
        """Add a ``gpu_hours`` entry for a self-hosted model (see the module docstring)."""
        return self.with_entries({key: {
            "kind": "gpu_hours", "usd_per_gpu_hour": usd_per_gpu_hour, "gpus": gpus,
            "prefill_tokens_per_s": prefill_tokens_per_s, "decode_tokens_per_s": decode_tokens_per_s,
            "note": note}})

    # -- lookup ------------------------------------------------------------------------
    @staticmethod
    def _kind(entry: Mapping[str, Any]) -> str:
        return str(entry.get("kind", "per_token"))

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def keys(self) -> list[str]:
        return sorted(self._entries)

    def get(self, key: str) -> Price:
        """The resolved :class:`Price` for ``key``; proxies are followed."""
        return self._resolve(key, ())

    def _resolve(self, key: str, chain: tuple[str, ...]) -> Price:
        if key in chain:
            raise ConfigError(f"price entry {key!r}: proxy cycle {' -> '.join(chain + (key,))}")
        entry = self._entries.get(key)
        if entry is None:
            raise ConfigError(f"no price for {key!r} in the price table (as of {self.as_of}); "
                              f"known keys: {', '.join(self.keys())}")
        kind = self._kind(entry)
        if kind == "per_token":
            long = entry.get("long_context") or {}
            return Price(
                key=key, input=_number(entry, key, "input"), output=_number(entry, key, "output"),
                cached_input=_number(entry, key, "cached_input") if "cached_input" in entry else None,
                long_threshold_tokens=int(long["threshold_tokens"]) if long else None,
                long_input=_number(long, key, "input") if long else None,
                long_output=_number(long, key, "output") if long else None,
                rule=str(entry.get("rule", "published per-token price")),
                source=entry.get("source"))
        if kind == "proxy":
            target = entry.get("same_as")
            if not isinstance(target, str):
                raise ConfigError(f"price entry {key!r}: a proxy needs 'same_as: <price key>'")
            base = self._resolve(target, chain + (key,))
            rule = str(entry.get("rule", f"priced as {target}"))
            return Price(key=key, input=base.input, output=base.output, cached_input=base.cached_input,
                         long_threshold_tokens=base.long_threshold_tokens, long_input=base.long_input,
                         long_output=base.long_output, rule=f"{rule} [proxy of {target}]",
                         source=base.source)
        if kind == "gpu_hours":
            hourly = _number(entry, key, "usd_per_gpu_hour") * _number(entry, key, "gpus")
            prefill = _number(entry, key, "prefill_tokens_per_s")
            decode = _number(entry, key, "decode_tokens_per_s")
            if prefill == 0 or decode == 0:
                raise ConfigError(f"price entry {key!r}: throughputs must be positive")
            per_second = hourly / 3600.0
            rule = (f"GPU-hours: {entry['usd_per_gpu_hour']} USD/GPU-h x {entry['gpus']} GPUs, "
                    f"{prefill:g} prefill tok/s, {decode:g} decode tok/s")
            if entry.get("note"):
                rule += f" ({entry['note']})"
            return Price(key=key, input=per_second / prefill * _PER_MILLION,
                         output=per_second / decode * _PER_MILLION, rule=rule, source=entry.get("source"))
        raise ConfigError(f"price entry {key!r}: unknown kind {kind!r} "
                          "(expected per_token, proxy or gpu_hours)")

    def cost(self, key: str, usage: Usage) -> float:
        return self.get(key).cost(usage)

    def snapshot(self) -> dict[str, Any]:
        """Everything needed to recompute costs later; stored with each run."""
        return {"as_of": self.as_of, "sources": list(self.sources), "unit": "USD per 1M tokens",
                "entries": copy.deepcopy(self._entries),
                "resolved_rules": {k: self.get(k).rule for k in self.keys()}}

    def __repr__(self) -> str:
        return f"PriceTable(as_of={self.as_of!r}, {len(self._entries)} entries)"
