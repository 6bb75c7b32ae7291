"""The planner: reads a kernel and its profile and proposes one optimization step."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from accelopt_nb.agents.declines import is_no_plan, is_refusal
from accelopt_nb.agents.extract import split_reasoning
from accelopt_nb.agents.prompts import PeakInfo, PromptSet
from accelopt_nb.errors import UnusableOutputError

ROLE = "planner"
MIN_PLAN_CHARS = 20  # shorter answers are refusals or truncations, not plans

_PLAN_HEADING = re.compile(r"^\W*plan\W*:?\W*$|^\W*plan\s*:", re.IGNORECASE | re.MULTILINE)


@dataclass(frozen=True)
class ParsedPlan:
    """A planner answer: the full text (handed to the executor) and the step it proposes."""

    text: str
    step: str  # the part under "Plan:", or the whole answer if the heading is missing
    reasoning: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)


def parse_plan(text: str) -> ParsedPlan:
    """Validate and split a planner answer; raises UnusableOutputError if there is no plan."""
    reasoning, answer = split_reasoning(text or "")
    if is_refusal(answer):
        raise UnusableOutputError(f"the planner refused: {answer.strip()[:120]!r}")
    if is_no_plan(answer):
        raise UnusableOutputError(f"the planner proposed no step: {answer.strip()[:120]!r}")
    if len(answer.strip()) < MIN_PLAN_CHARS:
        raise UnusableOutputError(f"planner answer too short to be a plan ({len(answer.strip())} characters)")
    m = _PLAN_HEADING.search(answer)
    if m:
        step = answer[m.end():].strip() or answer
        notes: tuple[str, ...] = ()
    else:
        step, notes = answer, ("no 'Plan:' heading; the whole answer is the plan",)
    return ParsedPlan(text=answer, step=step, reasoning=reasoning, notes=notes)


class Planner:
    """Builds planner prompts and turns answers into plans."""

    role = ROLE

    def __init__(self, prompts: PromptSet | None = None, *, hw: str = "trn1", dtypes: str = "float32",
                 fields: str = "paper", prompt_set: str = "extended") -> None:
        self.prompts = prompts or PromptSet()
        self.hw = hw
        self.dtypes = dtypes
        self.fields = fields  # which profile fields the glossary explains (see prompts.profile_fields)
        self.prompt_set = prompt_set

    def messages(self, *, problem_name: str, reference_source: str, kernel_source: str,
                 profile_lines: Sequence[str], memory_items: Iterable[Any] = (),
                 peak: PeakInfo | None = None, hints: Sequence[str] = ()) -> list[Mapping[str, str]]:
        system, user = self.prompts.planner(problem_name=problem_name, reference_source=reference_source,
                                            kernel_source=kernel_source, profile_lines=profile_lines,
                                            memory_items=memory_items, hw=self.hw, dtypes=self.dtypes, peak=peak,
                                            hints=hints, fields=self.fields, prompt_set=self.prompt_set)
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    @staticmethod
    def validate(text: str) -> ParsedPlan:
        return parse_plan(text)
