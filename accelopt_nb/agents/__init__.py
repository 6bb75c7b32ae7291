"""The AccelOpt agents (planner, executor, summarizer, and the optional fixer), their prompts and
output parsing.

Agents build chat messages from the Jinja2 templates in ``prompts/`` and validate answers;
the LLM calls themselves go through :class:`accelopt_nb.llm.LLMClient`, driven by
:class:`accelopt_nb.search.Session`.
"""
from accelopt_nb.agents.executor import Executor, parse_kernel
from accelopt_nb.agents.extract import ExtractedCode, extract_code, split_reasoning
from accelopt_nb.agents.fixer import FIXABLE, Fixer, failure_report, is_fixable
from accelopt_nb.agents.planner import ParsedPlan, Planner, parse_plan
from accelopt_nb.agents.prompts import HW_FACTS, PROFILE_GLOSSARY, PeakInfo, PromptSet, format_profile
from accelopt_nb.agents.summarizer import NO_OPTIMIZATION, ParsedSummary, Summarizer, parse_summary

__all__ = ["Executor", "ExtractedCode", "FIXABLE", "Fixer", "HW_FACTS", "NO_OPTIMIZATION", "PROFILE_GLOSSARY",
           "ParsedPlan", "ParsedSummary", "PeakInfo", "Planner", "PromptSet", "Summarizer", "extract_code",
           "failure_report", "format_profile", "is_fixable", "parse_kernel", "parse_plan", "parse_summary",
           "split_reasoning"]
