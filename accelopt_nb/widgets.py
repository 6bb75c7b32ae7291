"""An ipywidgets panel for driving an AccelOpt session by hand (``%accelopt panel``).

Buttons run the next phase, a whole iteration, or the rest of the run; two text areas let the
person play the planner (plans separated by a line of ``---``) or the executor (a kernel for a
chosen plan). The leaderboard below redraws after every action. It is a thin layer over
:class:`accelopt_nb.search.Session`; everything it does is one Session call.
"""
from __future__ import annotations

import html
from typing import Any

import ipywidgets as w

PHASES = ("plan", "execute", "evaluate", "select", "summarize")


class SessionPanel:
    """Widgets bound to one Session. ``panel.widget`` is what the notebook displays."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.status = w.HTML()
        self.phase_buttons = {p: w.Button(description=p, tooltip=f"session.{p}()") for p in PHASES}
        self.step_button = w.Button(description="step", button_style="info", tooltip="one whole iteration")
        self.run_button = w.Button(description="run", button_style="primary", tooltip="finish the run")
        self.plans_text = w.Textarea(placeholder="Your plan(s); separate several with a line of ---",
                                     layout=w.Layout(width="100%", height="80px"))
        self.plans_button = w.Button(description="submit plans")
        self.plan_choice = w.Dropdown(description="plan", options=[])
        self.kernel_text = w.Textarea(placeholder="Your complete NKI kernel for the chosen plan",
                                      layout=w.Layout(width="100%", height="160px"))
        self.kernel_button = w.Button(description="submit kernel")
        self.message = w.HTML()
        self.output = w.Output()
        for phase, button in self.phase_buttons.items():
            button.on_click(lambda _b, p=phase: self._act(lambda: getattr(self.session, p)()))
        self.step_button.on_click(lambda _b: self._act(self.session.step))
        self.run_button.on_click(lambda _b: self._act(self.session.run))
        self.plans_button.on_click(lambda _b: self._act(self._submit_plans))
        self.kernel_button.on_click(lambda _b: self._act(self._submit_kernel))
        self.widget = w.VBox([
            self.status,
            w.HBox(list(self.phase_buttons.values()) + [self.step_button, self.run_button]),
            w.HTML("<b>Play the planner</b>"), self.plans_text, self.plans_button,
            w.HTML("<b>Play the executor</b>"), self.plan_choice, self.kernel_text, self.kernel_button,
            self.message, self.output,
        ])
        self.refresh()

    # ---- actions ----------------------------------------------------------------------------
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
        result = self.session.execute(manual={self.plan_choice.value: self.kernel_text.value})
        self.kernel_text.value = ""
        return result

    def _act(self, action) -> None:
        self.output.clear_output()
        with self.output:  # step progress printed by the session lands here
            try:
                result = action()
            except Exception as exc:  # show the reason in the panel; the session stays usable
                self.message.value = (f"<span style='color:#b00020'>{type(exc).__name__}: "
                                      f"{html.escape(str(exc))}</span>")
            else:
                done = f"{len(result)} item(s)" if isinstance(result, list) else "done"
                self.message.value = f"<span style='color:#1b5e20'>{html.escape(done)}</span>"
        self.refresh()

    # ---- display ----------------------------------------------------------------------------
    def refresh(self) -> None:
        s = self.session
        nxt = s.next_phase
        for phase, button in self.phase_buttons.items():
            button.button_style = "success" if phase == nxt else ""
            button.disabled = phase != nxt
        self.plans_button.disabled = nxt != "plan"
        self.kernel_button.disabled = nxt != "execute"
        self.plan_choice.options = [p.plan_id for p in s.iteration_plans()] if nxt == "execute" else []
        base, best = s.baseline, s.best
        speed = base.latency_ms / best.latency_ms if best.latency_ms else float("nan")
        rows = "".join(f"<tr><td>{k.kernel_id}</td><td>{k.iteration}</td><td>{k.latency_ms:.4g}</td>"
                       f"<td>{'' if k.pct_peak is None else f'{k.pct_peak:.1f}%'}</td></tr>"
                       for k in s.beam_kernels())
        self.status.value = (
            f"<b>{s.problem.name}</b> run <code>{s.run_id}</code>: iteration {s.iteration}, "
            f"next <code>{nxt}()</code>; best {best.latency_ms:.4g} ms = {speed:.3f}x over the baseline; "
            f"memory {len(s.memory)} items"
            f"<table><tr><th>beam kernel</th><th>iter</th><th>ms</th><th>% of peak</th></tr>{rows}</table>")

    def _ipython_display_(self) -> None:
        from IPython.display import display
        display(self.widget)
