"""The hardware configs' files: ``accelopt_nb/perf/hw/<name>.yaml``, every number commented with its source.

The one place that knows where they are and how to read them. Two layers use them: the performance model types
them (:mod:`accelopt_nb.perf.hardware`), and the simulator checks kernels against the NeuronCore limits written
in them (:mod:`accelopt_nb.sim.core.limits`). It sits below both so neither imports the other for these facts.
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, NamedTuple

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


class Target(NamedTuple):
    """The hardware a kernel is simulated for: generation-specific semantics and API availability follow
    ``nc_version`` (2 = NeuronCore-v2, trn1; 3 = NeuronCore-v3, trn2)."""

    name: str
    nc_version: int

    def __str__(self) -> str:
        return f"{self.name} (NeuronCore-v{self.nc_version})"


def target(hw: Any) -> Target | None:
    """The generation of a hardware config: a preset name (``trn1``, ``trn2``), a YAML config path (its
    ``nc_version``, or its ``base``'s), or an object with ``name`` and ``nc_version`` (a perf ``HWConfig``).
    ``None`` is an unknown target (the simulator is then permissive)."""
    if hw is None:
        return None
    if hasattr(hw, "nc_version"):
        return Target(str(getattr(hw, "name", f"NeuronCore-v{hw.nc_version}")), int(hw.nc_version))
    return _target(str(hw))


@functools.lru_cache(maxsize=64)
def _target(source: str) -> Target:
    path = Path(source)
    if not source.endswith((".yaml", ".yml")) and preset_file(source).is_file():
        path = preset_file(source)
    elif not path.is_file():
        raise ConfigError(f"unknown hardware {source!r}: use one of {', '.join(presets())} or a YAML file path")
    data = read_yaml(path)
    if "nc_version" in data:
        return Target(str(data.get("name", path.stem)), int(data["nc_version"]))
    if "base" in data:
        return _target(str(data["base"]))._replace(name=str(data.get("name", path.stem)))
    raise ConfigError(f"hardware config {path} has no nc_version (nor a base config to take it from)")
