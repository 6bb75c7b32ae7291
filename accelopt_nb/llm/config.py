"""Per-model request settings, as data.

A :class:`ModelConfig` says where a model is served, which environment variable holds its
API key, and which request settings to send (reasoning effort, thinking budget, output
limit, temperature). Named presets live in ``data/models.yaml``; model quirks are never
inferred from substrings of the model name.
"""
from __future__ import annotations

import copy
import dataclasses
import os
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

import yaml

from accelopt_nb.errors import ConfigError
from accelopt_nb.llm.retry import RetryPolicy

__all__ = ["DEFAULT_RESERVE_OUTPUT_TOKENS", "ModelConfig", "load_model_presets", "NO_API_KEY"]

# Sent when the server needs no key (a local vLLM without --api-key): the SDK insists on one.
NO_API_KEY = "EMPTY"

_REASONING_EFFORTS = {"minimal", "low", "medium", "high"}

# Output tokens a call holds against a spending cap when the request sets no ``max_tokens``:
# about one gpt-oss answer at medium effort with a full kernel (reasoning included).
DEFAULT_RESERVE_OUTPUT_TOKENS = 8192
# Without a retry block of its own, a model's calls keep retrying a transient failure (connection, timeout,
# 5xx, 429) this long before they count as failed: an endpoint that restarts or is down for a few minutes
# costs a wait, not calls (a retry block sets retry_for_s itself; RetryPolicy's own default is 0).
DEFAULT_RETRY_FOR_S = 300.0


def load_model_presets(extra: str | Path | Mapping[str, Any] | None = None) -> dict[str, dict]:
    """The shipped presets, optionally updated by a YAML file (or mapping) of your own.

    A preset in ``extra`` with the name of a shipped one replaces it field by field.
    """
    text = resources.files("accelopt_nb.llm").joinpath("data/models.yaml").read_text()
    presets: dict[str, dict] = yaml.safe_load(text) or {}
    if extra is not None:
        if isinstance(extra, Mapping):
            more = extra
        else:
            try:
                more = yaml.safe_load(Path(extra).read_text()) or {}
            except OSError as exc:
                raise ConfigError(f"cannot read model presets {extra}: {exc}") from exc
        if not isinstance(more, Mapping):
            raise ConfigError(f"model presets {extra} must be a mapping of preset name to settings")
        for name, settings in more.items():
            presets[name] = {**presets.get(name, {}), **(settings or {})}
    return presets


@dataclass(frozen=True)
class ModelConfig:
    """Where and how to call one model.

    Request settings left as ``None`` are not sent, so the server's defaults apply.
    ``extra_body`` is merged into the request JSON as-is (Anthropic's ``thinking`` block,
    vLLM-specific sampling options).
    """

    model: str
    base_url: str
    name: str | None = None
    api_key_env: str | None = None
    api_key_required: bool = True
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    reasoning_effort: str | None = None
    seed: int | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)
    timeout_s: float = 600.0
    price: str | None = None
    max_unusable_retries: int = 2
    retry: RetryPolicy = field(default_factory=lambda: RetryPolicy(retry_for_s=DEFAULT_RETRY_FOR_S))
    serve: dict[str, Any] | None = None
    reserve_output_tokens: int = DEFAULT_RESERVE_OUTPUT_TOKENS  # cap estimate without max_tokens

    def __post_init__(self) -> None:
        if not self.model:
            raise ConfigError("ModelConfig.model must name the served model")
        if not self.base_url.startswith(("http://", "https://")):
            raise ConfigError(f"ModelConfig.base_url must be an http(s) URL, got {self.base_url!r}")
        if self.reasoning_effort is not None and self.reasoning_effort not in _REASONING_EFFORTS:
            raise ConfigError(f"reasoning_effort must be one of {sorted(_REASONING_EFFORTS)}, "
                              f"got {self.reasoning_effort!r}")
        if self.max_unusable_retries < 0:
            raise ConfigError("max_unusable_retries must be >= 0")
        if self.reserve_output_tokens < 0:
            raise ConfigError("reserve_output_tokens must be >= 0")
        if self.timeout_s <= 0:
            raise ConfigError("timeout_s must be positive")
        if not isinstance(self.extra_body, dict):
            raise ConfigError("extra_body must be a mapping")

    # -- construction ------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, name: str | None = None) -> "ModelConfig":
        """Build from a mapping (a YAML preset); unknown keys are an error, not ignored."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown model setting(s) {unknown} in preset {name or '?'}; "
                              f"known: {sorted(known)}")
        values = dict(copy.deepcopy(dict(data)))
        if isinstance(values.get("retry"), Mapping):
            try:
                values["retry"] = RetryPolicy(**values["retry"])
            except TypeError as exc:
                raise ConfigError(f"bad retry settings in preset {name or '?'}: {exc}") from exc
        if values.get("extra_body") is None:
            values["extra_body"] = {}
        if name is not None and values.get("name") is None:
            values["name"] = name
        for required in ("model", "base_url"):
            if not values.get(required):
                raise ConfigError(f"model preset {name or '?'} needs {required!r}")
        return cls(**values)

    @classmethod
    def from_preset(cls, preset: str, *, presets: Mapping[str, Any] | None = None,
                    **overrides: Any) -> "ModelConfig":
        """A shipped (or given) preset, with keyword overrides, e.g. ``base_url=...``.

        ``preset`` may also be a YAML file of one's own: one model's settings (``model``,
        ``base_url``, ...), or presets by name of which it holds one; ``FILE.yaml:NAME`` picks one."""
        if presets is None and _is_preset_file(preset):
            return cls._from_file(preset, **overrides)
        table = presets if presets is not None else load_model_presets()
        if preset not in table:
            raise ConfigError(f"unknown model preset {preset!r}; available: {', '.join(sorted(table))}")
        return cls.from_dict({**table[preset], **overrides}, name=preset)

    @classmethod
    def _from_file(cls, spec: str, **overrides: Any) -> "ModelConfig":
        named = re.fullmatch(r"(.*\.ya?ml):([^/:]+)", spec)
        path, name = named.groups() if named else (spec, "")
        try:
            data = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"cannot read the model preset file {path}: {exc}") from exc
        if not isinstance(data, Mapping):
            raise ConfigError(f"model preset file {path} must hold a mapping (one model's settings, or presets)")
        if "model" in data and not name:   # one model's settings
            return cls.from_dict({**data, **overrides}, name=Path(path).stem)
        if not name:
            if len(data) != 1:
                raise ConfigError(f"model preset file {path} holds {len(data)} presets ({', '.join(map(str, data))}); "
                                  f"name one: {path}:NAME")
            name = str(next(iter(data)))
        return cls.from_preset(name, presets=load_model_presets(data), **overrides)

    def replace(self, **changes: Any) -> "ModelConfig":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready settings (for the run record); holds no secret, only the key's variable name."""
        return dataclasses.asdict(self)

    # -- use ---------------------------------------------------------------------------
    def api_key(self) -> str:
        """The API key from the environment variable named by ``api_key_env``."""
        if self.api_key_env is None:
            return NO_API_KEY
        value = os.environ.get(self.api_key_env)
        if value:
            return value
        if self.api_key_required:
            raise ConfigError(f"model {self.name or self.model}: set the environment variable "
                              f"{self.api_key_env} to your API key (keys are never read from files)")
        return NO_API_KEY

    def request_params(self) -> dict[str, Any]:
        """The settings sent with every request (``None`` ones left out)."""
        params: dict[str, Any] = {}
        for name in ("temperature", "top_p", "max_tokens", "reasoning_effort", "seed"):
            value = getattr(self, name)
            if value is not None:
                params[name] = value
        if self.extra_body:
            params["extra_body"] = copy.deepcopy(self.extra_body)
        return params


def _is_preset_file(preset: str) -> bool:
    """A preset named as a YAML file (``FILE.yaml`` or ``FILE.yaml:NAME``), not a shipped preset's name."""
    return isinstance(preset, str) and re.fullmatch(r".*\.ya?ml(:[^/:]+)?", preset) is not None
