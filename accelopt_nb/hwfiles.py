"""The hardware configs' files: ``accelopt_nb/perf/hw/<name>.yaml``, every number commented with its source.

The one place that knows where they are and how to read them. Two layers use them: the performance model types
them (:mod:`accelopt_nb.perf.hardware`), and the simulator checks kernels against the NeuronCore limits written
in them (:mod:`accelopt_nb.sim.core.limits`). It sits below both so neither imports the other for these facts.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from accelopt_nb.errors import ConfigError

HW_DIR = Path(__file__).parent / "perf" / "hw"
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)     # libyaml when present: ~10x faster


def presets() -> list[str]:
    """Names of the shipped hardware configs."""
    return sorted(p.stem for p in HW_DIR.glob("*.yaml"))


def read_yaml(path: Path) -> dict[str, Any]:
    """A hardware config (or overrides) file as a mapping; a clear error when it is not one."""
    try:
        data = yaml.load(path.read_text(), Loader=_Loader)
    except yaml.YAMLError as exc:
        raise ConfigError(f"hardware config {path} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"hardware config {path} must be a YAML mapping of keys to values")
    return data


def preset_file(name: str) -> Path:
    """The file of a shipped config."""
    return HW_DIR / f"{name}.yaml"
