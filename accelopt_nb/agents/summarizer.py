"""The summarizer: turns a measured slow→fast kernel pair into a reusable one-step rewrite."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

from accelopt_nb.agents.extract import first_bold, split_reasoning
from accelopt_nb.agents.declines import is_refusal, says_kernels_identical
from accelopt_nb.agents.prompts import PromptSet
from accelopt_nb.errors import UnusableOutputError

ROLE = "summarizer"
NO_OPTIMIZATION = "No optimization found"


_NOT_FOUND = re.compile(r"\A[\s*_#>`\"']*no\s+optimi[sz]ation\s+found", re.IGNORECASE)


@dataclass(frozen=True)
class ParsedSummary:
    """A summarizer answer. ``found`` is False when the model saw no meaningful difference."""

    found: bool
    title: str
    summary: str
    reasoning: str = ""


def parse_summary(text: str) -> ParsedSummary:
    """Read the title (first ``**…**``) and the body; the model's own words, trimmed.

    Unlike the authors' code this needs no reasoning-summary item, so models that do not emit
    one still produce memory.
    """
    reasoning, answer = split_reasoning(text or "")
    answer = answer.strip()
    if not answer:
        raise UnusableOutputError("empty summarizer answer")
    # "No optimization found" in any case with any suffix, or "The two kernels are identical."
    if _NOT_FOUND.match(answer) or says_kernels_identical(answer):
        return ParsedSummary(found=False, title=NO_OPTIMIZATION, summary=answer, reasoning=reasoning)
    if is_refusal(answer):
        raise UnusableOutputError(f"the summarizer refused: {answer[:120]!r}")
    title = first_bold(answer)
    if title is None:
        first_line = answer.splitlines()[0].strip(" #*")
        title = first_line[:120] or "Rewrite"
    return ParsedSummary(found=True, title=title, summary=answer, reasoning=reasoning)


class Summarizer:
    """Builds summarizer prompts (with the measured speedup filled in) and parses answers."""

    role = ROLE

    def __init__(self, prompts: PromptSet | None = None, *, hw: str = "trn1",
                 measured_on: str | None = None, prompt_set: str = "extended") -> None:
        self.prompts = prompts or PromptSet()
        self.hw = hw
        self.measured_on = measured_on or f"measured on {hw}"
        self.prompt_set = prompt_set

    def messages(self, *, slow_source: str, fast_source: str, speedup: float, slow_ms: float,
                 fast_ms: float) -> list[Mapping[str, str]]:
        system, user = self.prompts.summarizer(slow_source=slow_source, fast_source=fast_source, speedup=speedup,
                                               slow_ms=slow_ms, fast_ms=fast_ms, hw=self.hw,
                                               measured_on=self.measured_on, prompt_set=self.prompt_set)
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    @staticmethod
    def validate(text: str) -> ParsedSummary:
        return parse_summary(text)
