"""What the parts of an iteration read from the session: the contract of a stage.

The request builders (:mod:`.requests`), the search's evaluations (:mod:`.evaluations`), the
iteration stream's stages (:mod:`.stream`) and the summarizer's calls (:mod:`.lessons`) take a
:class:`SearchContext`; :class:`~accelopt_nb.search.session.Session` is one. A new stage needs
nothing else from the session, so it never imports it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from accelopt_nb.agents.executor import Executor
    from accelopt_nb.agents.planner import Planner
    from accelopt_nb.agents.summarizer import Summarizer
    from accelopt_nb.llm.client import LLMClient
    from accelopt_nb.search.beam import Candidate
    from accelopt_nb.search.config import SearchConfig
    from accelopt_nb.search.problem import SearchProblem
    from accelopt_nb.search.state import RunState
    from accelopt_nb.search.steps import StepBook

__all__ = ["SearchContext"]


class SearchContext(Protocol):
    """One search run as its stages see it."""

    config: "SearchConfig"            # may be swapped for a block (Session.overridden): read it when needed
    problem: "SearchProblem"
    state: "RunState"                 # kernels, plans, beam, memory, position; write-through to the store
    run_id: str
    planner: "Planner"
    executor: "Executor"
    summarizer: "Summarizer"
    reference_source: str             # the reference program as the agents see it
    book: "StepBook"                  # progress events, step statistics, closing steps
    evals: Any                        # this run's search.evaluations.Evaluations (which reads this context)

    @property
    def stop_requested(self) -> bool: ...

    def client(self, role: str) -> "LLMClient": ...

    def plan_sources(self) -> list[str]: ...

    def beam_choice(self) -> list["Candidate"]: ...
