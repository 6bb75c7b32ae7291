"""Search configuration: the paper's knobs, validated, loadable from a YAML preset.

Notation of the paper: T iterations, beam width B, N plans per beam kernel, K executor
samples per plan, TopK new memory items per iteration, ExpN memory capacity.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accelopt_nb.errors import ConfigError
from accelopt_nb.presets import load_preset

STRATEGIES = ("beam", "repeated")


@dataclass
class MemoryConfig:
    enabled: bool = True
    top_k: int = 8
    capacity: int = 16
    positive_threshold: float = 1.04
    negative_threshold: float = 1.15
    shared: bool = False


@dataclass
class PlannerConfig:
    show_peak: bool = False       # tell the planner the kernel's % of peak and bound (paper's future work)
    show_hints: bool = False      # show the profiler's bottleneck notes (beyond the paper)
    profile_fields: str = "paper"  # paper | extended | all (see accelopt_nb.agents.prompts.profile_fields)
    profile_order: str = "fixed"  # fixed | shuffled


@dataclass
class EvalConfig:
    shape_preset: str = "paper"
    backend: str = "simulator"
    hw: str = "trn1"


@dataclass
class SearchConfig:
    """Everything that defines a search, stored with the run so it can be resumed or reproduced."""

    name: str = "custom"
    strategy: str = "beam"
    iterations: int = 16
    beam_width: int = 6
    plans_per_kernel: int = 12
    samples_per_plan: int = 2
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    planner: PlannerConfig = field(default_factory=PlannerConfig)
    evaluation: EvalConfig = field(default_factory=EvalConfig)
    seed: int = 0

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ConfigError(f"strategy must be one of {STRATEGIES}, got {self.strategy!r}")
        for name in ("iterations", "beam_width", "plans_per_kernel", "samples_per_plan"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"{name} must be an integer >= 1, got {v!r}")
        m = self.memory
        if m.top_k < 0 or m.capacity < 0:
            raise ConfigError(f"memory.top_k and memory.capacity must be >= 0 (got {m.top_k}, {m.capacity})")
        if m.positive_threshold < 1.0 or m.negative_threshold < 1.0:
            raise ConfigError("memory thresholds are speedup factors >= 1 "
                              f"(got {m.positive_threshold}, {m.negative_threshold})")
        if self.planner.profile_fields not in ("paper", "extended", "all"):
            raise ConfigError(f"planner.profile_fields must be paper, extended or all, got {self.planner.profile_fields!r}")
        if self.planner.profile_order not in ("fixed", "shuffled"):
            raise ConfigError(f"planner.profile_order must be 'fixed' or 'shuffled', got {self.planner.profile_order!r}")

    # -- construction ----------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "SearchConfig":
        data = dict(data)
        sections = {"memory": MemoryConfig, "planner": PlannerConfig, "evaluation": EvalConfig}
        kwargs: dict[str, Any] = {}
        top = {f.name for f in dataclasses.fields(cls)}
        for key, value in data.items():
            if key not in top:
                raise ConfigError(f"unknown search setting {key!r}; known: {sorted(top)}")
            if key in sections:
                if not isinstance(value, dict):
                    raise ConfigError(f"setting {key!r} must be a mapping")
                known = {f.name for f in dataclasses.fields(sections[key])}
                bad = set(value) - known
                if bad:
                    raise ConfigError(f"unknown {key} setting(s) {sorted(bad)}; known: {sorted(known)}")
                kwargs[key] = sections[key](**value)
            else:
                kwargs[key] = value
        return cls(**kwargs)

    @classmethod
    def from_preset(cls, preset: str | Path = "paper", **overrides: Any) -> "SearchConfig":
        """A preset with overrides; nested settings use dotted names: ``**{"memory.top_k": 4}``."""
        return cls.from_dict(load_preset(preset)).with_overrides(**overrides)

    def with_overrides(self, **overrides: Any) -> "SearchConfig":
        data = self.to_dict()
        for key, value in overrides.items():
            if value is None:
                continue
            if "." in key:
                section, sub = key.split(".", 1)
                if section not in data or not isinstance(data[section], dict):
                    raise ConfigError(f"unknown search setting section {section!r} in {key!r}")
                data[section][sub] = value
            else:
                data[key] = value
        return SearchConfig.from_dict(data)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    # -- derived ---------------------------------------------------------------------------
    @property
    def uses_memory(self) -> bool:
        # Repeated sampling is the no-memory ablation by definition.
        return self.strategy == "beam" and self.memory.enabled

    def plans_for(self, iteration: int, beam_size: int) -> int:
        """Planner calls per beam kernel in an iteration.

        Beam search asks N plans of each of its ``beam_size`` kernels. Repeated sampling keeps the
        same nominal budget from the baseline alone: N plans in iteration 0 (the beam holds only
        the baseline then, too) and B*N plans afterwards.
        """
        if self.strategy == "repeated":
            return self.plans_per_kernel * (1 if iteration == 0 else self.beam_width)
        return self.plans_per_kernel
