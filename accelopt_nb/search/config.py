"""Search configuration: the paper's knobs, validated, loadable from a YAML preset.

Notation of the paper: T iterations, beam width B, N plans per beam kernel, K executor
samples per plan, TopK new memory items per iteration, ExpN memory capacity.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accelopt_nb.agents.prompts import PROMPT_SETS
from accelopt_nb.errors import ConfigError
from accelopt_nb.presets import load_preset

STRATEGIES = ("beam", "repeated")
SEED_MODES = ("per_call", "per_sample", "none")
# How a search evaluates its candidates (not the per-job levels of evaluation.job.FIDELITIES): full: every
# candidate at fidelity "full"; multi: every candidate at "screen", the ones it keeps at "confirm".
SEARCH_FIDELITIES = ("full", "multi")


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
    fidelity: str = "full"        # full: every candidate fully evaluated | multi: screen all, confirm the best
    # a kernel whose program (sim.program_fingerprint: every NKI call with exact operands) equals an evaluated
    # kernel's inherits that verdict (screen or full check), recorded as inherited from that kernel
    share_programs: bool = True


@dataclass
class SamplingConfig:
    # per_call: a seeded model (``seed`` in its config) gets a seed of its own for every call, derived from the
    # model's seed, the run's seed and the call's slot (iteration, beam slot, plan, sample), so no two calls of
    # a run, of an iteration or of two runs with other seeds repeat one another | per_sample (runs before
    # per_call): the model's seed + sample index, the same in every iteration | none: no seed sent
    seed_mode: str = "per_call"
    unusable_retries: int | None = None  # re-asks after an unusable answer (None: the model config's)


@dataclass
class PromptConfig:
    set: str = "extended"          # paper: API facts, glossary, memory | extended: plus optimization advice
    show_adversarial: bool = False  # tell the executor that adversarial inputs exist (the judge's business)


@dataclass
class FixerConfig:
    attempts: int = 0              # F: repairs of a candidate that failed with a kernel error or wrong numbers (0: off)


@dataclass
class RuntimeConfig:
    """How fast a run goes, not what it computes (a resumed run may change these)."""

    llm_concurrency: int = 16      # LLM requests in flight
    eval_workers: int = 0          # parallel evaluations (0: one per core)
    pipeline: bool = True          # evaluate each kernel as soon as it arrives, while other calls run
    # Fraction of a step's LLM calls that may get no answer from the endpoint (within the model's retry
    # window) and the step still count as done; above it the step stays open and a resume redraws them.
    transport_failures_allowed: float = 0.0


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
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    prompts: PromptConfig = field(default_factory=PromptConfig)
    fixer: FixerConfig = field(default_factory=FixerConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
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
        _choice("evaluation.fidelity", self.evaluation.fidelity, SEARCH_FIDELITIES)
        if not isinstance(self.evaluation.share_programs, bool):
            raise ConfigError(f"evaluation.share_programs must be true or false, got {self.evaluation.share_programs!r}")
        _choice("sampling.seed_mode", self.sampling.seed_mode, SEED_MODES)
        _choice("prompts.set", self.prompts.set, PROMPT_SETS)
        r = self.sampling.unusable_retries
        if r is not None and (not isinstance(r, int) or isinstance(r, bool) or r < 0):
            raise ConfigError(f"sampling.unusable_retries must be an integer >= 0 or null, got {r!r}")
        f = self.fixer.attempts
        if not isinstance(f, int) or isinstance(f, bool) or f < 0:
            raise ConfigError(f"fixer.attempts must be an integer >= 0 (0: no fixer), got {f!r}")
        rt = self.runtime
        if not isinstance(rt.llm_concurrency, int) or rt.llm_concurrency < 1:
            raise ConfigError(f"runtime.llm_concurrency must be an integer >= 1, got {rt.llm_concurrency!r}")
        if not isinstance(rt.eval_workers, int) or rt.eval_workers < 0:
            raise ConfigError(f"runtime.eval_workers must be an integer >= 0 (0: one per core), got {rt.eval_workers!r}")
        allowed = rt.transport_failures_allowed
        if isinstance(allowed, bool) or not isinstance(allowed, (int, float)) or not 0.0 <= allowed <= 1.0:
            raise ConfigError(f"runtime.transport_failures_allowed is a fraction of a step's calls in [0, 1], "
                              f"got {allowed!r}")

    # -- construction ----------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "SearchConfig":
        data = dict(data)
        sections = {"memory": MemoryConfig, "planner": PlannerConfig, "evaluation": EvalConfig,
                    "sampling": SamplingConfig, "prompts": PromptConfig, "fixer": FixerConfig,
                    "runtime": RuntimeConfig}
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

    def summarizes(self, iteration: int) -> bool:
        """Whether the summarizer is asked in ``iteration``: not in the last of the T iterations,
        whose lessons no planner would read."""
        return self.uses_memory and iteration + 1 < self.iterations

    def plans_for(self, iteration: int, beam_size: int) -> int:
        """Planner calls per beam kernel in an iteration.

        Beam search asks N plans of each of its ``beam_size`` kernels. Repeated sampling keeps the
        same nominal budget from the baseline alone: N plans in iteration 0 (the beam holds only
        the baseline then, too) and B*N plans afterwards.
        """
        if self.strategy == "repeated":
            return self.plans_per_kernel * (1 if iteration == 0 else self.beam_width)
        return self.plans_per_kernel


def _choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
