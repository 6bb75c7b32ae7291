"""The executor: implements one plan as a complete kernel module."""
from __future__ import annotations

from typing import Mapping

from accelopt_nb.agents.extract import ExtractedCode, extract_code
from accelopt_nb.agents.prompts import PromptSet
from accelopt_nb.errors import UnusableOutputError
from nkibench.problem import DEFAULT_TOLERANCE

ROLE = "executor"


def parse_kernel(text: str) -> ExtractedCode:
    """Extract the kernel from an executor answer; raises UnusableOutputError when there is none.

    The client then re-asks the model (bounded, counted in the ledger) and keeps the rejected
    raw text, so nothing the model said is lost.
    """
    got = extract_code(text)
    if not got.ok:
        raise UnusableOutputError(got.error or "no kernel in the response")
    return got


class KernelAuthor:
    """What the agents that write a whole kernel (executor, fixer) are told about the task, and how their
    answers are read."""

    def __init__(self, prompts: PromptSet | None = None, *, hw: str = "trn1", dtypes: str = "float32",
                 tolerance: float = DEFAULT_TOLERANCE, n_seeds: int = 5, adversarial: bool = False,
                 prompt_set: str = "extended") -> None:
        self.prompts = prompts or PromptSet()
        self.hw = hw
        self.dtypes = dtypes
        self.tolerance = tolerance
        self.n_seeds = n_seeds
        self.adversarial = adversarial  # mention the adversarial-input check (off: it is the judge's business)
        self.prompt_set = prompt_set

    @staticmethod
    def validate(text: str) -> ExtractedCode:
        return parse_kernel(text)


class Executor(KernelAuthor):
    """Builds executor prompts and turns answers into kernel sources."""

    role = ROLE

    def messages(self, *, problem_name: str, reference_source: str, kernel_source: str,
                 plan: str) -> list[Mapping[str, str]]:
        system, user = self.prompts.executor(problem_name=problem_name, reference_source=reference_source,
                                             kernel_source=kernel_source, plan=plan, tolerance=self.tolerance,
                                             hw=self.hw, dtypes=self.dtypes, n_seeds=self.n_seeds,
                                             adversarial=self.adversarial, prompt_set=self.prompt_set)
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]
