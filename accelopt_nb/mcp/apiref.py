"""The NKI API reference of one ``nl`` / ``nisa`` call: its documented signature, what the
simulator does with it, and the rules a kernel using it must keep.

Three sources, each read through its public function and kept in one place:

* the documented API table (``accelopt_nb/sim/api/nki_api.yaml``, extracted from the Neuron docs) for
  the signature, doc section and docs release of each front end;
* the simulator's coverage report (:func:`accelopt_nb.sim.api.coverage.collect`): supported, partial
  or refused, with the arguments it refuses and why;
* the NKI knowledge and programming rules the agents' prompts teach (``agents/prompts/_nki_knowledge.j2``,
  ``_nki_rules.j2``): every bullet that names the call.
"""
from __future__ import annotations

import difflib
import functools
import re
from typing import Any

from accelopt_nb.errors import ConfigError

__all__ = ["FRONT_ENDS", "MODULE_ALIASES", "lookup", "api_names"]

FRONT_ENDS = ("neuronxcc", "nki")
# What a caller may write before the name -> the documented module.
MODULE_ALIASES = {"nl": "language", "language": "language", "nisa": "isa", "isa": "isa"}
SHORT = {"language": "nl", "isa": "nisa"}
_PREFIXES = ("neuronxcc.nki.", "nki.")


class UnknownAPIError(ConfigError):
    """No documented NKI API has this name; ``suggestions`` holds the closest ones."""

    def __init__(self, message: str, suggestions: list[str]) -> None:
        super().__init__(message)
        self.suggestions = suggestions


@functools.lru_cache(maxsize=1)
def _table() -> dict[str, Any]:
    """front end -> module -> name -> entry, plus each front end's docs release and URL."""
    from accelopt_nb.sim.api import guard as api_guard

    meta = api_guard.api_file()["front_ends"]
    return {"apis": api_guard.documented(),
            "meta": {fe: {"release": m.get("release"), "url": m.get("url")} for fe, m in meta.items()}}


@functools.lru_cache(maxsize=1)
def _coverage() -> dict[tuple[str, str, str], tuple[str, list[str]]]:
    from accelopt_nb.sim.api import coverage

    return {(row.front_end, row.module, row.name): (row.status, list(row.notes)) for row in coverage.collect()}


@functools.lru_cache(maxsize=4)
def _rule_bullets(hw: str) -> list[tuple[str, str]]:
    """(section, bullet) pairs of the agents' NKI facts and rules, rendered for ``hw``."""
    from accelopt_nb.agents.prompts import HW_FACTS, PromptSet

    prompts = PromptSet()
    out: list[tuple[str, str]] = []
    for template in ("_nki_knowledge", "_nki_rules"):
        section = ""
        bullet: list[str] = []
        for line in prompts.render(template, hw=HW_FACTS[hw]).splitlines():
            if line.startswith("- "):
                if bullet:
                    out.append((section, "\n".join(bullet)))
                bullet = [line[2:]]
            elif line.startswith("  ") and bullet:
                bullet.append(line.strip())
            else:
                if bullet:
                    out.append((section, "\n".join(bullet)))
                    bullet = []
                if line.rstrip().endswith(":") and not line.startswith("#"):
                    section = line.rstrip()[:-1]
        if bullet:
            out.append((section, "\n".join(bullet)))
    return out


def api_names(front_end: str = "neuronxcc") -> list[str]:
    """Every documented name of a front end, as ``nl.x`` / ``nisa.y``."""
    apis = _table()["apis"][front_end]
    return [f"{SHORT[mod]}.{name}" for mod in ("language", "isa") for name in apis.get(mod, {})]


def _parse(name: str) -> tuple[str | None, str]:
    text = name.strip()
    for prefix in _PREFIXES:
        if text.startswith(prefix):
            text = text[len(prefix):]
            break
    if "." in text:
        mod, _, rest = text.partition(".")
        if mod not in MODULE_ALIASES or not rest.isidentifier():
            raise UnknownAPIError(f"{name!r} is not an nl.* or nisa.* name", [])
        return MODULE_ALIASES[mod], rest
    if not text.isidentifier():
        raise UnknownAPIError(f"{name!r} is not an NKI API name (write e.g. nl.load or nisa.nc_matmul)", [])
    return None, text


def lookup(name: str, front_end: str = "neuronxcc", hw: str = "trn1") -> list[dict[str, Any]]:
    """The reference of ``name`` (``nl.load``, ``nisa.nc_matmul``, ``nki.isa.activation`` or a bare
    ``nc_matmul``) in one front end, or in both (``front_end="both"``): one entry per match."""
    if front_end not in (*FRONT_ENDS, "both"):
        raise ConfigError(f"unknown front end {front_end!r}; choose neuronxcc, nki or both")
    module, api = _parse(name)
    table = _table()
    out = []
    for fe in (FRONT_ENDS if front_end == "both" else (front_end,)):
        for mod in (module,) if module else ("language", "isa"):
            entry = table["apis"][fe].get(mod, {}).get(api)
            if entry is None:
                continue
            status, notes = _coverage().get((fe, mod, api), ("refused", ["not in the simulator's coverage table"]))
            qual = f"{SHORT[mod]}.{api}"
            pattern = re.compile(rf"(?<![\w.]){re.escape(qual)}\b|`{re.escape(api)}\(")
            rules = [{"topic": section, "text": text} for section, text in _rule_bullets(hw) if pattern.search(text)]
            signature = entry.get("signature")
            out.append({
                "api": qual, "front_end": fe, "module": f"{'neuronxcc.nki' if fe == 'neuronxcc' else 'nki'}.{mod}",
                "kind": entry.get("kind"), "section": entry.get("section"),
                "signature": f"{api}({' '.join(signature.split())})" if signature else None,
                "members": entry.get("members"),
                "docs": {"release": table["meta"][fe]["release"], "url": table["meta"][fe]["url"]},
                "simulator": {"status": status, "notes": notes},
                "rules": rules,
            })
    if not out:
        pool = api_names("neuronxcc") + api_names("nki")
        wanted = f"{SHORT[module]}.{api}" if module else api
        candidates = pool if module else [p.split(".", 1)[1] for p in pool]
        suggestions = sorted(set(difflib.get_close_matches(wanted, candidates, n=5, cutoff=0.6)))
        where = "the neuronxcc.nki or nki" if front_end == "both" else f"the {front_end}"
        raise UnknownAPIError(f"no documented NKI API {name!r} in {where} API reference", suggestions)
    return out
