"""YAML presets for the search (``paper`` = the paper's setting, ``smoke`` = tiny).

A preset is a plain mapping; :class:`accelopt_nb.search.config.SearchConfig` validates it.
Pass a name shipped here or the path of your own YAML file.
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from accelopt_nb.errors import ConfigError


def list_presets() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files(__name__).iterdir() if p.name.endswith(".yaml"))


def load_preset(name_or_path: str | Path) -> dict[str, Any]:
    """The mapping of a shipped preset (by name) or of a YAML file (by path)."""
    text: str
    candidate = Path(str(name_or_path))
    if candidate.suffix in (".yaml", ".yml") or candidate.is_file():
        if not candidate.is_file():
            raise ConfigError(f"preset file not found: {candidate}")
        text = candidate.read_text()
    else:
        res = resources.files(__name__) / f"{name_or_path}.yaml"
        if not res.is_file():
            raise ConfigError(f"unknown preset {str(name_or_path)!r}; shipped presets: {', '.join(list_presets())} "
                              "(or pass the path of a .yaml file)")
        text = res.read_text()
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"preset {name_or_path} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"preset {name_or_path} must be a mapping, got {type(data).__name__}")
    return data
