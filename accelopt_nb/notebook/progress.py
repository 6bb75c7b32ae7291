"""Live progress of a session step in a notebook, and the failures a step leaves behind.

:class:`LiveProgress` takes the session's progress events (the dicts the session emits, or
any object with the same fields as attributes) and shows a per-phase bar with done/total and
failed counters: an ipywidgets bar in Jupyter, one line per finished phase elsewhere — the same
events as the CLI's lines. :func:`step_outcome` reads a finished step back from the run store
(failed calls, missing calls, the first reason), so a step that went wrong is reported loudly.
"""
from __future__ import annotations

import dataclasses
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from accelopt_nb.notebook.display import FAIL_COLOR, OK_COLOR, esc


def event_fields(event: Any) -> dict[str, Any]:
    """An event as a dict, whether the session sent a dict or a dataclass."""
    if isinstance(event, Mapping):
        return dict(event)
    if dataclasses.is_dataclass(event):
        return dataclasses.asdict(event)
    return dict(vars(event))


def in_jupyter() -> bool:
    """True inside a Jupyter kernel, where widgets render (not in terminal IPython or plain Python)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


@dataclass
class PhaseState:
    phase: str = ""
    iteration: int | None = None
    done: int = 0
    total: int = 0
    failed: int = 0
    message: str = ""


class LiveProgress:
    """Progress callback for ``session.progress``; ``widget`` is the bar (None outside Jupyter).

    ``on_change(state)`` is called after every event, e.g. for the panel to redraw its counters.
    """

    def __init__(self, *, widgets: bool | None = None, stream: Any = None,
                 on_change: Callable[[PhaseState], None] | None = None) -> None:
        self.state = PhaseState()
        self.log: list[str] = []
        self.stream = stream or sys.stdout
        self.on_change = on_change
        self._lock = threading.Lock()
        self.widget = self.bar = self.label = None
        if widgets if widgets is not None else in_jupyter():
            import ipywidgets as w
            self.bar = w.IntProgress(value=0, min=0, max=1, description="", bar_style="info",
                                     layout=w.Layout(width="300px"))
            self.label = w.HTML()
            self.widget = w.HBox([self.bar, self.label])

    def __call__(self, event: Any) -> None:
        e = event_fields(event)
        with self._lock:
            kind, s = e.get("kind"), self.state
            if kind == "iteration":
                self._line(f"[{e.get('problem', '')}] iteration {e.get('iteration')}")
            elif kind == "phase":
                self.state = s = PhaseState(e.get("phase", ""), e.get("iteration"), 0, int(e.get("total") or 0))
            elif kind == "item":
                s.done += 1
                s.failed += 0 if e.get("ok", True) else 1
            elif kind == "phase_done":
                if (e.get("phase"), e.get("iteration")) != (s.phase, s.iteration):  # a step without a "phase" event
                    self.state = s = PhaseState(e.get("phase", ""), e.get("iteration"))
                s.message = e.get("message", "")
                self._line(f"  {s.phase:<9} {s.message}")
            # Events that carry their own counters (done/total/failed) are taken as they are.
            for name in ("done", "total", "failed"):
                if isinstance(e.get(name), int) and kind not in ("phase", "item"):
                    setattr(s, name, e[name])
            self._draw()
        if self.on_change is not None:
            self.on_change(self.state)

    def _draw(self) -> None:
        if self.bar is None:
            return
        s = self.state
        self.bar.max = max(s.total, 1)
        self.bar.value = min(s.done, self.bar.max) if s.total else (1 if s.message else 0)
        self.bar.bar_style = "danger" if s.failed else ("success" if s.message else "info")
        failed = f", <span style='color:{FAIL_COLOR}'><b>{s.failed} failed</b></span>" if s.failed else ""
        self.label.value = (f"<code>{esc(s.phase)}</code> iteration {esc(s.iteration)}: {s.done}/{s.total}"
                            f"{failed}" + (f" — {esc(s.message)}" if s.message else ""))

    def _line(self, text: str) -> None:
        self.log.append(text)
        if self.bar is None and self.stream is not None:
            print(text, file=self.stream, flush=True)


# ---- what a finished step left behind -----------------------------------------------------------
@dataclass
class StepOutcome:
    """Failed and missing LLM calls of the steps one command ran (read from the run store)."""

    steps: list[tuple[int, str]] = field(default_factory=list)
    failed: int = 0
    missing: int = 0
    reasons: list[str] = field(default_factory=list)

    @property
    def problem(self) -> bool:
        return bool(self.failed or self.missing)

    def text(self) -> str:
        if not self.problem:
            return ""
        first = f"; first: {self.reasons[0]}" if self.reasons else ""
        return f"FAILED: {self.failed} LLM call(s) failed, {self.missing} missing{first}"

    def html(self) -> str:
        if not self.problem:
            return ""
        reasons = "".join(f"<li>{esc(r)}</li>" for r in self.reasons[:3])
        return (f"<div class='accelopt-failure' style='color:{FAIL_COLOR};border-left:4px solid {FAIL_COLOR};"
                f"padding:2px 8px;margin:4px 0'><b>{self.failed} LLM call(s) failed, {self.missing} missing</b>"
                f"<ul style='margin:2px 0'>{reasons}</ul></div>")

    def ok_html(self, what: str) -> str:
        return self.html() or f"<span style='color:{OK_COLOR}'>{esc(what)}</span>"


def _step_infos(session: Any) -> dict[tuple[int, str], dict[str, Any]]:
    out = {}
    for row in session.store.rows("steps", session.run_id):
        if row["scope"] == session.problem.name and row["status"] == "done":
            out[(int(row["iteration"]), row["step"])] = row.get("info") or {}
    return out


def done_steps(session: Any) -> set[tuple[int, str]]:
    return set(_step_infos(session))


def step_outcome(session: Any, before: set[tuple[int, str]]) -> StepOutcome:
    """Failures of the steps completed since ``before`` (a :func:`done_steps` snapshot)."""
    infos = _step_infos(session)
    out = StepOutcome()
    for key in sorted(set(infos) - before):
        it, name = key
        info = infos[key]
        out.steps.append(key)
        failed = info.get("failed") or []
        out.failed += len(failed)
        out.reasons += [f"{name} {f.get('plan_id') or f.get('kernel_id') or f.get('item_id') or ''}: "
                        f"{f.get('status')}: {f.get('error')}" for f in failed]
        expected = _expected_calls(session, it, name, info)
        if expected is not None:
            out.missing += max(0, expected - len(failed) - _produced(info, name))
        for name_key in ("missing",):  # a session that counts missing calls itself
            if isinstance(info.get(name_key), int):
                out.missing = max(out.missing, info[name_key])
    return out


def _produced(info: Mapping[str, Any], name: str) -> int:
    return int(info.get("llm_plans", info.get("plans", 0))) if name == "plan" else \
        int(info.get("llm_kernels", info.get("kernels", 0)))


def _expected_calls(session: Any, it: int, name: str, info: Mapping[str, Any]) -> int | None:
    """LLM answers a plan/execute step should have produced; None when a person wrote them."""
    if name == "plan":
        plans = session.iteration_plans(it)
        if plans and all(p.origin == "manual" for p in plans):
            return None
        sources = info.get("from") or []
        return session.config.plans_for(it, len(sources)) * len(sources)
    if name == "execute":
        plans = [p for p in session.iteration_plans(it)]
        kernels = [k for k in session.kernels.values() if k.iteration == it]
        manual_plans = {k.plan_id for k in kernels if k.origin == "manual"}
        llm_plans = [p for p in plans if p.plan_id not in manual_plans]
        if not any(k.origin == "llm" for k in kernels) and manual_plans and not info.get("failed"):
            return None  # --only: the person wrote the kernels, no executor calls were asked for
        return session.config.samples_per_plan * len(llm_plans) + sum(
            1 for k in kernels if k.origin == "manual")
    return None
