"""The fixer: repairs a candidate kernel that failed its evaluation, from the evaluation's report.

Upstream AccelOpt added a fixer to its GPU variant: a proposal that does not compile or check is
handed back to a model with its error log before it is discarded. Ours reads what our evaluation
already says about a failed kernel: the kernel error's file, line, API and rule, or, for a kernel
that ran and computed wrong numbers, the relative error of each output against the tolerance.
A repair is an ordinary candidate (same extraction, evaluation, ledger and cassette).

Only failures that the kernel's source explains are worth a repair (:data:`FIXABLE`): not a
timeout or an out-of-memory kill, which depend on the machine, and not a kernel that passes every
random input but fails an adversarial one: how the judge builds those inputs is not shown to
any agent.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from accelopt_nb.agents.executor import KernelAuthor

__all__ = ["FIXABLE", "Fixer", "failure_report", "is_fixable"]

ROLE = "fixer"
# Evaluation statuses a repair can address (accelopt_nb.evaluation.Status values).
FIXABLE = frozenset({"build_failed", "rejected", "crashed", "incorrect"})
_REPORT_LINES = 40  # at most this many lines of checks and log in one report


def _get(result: Any, name: str, default: Any = None) -> Any:
    if isinstance(result, Mapping):
        return result.get(name, default)
    return getattr(result, name, default)


def _status(result: Any) -> str:
    status = _get(result, "status")
    return str(getattr(status, "value", status))


def is_fixable(result: Any) -> bool:
    """Whether an evaluation result (an ``EvalResult`` or its dict) is a failure a repair can address."""
    return _status(result) in FIXABLE


def failure_report(result: Any, source: str) -> str:
    """What the fixer is told about a failed evaluation: the verdict, the kernel error with its
    location, API and rule and the offending source line, and for wrong numbers the relative
    error of each output on each random input set against the tolerance. Adversarial-input
    checks are never shown (see the module docstring)."""
    status = _status(result)
    lines = [f"Verdict: {status.replace('_', ' ')}: {_get(result, 'message') or 'no message'}"]
    error = _get(result, "error") or {}
    if error:
        where = Path(str(error["file"])).name if error.get("file") else "the kernel"
        line = error.get("line")
        api = f" in `{error['api']}`" if error.get("api") else ""
        at = f" at line {line}" if line is not None else ""
        kind = error.get("type") or "error"
        lines.append(f"Error: {kind}{at} of {where}{api}: {error.get('message') or ''}".rstrip())
        if error.get("rule"):
            lines.append(f"Rule broken: {error['rule']}")
        text = _source_line(source, line) if _is_kernel_file(error.get("file")) else None
        if text is not None:
            lines.append(f"Line {line}: {text.strip()}")
    tolerance = _get(result, "tolerance")
    checks = [c for c in (_get(result, "checks") or []) if _get(c, "kind") == "seed"]
    if checks and (status == "incorrect" or not error):  # a build error's checks only repeat it
        if tolerance is not None:
            lines.append(f"Correctness: each output's relative L2 error must stay below {tolerance:g}.")
        for c in checks[:_REPORT_LINES]:
            errs = ", ".join("not computed" if x is None else f"{float(x):.3g}"
                             for x in (_get(c, "rel_errors") or []))
            mark = "passed" if _get(c, "passed") else "FAILED"
            reason = _get(c, "reason")
            tail = f" ({reason})" if reason and not _get(c, "passed") else ""
            lines.append(f"- random inputs (seed {_get(c, 'index')}): {mark}; relative L2 error per output: "
                         f"[{errs or 'none'}]{tail}")
    return "\n".join(lines)


def _is_kernel_file(file: Any) -> bool:
    """Whether an error's file is the kernel itself (not a library the kernel called)."""
    return file is None or "kernel" in Path(str(file)).stem


def _source_line(source: str, line: Any) -> str | None:
    if not isinstance(line, int) or line < 1:
        return None
    rows = source.splitlines()
    return rows[line - 1] if line <= len(rows) else None


class Fixer(KernelAuthor):
    """Builds fixer prompts and turns answers into repaired kernel sources."""

    role = ROLE

    def messages(self, *, problem_name: str, reference_source: str, kernel_source: str, report: str,
                 plan: str | None = None, attempt: int = 1) -> Sequence[Mapping[str, str]]:
        system, user = self.prompts.fixer(problem_name=problem_name, reference_source=reference_source,
                                          kernel_source=kernel_source, report=report, plan=plan,
                                          tolerance=self.tolerance, attempt=attempt, hw=self.hw,
                                          dtypes=self.dtypes, n_seeds=self.n_seeds, adversarial=self.adversarial,
                                          prompt_set=self.prompt_set)
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]
