"""Live progress of a session step in a notebook, and the failures a step leaves behind.

:class:`LiveProgress` takes the session's :class:`~accelopt_nb.search.events.ProgressEvent` values
(or dicts with the same fields) and shows a per-phase bar with done/total and failed counters: an
ipywidgets bar in Jupyter, one line per finished phase elsewhere — the same events as the CLI's
lines. :class:`StepOutcome` gathers the ``StepStats`` of the steps a command ran and names what
went wrong by its cause (LLM transport, model error, unusable answer, kernel build failure,
rejection, wrong values), so a step that went wrong is reported loudly and rightly.
"""
from __future__ import annotations

import dataclasses
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from accelopt_nb.notebook.causes import Failures, step_failures
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

    Events may interleave across phases (a pipelined search); each phase keeps its own counters,
    the bar follows the phase of the latest event and the label lists them all. Events arrive from
    the LLM worker thread too, hence the lock; widget updates are safe from any thread in ipykernel.
    """

    def __init__(self, *, widgets: bool | None = None, stream: Any = None,
                 on_change: Callable[[PhaseState], None] | None = None) -> None:
        self.state = PhaseState()
        self.phases: dict[tuple[str, Any], PhaseState] = {}
        self.log: list[str] = []
        self.stream = stream or sys.stdout
        self.on_change = on_change
        self._lock = threading.Lock()
        self._handle: Any = None
        self.widget = self.bar = self.label = None
        if widgets if widgets is not None else in_jupyter():
            import ipywidgets as w
            self.bar = w.IntProgress(value=0, min=0, max=1, description="", bar_style="info",
                                     layout=w.Layout(width="300px"))
            self.label = w.HTML()
            self.widget = w.HBox([self.bar, self.label])

    def __call__(self, event: Any) -> None:
        e = event_fields(event)
        kind, phase, it = e.get("kind"), e.get("phase", ""), e.get("iteration")
        with self._lock:
            if phase == "iteration":
                if kind == "start":
                    self.phases.clear()
                    self._line(f"[{e.get('problem', '')}] iteration {it}")
                return
            if kind == "start" or (phase, it) not in self.phases:
                self.phases = {k: v for k, v in self.phases.items() if k[1] == it}
                self.phases[(phase, it)] = PhaseState(phase, it)
            s = self.state = self.phases[(phase, it)]
            s.done, s.total, s.failed = int(e.get("done") or 0), int(e.get("total") or 0), int(e.get("failed") or 0)
            if kind == "end":
                s.message = e.get("message", "")
                self._line(f"  {phase:<9} {s.message}")
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
        parts = []
        for p in self.phases.values():
            failed = f", <span style='color:{FAIL_COLOR}'><b>{p.failed} failed</b></span>" if p.failed else ""
            tail = f" — {esc(p.message)}" if p.message else ""
            parts.append(f"<code>{esc(p.phase)}</code> {p.done}/{p.total}{failed}{tail}")
        self.label.value = f"iteration {esc(s.iteration)}: " + "; ".join(parts)

    # ---- shown in a notebook: the live bar, and text that static viewers can read ----------------------
    def show(self) -> None:
        """Display the bar (Jupyter only). The output also carries a text and HTML copy of the progress,
        which :meth:`finish` brings up to date: viewers without the widget (GitHub, nbviewer, an executed
        notebook opened later) show those instead of ``HBox(children=(IntProgress(...``."""
        if self.widget is None:
            return
        from IPython.display import display
        self._handle = display(self._bundle(), raw=True, display_id=True)

    def finish(self) -> None:
        """Bring the displayed copy up to date (the final state of every phase)."""
        if self._handle is not None:
            with self._lock:
                bundle = self._bundle()
            self._handle.update(bundle, raw=True)

    def summary_text(self) -> str:
        """Every finished phase as one line each (what the terminal shows), or the running phase."""
        if self.log:
            return "\n".join(self.log)
        s = self.state
        return f"{s.phase or 'waiting'}: {s.done}/{s.total}" + (f", {s.failed} failed" if s.failed else "")

    def _bundle(self) -> dict[str, Any]:
        assert self.widget is not None and self.bar is not None
        bundle = dict(self.widget._repr_mimebundle_())
        bundle["text/plain"] = self.summary_text()
        style = self.bar.bar_style
        color = {"danger": FAIL_COLOR, "success": OK_COLOR}.get(style, "#1976d2")
        frac = self.bar.value / max(self.bar.max, 1)
        bar = (f"<div style='display:inline-block;width:300px;height:10px;background:#e0e0e0;margin-right:8px'>"
               f"<div style='width:{100 * frac:.0f}%;height:100%;background:{color}'></div></div>")
        lines = "".join(f"<div>{esc(line)}</div>" for line in self.log)
        bundle["text/html"] = (f"<div class='accelopt-progress'>{bar}{self.label.value if self.label else ''}"
                               f"<div style='font-family:monospace;font-size:11px;white-space:pre'>{lines}</div></div>")
        return bundle

    def _line(self, text: str) -> None:
        self.log.append(text)
        if self.bar is None and self.stream is not None:
            print(text, file=self.stream, flush=True)


# ---- what a finished step left behind -----------------------------------------------------------
@dataclass
class StepOutcome:
    """What went wrong in the steps one command ran, by cause (:mod:`accelopt_nb.notebook.causes`):
    LLM calls lost to the transport, refused by the model, or answered unusably; calls not made;
    and kernels that failed to build, were rejected, or are incorrect."""

    steps: list[Any] = field(default_factory=list)
    failures: Failures = field(default_factory=Failures)
    stopped: bool = False

    @classmethod
    def since(cls, session: Any, mark: int) -> "StepOutcome":
        """The steps ``session`` ran after ``mark = len(session.step_stats)`` was taken."""
        steps = list(session.step_stats[mark:])
        return cls(steps=steps, failures=step_failures(steps, session.iteration_kernels),
                   stopped=any(st.stopped for st in steps))

    @property
    def failed(self) -> int:
        """LLM calls that failed (any cause)."""
        return sum(self.failures.llm.values())

    @property
    def missing(self) -> int:
        return self.failures.missing

    @property
    def problem(self) -> bool:
        return bool(self.failures.llm or self.failures.missing or self.failures.kernels)

    @property
    def reasons(self) -> list[str]:
        f = self.failures
        return [f"{cause}: {f.first[cause]}" for cause in f.first if f.llm.get(cause) or f.kernels.get(cause)]

    def headline(self) -> str:
        f, parts = self.failures, []
        if f.llm or f.missing:
            parts.append(f"LLM calls: {f.llm_text()}")
        if f.kernels:
            parts.append(f"kernels: {f.kernel_text()}")
        return "; ".join(parts)

    def text(self) -> str:
        if not self.problem:
            return ""
        first = f" (first: {self.reasons[0]})" if self.reasons else ""
        stop = " (stopped on request)" if self.stopped else ""
        label = "FAILED: " if self.lost_calls else ""
        return f"{label}{self.headline()}{stop}{first}"

    def html(self) -> str:
        if not self.problem:
            return ""
        reasons = "".join(f"<li>{esc(r)}</li>" for r in self.reasons[:4])
        stop = " (stopped on request; the step is not done, run it again to finish it)" if self.stopped else ""
        return (f"<div class='accelopt-failure' style='color:{FAIL_COLOR};border-left:4px solid {FAIL_COLOR};"
                f"padding:2px 8px;margin:4px 0'><b>{esc(self.headline())}</b>"
                f"{esc(stop)}<ul style='margin:2px 0'>{reasons}</ul></div>")

    @property
    def lost_calls(self) -> bool:
        """LLM calls failed or were never made: the step is not what it should be (kernels failing is the search)."""
        return bool(self.failures.llm or self.failures.missing)

    def ok_html(self, what: str) -> str:
        """The action's result: the banner alone when calls were lost; else what was done (and failed kernels)."""
        if self.lost_calls:
            return self.html()
        return f"<span style='color:{OK_COLOR}'>{esc(what)}</span>" + self.html()
