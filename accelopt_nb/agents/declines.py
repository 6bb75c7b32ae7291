"""Answers that are not answers: refusals and "nothing to do" replies.

A refusal must never become a plan (the executor would implement nothing) nor a lesson, and a
summarizer's "the kernels are identical" must never become a lesson. Models phrase both in many
ways ("I'm sorry, but…", "Unfortunately, I cannot…", "As an AI…", "The two kernels are
identical. No optimization found."), while real plans and lessons may open the same way
("Unfortunately, the kernel re-reads…", "I cannot see the compiled code, but… Plan: …"). So a
declining phrase only counts where the answer has no substance after it: no ``Plan:`` heading,
no code block, and little text. ``tests/data/answer_corpus.yaml`` holds the phrasings these
checks are held to, in both directions.
"""
from __future__ import annotations

import re

__all__ = ["OPENING_CHARS", "SUBSTANTIVE_CHARS", "is_no_plan", "is_refusal", "says_kernels_identical"]

# Where a declining phrase counts: the first two sentences, or this many characters.
OPENING_CHARS = 240
# An answer this long, or with a plan heading or a code block, has substance: it is not a refusal.
SUBSTANTIVE_CHARS = 600
# A "no optimization" reply is short; a longer answer argues for something.
SHORT_CHARS = 400

_APOS = "['\u2019]"
_I_CANT = (rf"I\s*(?:can{_APOS}?t|can\s*not|cannot|won{_APOS}?t|will\s+not|am\s+(?:not\s+able|unable)|"
           rf"{_APOS}m\s+(?:not\s+able|unable)|must\s+decline|have\s+to\s+decline|need\s+to\s+decline|"
           rf"(?:do\s+not|don{_APOS}t)\s+have\s+(?:enough|sufficient|the\s+ability|access))")
_TASK_VERBS = (r"(?:help|assist|comply|do\s+(?:that|this)|provide|fulfil+|complete|continue|proceed|answer|"
               r"generate|write|create|produce|perform|support|engage|optimi[sz]e|propose|suggest|analy[sz]e|"
               r"summari[sz]e|run|execute|access|see|view|info|information|context|details|with\s+(?:that|this))")
_I_AM = rf"\bI(?:{_APOS}m|\s+am)\s+"
_DECLINE = re.compile(
    "|".join([
        _I_AM + r"(?:so\s+|very\s+|really\s+)?sorry\b",  # I am sorry
        r"\A\W*sorry\b", r"\bI\s+(?:must\s+)?apologi[sz]e\b",
        r"\bas\s+an\s+ai\b", r"\bas\s+a\s+(?:large\s+)?language\s+model\b",
        _I_AM + r"(?:just\s+|only\s+)?an\s+ai\b",
        r"\b" + _I_CANT + r"\b[^.!?\n]{0,40}?\b" + _TASK_VERBS + r"\b",  # I cannot help / provide / optimize
        r"\bunfortunately,?\s+(?:I|we)\b",
    ]),
    re.IGNORECASE)
_NOTHING_TO_DO = re.compile(
    r"\balready\s+(?:(?:fully|highly|well|close\s+to|near(?:ly)?)\s+)?(?:optimal|optimi[sz]ed|at\s+(?:the\s+)?peak)"
    r"|\bno\s+(?:further\s+|more\s+|additional\s+|other\s+|meaningful\s+|significant\s+)?optimi[sz]ations?\b"
    r"|\bcannot\s+be\s+(?:further\s+)?(?:optimi[sz]ed|improved|made\s+faster)(?:\s+further)?"
    r"|\bnot\s+possible\s+to\s+(?:further\s+)?(?:optimi[sz]e|improve|speed\s+up)"
    r"|\bnothing\s+(?:left\s+|more\s+)?to\s+(?:optimi[sz]e|improve)"
    r"|\bthere\s+is\s+no\s+(?:further\s+|more\s+)?(?:room|headroom|opportunit)",
    re.IGNORECASE)
# Words that make a short answer a suggestion after all ("already optimal for DMA, but fuse …").
_SUGGESTS = re.compile(r"\b(?:however|but|instead|could|should|try|consider|merge|fuse|hoist|tile|retile|"
                       r"reorder|swap|move|replace|split|unroll|reuse|combine|increase|decrease|reduce|"
                       r"eliminate|avoid)\b", re.IGNORECASE)
# "Plan:" opening a line or a sentence, or a line that is only a "Plan" heading.
_PLAN_HEADING = re.compile(r"^\W*(?:optimi[sz]ation\s+)?plan\W*:?\W*$"
                           r"|(?:^|[.!?]\s+)\W*(?:optimi[sz]ation\s+)?plan\s*:", re.IGNORECASE | re.MULTILINE)
_FENCE = re.compile(r"^[ \t]*(?:`{3,}|~{3,})", re.MULTILINE)
_SENTENCE_END = re.compile(r"[.!?](?:\s|$)|\n\s*\n")
_IDENTICAL = re.compile(
    r"\b(?:kernels?|they|both|two|codes?|versions?|programs?|implementations?)\b[^.!?\n]{0,40}?"
    r"\b(?:are|is|look|seem|appear)\s+(?:to\s+be\s+)?(?:functionally\s+|essentially\s+|exactly\s+|completely\s+|"
    r"virtually\s+|effectively\s+|literally\s+|byte[- ]for[- ]byte\s+)?(?:identical|the\s+same|equivalent)\b"
    r"|\bno\s+(?:meaningful\s+|significant\s+|functional\s+|substantive\s+|material\s+|real\s+|relevant\s+|"
    r"performance[- ]relevant\s+|visible\s+|code\s+)?(?:differences?|changes?)\b"
    r"|\bnothing\s+(?:has\s+|was\s+)?changed\b"
    r"|\bno\s+optimi[sz]ation\s+(?:was\s+)?found\b",
    re.IGNORECASE)
_EXCEPT = re.compile(r"\b(?:except|apart\s+from|other\s+than|besides|aside\s+from|but|save\s+for)\b", re.IGNORECASE)


def _opening(answer: str) -> str:
    """The first two sentences of an answer (at most OPENING_CHARS characters)."""
    text = answer.strip().lstrip("#*_>`'\" \t")
    ends = [m.end() for m in _SENTENCE_END.finditer(text)]
    cut = ends[1] if len(ends) > 1 else len(text)
    return text[:min(cut, OPENING_CHARS)]


def _substantive(answer: str) -> bool:
    return (len(answer.strip()) >= SUBSTANTIVE_CHARS or bool(_PLAN_HEADING.search(answer))
            or bool(_FENCE.search(answer)))


def is_refusal(answer: str) -> bool:
    """Whether an answer declines the task ("I'm sorry, but…", "Unfortunately, I cannot…",
    "As an AI…") and carries no plan, code or substantial text after declining."""
    return bool(_DECLINE.search(_opening(answer))) and not _substantive(answer)


def is_no_plan(answer: str) -> bool:
    """Whether a planner answer says there is nothing to optimize ("The kernel is already
    optimal; no further optimization is possible.") instead of proposing a step."""
    text = answer.strip()
    return (len(text) < SHORT_CHARS and not _substantive(text) and bool(_NOTHING_TO_DO.search(text))
            and not _SUGGESTS.search(text))


def says_kernels_identical(answer: str) -> bool:
    """Whether a summarizer answer says the two kernels do not differ ("The two kernels are
    identical. No optimization found.") rather than describing a rewrite.

    A lesson that names its change ("identical except for the loop order") or shows snippets
    is a lesson."""
    text = answer.strip()
    if _FENCE.search(text) or len(text) >= SHORT_CHARS:
        return False
    for sentence in re.split(r"(?<=[.!?])\s+|\n+", text):
        if _IDENTICAL.search(sentence) and not _EXCEPT.search(sentence):
            return True
    return False
