"""``%%accelopt step``: one step's settings written in the cell as YAML, so the notebook records them.

::

    %%accelopt step
    phase: plan            # plan | execute | evaluate | select | summarize; omitted: rest of the iteration
    N: 2                   # plans per beam kernel (B: beam width, K: executor samples per plan)
    temperature: 0.7       # or model_preset: NAME — the model for this step's calls
    plans:                 # your plans instead of the planner's (kernels: {plan_id: source} for the executor,
      - Keep B resident in SBUF.   lessons: [{title, summary}] for the summarizer)

Settings hold for this step only; the session's own configuration is restored afterwards.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field, fields
from typing import Any, Iterator

from accelopt_nb.errors import ConfigError

_CONFIG_KEYS = {"B": "beam_width", "N": "plans_per_kernel", "K": "samples_per_plan"}


@dataclass
class StepSettings:
    phase: str | None = None
    B: int | None = None
    N: int | None = None
    K: int | None = None
    model_preset: str | None = None
    temperature: float | None = None
    plans: list[str] = field(default_factory=list)
    kernels: dict[str, str] = field(default_factory=dict)
    lessons: list[dict[str, str]] = field(default_factory=list)
    llm: bool = True

    @classmethod
    def from_yaml(cls, text: str) -> "StepSettings":
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" (cell line {mark.line + 1})" if mark is not None else ""
            raise ConfigError(f"%%accelopt step: the cell is not valid YAML{where}: "
                              f"{getattr(exc, 'problem', exc)}") from None
        if data is None:
            return cls()
        if not isinstance(data, dict):
            raise ConfigError("%%accelopt step: the cell must be a YAML mapping (key: value lines)")
        known = {f.name for f in fields(cls)} | {"plan", "lesson"}
        unknown = set(data) - known
        if unknown:
            raise ConfigError(f"%%accelopt step: unknown setting(s) {sorted(unknown)}; known: {sorted(known)}")
        if "plan" in data:  # one plan, written as a scalar
            data["plans"] = list(data.get("plans") or []) + [data.pop("plan")]
        if "lesson" in data:
            data["lessons"] = list(data.get("lessons") or []) + [data.pop("lesson")]
        s = cls(**data)
        s.validate()
        return s

    def validate(self) -> None:
        from accelopt_nb.search.state import PHASES
        if self.phase is not None and self.phase not in PHASES:
            raise ConfigError(f"%%accelopt step: phase {self.phase!r} is not one of {', '.join(PHASES)}")
        for key in ("B", "N", "K"):
            v = getattr(self, key)
            if v is not None and (not isinstance(v, int) or v < 1):
                raise ConfigError(f"%%accelopt step: {key} must be a positive integer, got {v!r}")
        if not all(isinstance(p, str) and p.strip() for p in self.plans):
            raise ConfigError("%%accelopt step: plans must be a list of non-empty texts")
        if not isinstance(self.kernels, dict):
            raise ConfigError("%%accelopt step: kernels must map plan ids to kernel sources")
        for item in self.lessons:
            if isinstance(item, str):
                continue
            if not isinstance(item, dict) or "summary" not in item:
                raise ConfigError("%%accelopt step: each lesson is a text or {title, summary}")
        wants = {"plans": "plan", "kernels": "execute", "lessons": "summarize"}
        for key, phase in wants.items():
            if getattr(self, key) and self.phase not in (None, phase):
                raise ConfigError(f"%%accelopt step: {key} belong to the {phase} phase, not {self.phase}")


@contextlib.contextmanager
def _applied(session: Any, s: StepSettings) -> Iterator[None]:
    """The session with this step's settings; the original config and clients come back afterwards."""
    overrides = {_CONFIG_KEYS[k]: getattr(s, k) for k in _CONFIG_KEYS if getattr(s, k) is not None}
    config = session.config.with_overrides(**overrides) if overrides else None
    step_clients = ({role: _client_for_step(c, s) for role, c in session.clients.items()}
                    if s.model_preset is not None or s.temperature is not None else None)
    try:
        with session.overridden(config=config, clients=step_clients):
            yield
    finally:
        for c in (step_clients or {}).values():
            c.close()


def _client_for_step(client: Any, s: StepSettings) -> Any:
    from accelopt_nb.llm import LLMClient, ModelConfig

    model = ModelConfig.from_preset(s.model_preset) if s.model_preset else client.config
    if s.temperature is not None:
        model = model.replace(temperature=s.temperature)
    return LLMClient(model, client.ledger, client.cassette, concurrency=client.concurrency)


def run_step(session: Any, s: StepSettings) -> Any:
    """Run the phase (or the rest of the iteration) the settings name; returns what the phase returns."""
    with _applied(session, s):
        if s.phase is None:
            if s.plans or s.kernels or s.lessons:
                raise ConfigError("%%accelopt step: give a phase with plans, kernels or lessons")
            return session.step()
        if s.phase == "plan":
            return session.plan(manual=s.plans or None)
        if s.phase == "execute":
            return session.execute(manual=s.kernels or None, llm=s.llm)
        if s.phase == "summarize":
            lessons = [{"title": "", "summary": x} if isinstance(x, str) else x for x in s.lessons]
            return session.summarize(manual=lessons or None)
        return getattr(session, s.phase)()
