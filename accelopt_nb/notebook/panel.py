"""An ipywidgets panel for driving an AccelOpt session by hand (``%accelopt panel``).

Buttons run the next phase, a whole iteration, or the rest of the run, in a worker thread so
the notebook stays responsive: while one runs, the other buttons are disabled, a bar shows the
phase's calls or evaluations (and failures) as they finish, and Stop (``session.request_stop``)
starts no new call or evaluation; those in flight finish and are stored, nothing done is lost.
A step that lost LLM calls is reported in red, never as "done". Two text areas let the person
play the planner or the executor; tabs show the leaderboard, the planner's plans, a kernel diff,
the progress plot and the memory. Every action is one Session call.
"""
from __future__ import annotations

import html
import threading
from typing import Any, Callable

import ipywidgets as w

from accelopt_nb.notebook import display as d
from accelopt_nb.notebook.progress import LiveProgress, StepOutcome


STOP_COLOR = "#8a6d00"


class SessionPanel:
    """Widgets bound to one Session. ``panel.widget`` is what the notebook displays.

    ``background=False`` runs actions in the caller's thread (scripts, tests that want no thread).
    """

    def __init__(self, session: Any, *, background: bool = True) -> None:
        self.session = session
        self.background = background
        self.busy = False
        self._stop = threading.Event()
        self._finishing = threading.Lock()   # a Stop click and the end of the action, one at a time
        self._thread: threading.Thread | None = None
        self.status = w.HTML()
        from accelopt_nb.search.state import PHASES
        self.phase_buttons = {p: w.Button(description=p, tooltip=f"session.{p}()") for p in PHASES}
        self.step_button = w.Button(description="step", button_style="info", tooltip="one whole iteration")
        self.run_button = w.Button(description="run", button_style="primary", tooltip="finish the run")
        self.stop_button = w.Button(description="stop", button_style="danger", disabled=True,
                                    tooltip="stop at the next step boundary; nothing done is lost")
        self.progress = LiveProgress(widgets=True)
        self.plans_text = w.Textarea(placeholder="Your plan(s); separate several with a line of ---",
                                     layout=w.Layout(width="100%", height="80px"))
        self.plans_button = w.Button(description="submit plans")
        self.plan_choice = w.Dropdown(description="plan", options=[])
        self.kernel_text = w.Textarea(placeholder="Your complete NKI kernel for the chosen plan",
                                      layout=w.Layout(width="100%", height="160px"))
        self.kernel_button = w.Button(description="submit kernel")
        self.kernel_only = w.Checkbox(description="no executor calls for the other plans", indent=False)
        self.message = w.HTML()
        self.leaderboard = w.HTML()
        self.plans_view = w.HTML()
        self.diff_a = w.Dropdown(description="left", options=[])
        self.diff_b = w.Dropdown(description="right", options=[])
        self.diff_view = w.HTML()
        self.plot = w.Output()
        self.memory_view = w.HTML()
        for phase, button in self.phase_buttons.items():
            button.on_click(lambda _b, p=phase: self._act(p, lambda: getattr(self.session, p)()))
        self.step_button.on_click(lambda _b: self._act("step", self.session.step))
        self.run_button.on_click(lambda _b: self._act("run", self.session.run))
        self.stop_button.on_click(lambda _b: self.stop())
        self.plans_button.on_click(lambda _b: self._act("plan", self._submit_plans))
        self.kernel_button.on_click(lambda _b: self._act("execute", self._submit_kernel))
        self.diff_a.observe(lambda _c: self._draw_diff(), names="value")
        self.diff_b.observe(lambda _c: self._draw_diff(), names="value")
        views = {"leaderboard": self.leaderboard, "plans": self.plans_view,
                 "diff": w.VBox([w.HBox([self.diff_a, self.diff_b]), self.diff_view]),
                 "progress plot": self.plot, "memory": self.memory_view,
                 "play the planner": w.VBox([self.plans_text, self.plans_button]),
                 "play the executor": w.VBox([self.plan_choice, self.kernel_text,
                                                w.HBox([self.kernel_button, self.kernel_only])])}
        self.tabs = w.Tab(children=list(views.values()), titles=tuple(views))
        self.widget = w.VBox([
            self.status,
            w.HBox(list(self.phase_buttons.values()) + [self.step_button, self.run_button, self.stop_button]),
            self.progress.widget, self.message, self.tabs,
        ])
        self.widget.add_class("accelopt-panel")
        self.refresh()

    # ---- actions -----------------------------------------------------------------------------------
    def _submit_plans(self) -> Any:
        plans = [p.strip() for p in self.plans_text.value.split("\n---\n") if p.strip()]
        if not plans:
            raise ValueError("write at least one plan first")
        result = self.session.plan(manual=plans)
        self.plans_text.value = ""
        return result

    def _submit_kernel(self) -> Any:
        if not self.plan_choice.value or not self.kernel_text.value.strip():
            raise ValueError("choose a plan and write its kernel first")
        result = self.session.execute(manual={self.plan_choice.value: self.kernel_text.value},
                                      llm=not self.kernel_only.value)
        self.kernel_text.value = ""
        return result

    def stop(self) -> None:
        """Ask the running action to stop: no new LLM calls or evaluations; those in flight finish and are stored.

        A click that arrives after the action ended (the browser had not yet disabled the button) does
        nothing: a stop request left on an idle session would stop the next step before it began."""
        with self._finishing:
            if not self.busy:
                return
            self._stop.set()
            self.session.request_stop()
            self.message.value = f"<span style='color:{STOP_COLOR}'>stopping after the calls in flight…</span>"

    def _act(self, what: str, action: Callable[[], Any]) -> None:
        if self.busy:
            return
        if self.session.busy:  # a script or another panel on this session is running a step
            self.message.value = (f"<span class='accelopt-error' style='color:{d.FAIL_COLOR}'>the session is busy: "
                                  f"{html.escape(self.session.busy)} is running elsewhere; try again when it ends</span>")
            return
        self.busy = True
        self._stop.clear()
        self._set_enabled(False)
        self.message.value = f"<i>running {html.escape(what)}…</i>"
        if self.background:
            self._thread = threading.Thread(target=self._perform, args=(what, action), daemon=True,
                                            name="accelopt-panel")
            self._thread.start()
        else:
            self._perform(what, action)

    def _perform(self, what: str, action: Callable[[], Any]) -> None:
        s = self.session
        mark = len(s.step_stats)
        previous, s.progress = s.progress, self.progress
        message, danger = "", False
        try:
            result = action()
        except Exception as exc:  # shown in the panel; the session stays usable
            danger = True
            message = (f"<span class='accelopt-error' style='color:{d.FAIL_COLOR}'><b>"
                       f"{type(exc).__name__}</b>: {html.escape(str(exc))}</span>")
        else:
            outcome = StepOutcome.since(s, mark)
            done = f"{what}: {len(result)} item(s)" if isinstance(result, list) else f"{what}: done"
            message, danger = outcome.ok_html(done), outcome.lost_calls
        finally:
            s.progress = previous
            with self._finishing:   # a Stop pressed from here on finds the panel idle and does nothing
                if self._stop.is_set() and not message.startswith("<span class='accelopt-error'"):
                    outcome = StepOutcome.since(s, mark)
                    message = (f"<span class='accelopt-stopped' style='color:{STOP_COLOR}'>stopped: "
                               f"{outcome.missing} call(s) not made; what finished is stored, and running "
                               f"the step again makes only the missing calls</span>")
                    danger = False
                if danger:
                    self.progress.bar.bar_style = "danger"
                if message:
                    self.message.value = message
                s.clear_stop()       # a Stop that landed after the session's step ended must not outlive it
                self.busy = False
            self.refresh()

    def wait(self, timeout: float | None = None) -> None:
        """Block until the running action has finished (scripts and tests)."""
        if self._thread is not None:
            self._thread.join(timeout)

    # ---- display -----------------------------------------------------------------------------------
    def _set_enabled(self, idle: bool) -> None:
        nxt = self.session.next_phase
        for phase, button in self.phase_buttons.items():
            button.button_style = "success" if phase == nxt and idle else ""
            button.disabled = not idle or phase != nxt
        self.step_button.disabled = self.run_button.disabled = not idle
        self.plans_button.disabled = not idle or nxt != "plan"
        self.kernel_button.disabled = not idle or nxt != "execute"
        self.stop_button.disabled = idle

    def refresh(self) -> None:
        """Redraw from the session (also called by the magics after they advance it)."""
        s = self.session
        self._set_enabled(not self.busy)
        choices = [p.plan_id for p in s.iteration_plans()] if s.next_phase == "execute" else []
        if list(self.plan_choice.options) != choices:
            self.plan_choice.options = choices
            self.plan_choice.value = choices[0] if choices else None
        self.status.value = d.session_view(s).html
        self.leaderboard.value = d.leaderboard(s).html
        latest = max((p.iteration for p in s.plans.values()), default=None)
        self.plans_view.value = d.plans_view(s, latest).html if latest is not None else "<i>no plans yet</i>"
        ids = sorted(s.kernels, key=lambda k: (s.kernels[k].iteration, s.kernels[k].order, k))
        keep_a, keep_b = self.diff_a.value, self.diff_b.value
        self.diff_a.options, self.diff_b.options = ids, ids
        self.diff_a.value = keep_a if keep_a in ids else "baseline"
        self.diff_b.value = keep_b if keep_b in ids and keep_b != "baseline" else s.best.kernel_id
        self._draw_diff()
        self.memory_view.value = d.memory_view(s.memory).html
        self._draw_plot()

    def _draw_diff(self) -> None:
        a, b = self.diff_a.value, self.diff_b.value
        if a in self.session.kernels and b in self.session.kernels:
            self.diff_view.value = d.KernelDiff(a, self.session.kernels[a].source, b,
                                                self.session.kernels[b].source)._repr_html_()

    def _draw_plot(self) -> None:
        import matplotlib.pyplot as plt

        self.plot.clear_output(wait=True)
        fig = d.plot_progress(self.session)
        self.plot.append_display_data(fig)
        plt.close(fig)

    def _bundle(self) -> dict[str, Any]:
        """The widget, with a text and HTML copy of the session's state for viewers without widgets."""
        bundle = dict(self.widget._repr_mimebundle_())
        bundle["text/plain"] = d.session_view(self.session).text
        bundle["text/html"] = (f"<div class='accelopt-panel-static'>{self.status.value}{self.message.value}"
                               f"{self.leaderboard.value}</div>")
        return bundle

    def _ipython_display_(self) -> None:
        """Display the panel with a static copy of the session as it is now (what a saved notebook shows
        without the widget). Not redrawn after each action: that would re-render the live panel."""
        from IPython.display import display
        display(self._bundle(), raw=True)
