"""The AccelOpt search: beam search, repeated sampling, optimization memory, and the step API.

::

    from accelopt_nb.search import Session, SearchConfig
    s = Session.create("silu", run_dir="runs/silu", config=SearchConfig.from_preset("smoke"), llm=client)
    s.plan(); s.execute(); s.evaluate(); s.select(); s.summarize()   # one iteration, by hand
    report = s.run(4)                                                # or let it run
"""
from accelopt_nb.search.beam import Candidate, select_beam, source_hash
from accelopt_nb.search.config import EvalConfig, MemoryConfig, PlannerConfig, SearchConfig
from accelopt_nb.search.memory import (MemoryItem, OptimizationMemory, RewritePair, RewriteRecord,
                                        select_rewrites)
from accelopt_nb.search.problem import SearchProblem
from accelopt_nb.search.events import ProgressEvent, StepStats
from accelopt_nb.search.report import RunReport, build_report
from accelopt_nb.search.session import Session
from accelopt_nb.search.state import PHASES, KernelView, PlanView, RunState, new_run_id

__all__ = ["Candidate", "EvalConfig", "KernelView", "MemoryConfig", "MemoryItem", "OptimizationMemory", "PHASES",
           "PlanView", "PlannerConfig", "ProgressEvent", "RewritePair", "RewriteRecord", "RunReport", "RunState",
           "SearchConfig", "SearchProblem", "Session", "StepStats", "build_report", "new_run_id", "select_beam",
           "select_rewrites", "source_hash"]
