"""Why an LLM call or a kernel failed, in the words the banner, the report and ``index.md`` use.

LLM calls fail for three different reasons that ask for different fixes:

* **LLM transport**: no answer after the transient retries ran out (timeouts, refused connections,
  HTTP 429/5xx, malformed bodies) -- retry later; a resume redraws them;
* **model error**: the server refused the request (HTTP 4xx: an unknown model name, a request it
  cannot take, a bad key) -- fix the model settings;
* **unusable answer**: the model answered, but never with a plan or a kernel that could be used --
  that is the model's result, counted, not retried forever.

Kernels fail by their evaluation status: **build failed** (did not load, trace or compile),
**rejected** (refused by the static check), **incorrect** (wrong values), and the rest
(:data:`KERNEL_CAUSES`). A wrong kernel is the search working, never an LLM failure.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

TRANSPORT, MODEL_ERROR, UNUSABLE, BUDGET = "LLM transport", "model error", "unusable answer", "spending cap"
LLM_CAUSES = (TRANSPORT, MODEL_ERROR, UNUSABLE, BUDGET)
# Failure kinds (llm.retry.classify_failure) that mean "the server refused", not "no answer".
_REFUSALS = ("auth", "not_found")
_TRANSIENT_HTTP = ("http_408", "http_409")

KERNEL_CAUSES = {"build_failed": "kernel build failed", "rejected": "kernel rejected", "incorrect": "kernel incorrect",
                 "cheat": "kernel failed an adversarial input", "crashed": "kernel crashed",
                 "timeout": "kernel timed out", "out_of_memory": "kernel out of memory"}


def llm_cause(status: str, failure_kinds: Iterable[str] = ()) -> str | None:
    """The cause of a call that did not give a usable answer (None for an ``ok`` call).

    ``failure_kinds``: the kind of each failed HTTP attempt (``Completion.transport_failures``)."""
    if status == "ok":
        return None
    if status == "unusable":
        return UNUSABLE
    if status == "budget_exceeded":
        return BUDGET
    kinds = [k for k in failure_kinds if not str(k).startswith("unusable_output")]
    last = str(kinds[-1]) if kinds else ""
    if last in _REFUSALS or (last.startswith("http_4") and last not in _TRANSIENT_HTTP):
        return MODEL_ERROR
    return TRANSPORT


def message_cause(message: str | None) -> str:
    """The cause of a failed call known only by its error message (``llm.retry`` wording): an HTTP 4xx
    refusal is a model error, anything else that got no answer is transport."""
    import re

    m = re.match(r"HTTP (\d{3})", message or "")
    return MODEL_ERROR if m and m.group(1).startswith("4") and m.group(1) not in ("408", "409", "429") else TRANSPORT


def kernel_cause(status: str | None) -> str | None:
    """The cause of a kernel that is not correct (None for a correct or not yet evaluated one)."""
    return KERNEL_CAUSES.get(str(status)) if status else None


@dataclass
class Failures:
    """Failed LLM calls by cause, calls never made, and failed kernels by cause, with the first reason of each."""

    llm: Counter = field(default_factory=Counter)
    missing: int = 0
    kernels: Counter = field(default_factory=Counter)
    first: dict[str, str] = field(default_factory=dict)

    def add_call(self, cause: str | None, reason: str | None = None) -> None:
        if cause is not None:
            self.llm[cause] += 1
            if reason:
                self.first.setdefault(cause, reason)

    def add_kernel(self, status: str | None, reason: str | None = None) -> None:
        cause = kernel_cause(status)
        if cause is not None:
            self.kernels[cause] += 1
            if reason:
                self.first.setdefault(cause, reason)

    @property
    def lost_calls(self) -> int:
        """Calls whose answer the run lacks through no fault of the model's answer: a resume redraws them."""
        return self.llm[TRANSPORT] + self.llm[MODEL_ERROR] + self.llm[BUDGET] + self.missing

    @property
    def incomplete(self) -> bool:
        return self.lost_calls > 0

    def llm_text(self) -> str:
        parts = [f"{self.llm[c]} {c}" for c in LLM_CAUSES if self.llm[c]]
        parts += [f"{self.missing} not made"] if self.missing else []
        return ", ".join(parts)

    def kernel_text(self) -> str:
        return ", ".join(f"{n} {c}" for c, n in self.kernels.most_common())

    def text(self) -> str:
        """One line: LLM calls by cause, then kernels by cause (empty when nothing failed)."""
        parts = []
        if self.llm or self.missing:
            parts.append(f"LLM calls: {self.llm_text()}")
        if self.kernels:
            parts.append(f"kernels: {self.kernel_text()}")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {"llm": dict(self.llm), "missing": self.missing, "kernels": dict(self.kernels), "first": dict(self.first)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Failures":
        return cls(Counter(d.get("llm") or {}), int(d.get("missing") or 0), Counter(d.get("kernels") or {}),
                   dict(d.get("first") or {}))


def step_failures(stats: Iterable[Any], kernels_of: Any = None) -> Failures:
    """The failures of the steps a command ran (``Session.step_stats`` entries).

    LLM steps count their calls: unusable answers, and the other failed calls split into model errors
    and transport by their messages. An ``evaluate`` step counts kernels by status (``kernels_of(iteration)``
    gives the iteration's kernels): a wrong kernel is never an LLM failure."""
    from accelopt_nb.search.steps import ROLE_OF_PHASE   # the phases whose calls go to an agent

    out = Failures()
    for st in stats:
        out.missing += int(st.missing or 0)
        if st.phase == "evaluate":
            if kernels_of is not None:
                for k in kernels_of(st.iteration):
                    out.add_kernel(k.status, k.message)
            continue
        if st.phase not in ROLE_OF_PHASE:
            continue
        for _ in range(int(st.unusable or 0)):
            out.add_call(UNUSABLE, st.first_error)
        other = int(st.failed or 0) - int(st.unusable or 0)
        messages = [e for e in (st.errors or []) if e and "unusable" not in e] or [st.first_error]
        refused = [e for e in messages if message_cause(e) == MODEL_ERROR]
        n_model = other if refused and len(refused) == len(messages) else min(len(refused), other)
        for _ in range(n_model):
            out.add_call(MODEL_ERROR, refused[0])
        for _ in range(other - n_model):
            out.add_call(TRANSPORT, next((e for e in messages if message_cause(e) == TRANSPORT), st.first_error))
    return out


def run_failures(store: Any, run_id: str) -> Failures:
    """A stored run's failures: every LLM call by cause (the ledger), calls its open steps never made,
    and its kernels by evaluation status."""
    out = Failures()
    for c in store.rows("llm_calls", run_id):
        out.add_call(llm_cause(c["status"], c.get("failures") or []), c.get("error"))
    for step in store.rows("steps", run_id):
        if step.get("status") != "done":
            stats = (step.get("info") or {}).get("stats") or {}
            out.missing += int(stats.get("missing") or 0)
    evals = store.evaluations_df(run_id)
    if len(evals):
        latest = evals.sort_values("attempt").groupby("kernel_id").tail(1)
        for r in latest.itertuples():
            out.add_kernel(r.status, None)
    return out


__all__ = ["BUDGET", "Failures", "KERNEL_CAUSES", "LLM_CAUSES", "MODEL_ERROR", "TRANSPORT", "UNUSABLE", "kernel_cause",
           "llm_cause", "run_failures"]
