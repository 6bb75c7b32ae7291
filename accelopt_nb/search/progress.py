"""Progress display for a search: one bar per step, one summary line when a step ends.

Pass an instance as ``progress=`` (session or :class:`~accelopt_nb.search.launch.LaunchSpec`); it
works in a terminal and (through ``tqdm.auto``) in Jupyter. It reads the session's
:class:`~accelopt_nb.search.events.ProgressEvent` values; pipelined steps run at the same time,
so each phase has its own bar.
"""
from __future__ import annotations

import sys
import threading
from typing import Any, TextIO

from accelopt_nb.search.events import ProgressEvent


class StepProgress:
    """Bars for the LLM calls and evaluations of each step, and a log line per finished step."""

    def __init__(self, stream: TextIO | None = None, bars: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        # Bars only where they render (a terminal, or bars=True in Jupyter); logs get the lines alone.
        self.bars = bars if bars is not None else bool(getattr(self.stream, "isatty", lambda: False)())
        self._bars: dict[str, Any] = {}
        self._lock = threading.Lock()

    def __call__(self, event: ProgressEvent) -> None:
        with self._lock:
            if event.phase == "iteration":
                self._line(f"[{event.problem}] iteration {event.iteration}")
            elif event.kind == "start":
                self._close(event.phase)
                if self.bars and event.total:
                    from tqdm.auto import tqdm

                    unit = "kernel" if event.phase in ("evaluate", "baseline") else "call"
                    self._bars[event.phase] = tqdm(total=event.total, desc=f"  {event.phase}", unit=unit,
                                                   file=self.stream, leave=False)
            elif event.kind in ("call_done", "eval_done"):
                bar = self._bars.get(event.phase)
                if bar is not None:
                    bar.total = max(bar.total or 0, event.total)
                    bar.n = event.done
                    if event.failed:
                        bar.set_postfix(failed=event.failed, refresh=False)
                    bar.refresh()
            elif event.kind == "end":
                self._close(event.phase)
                self._line(f"  {event.phase:<9} {event.message}")

    def _close(self, phase: str) -> None:
        bar = self._bars.pop(phase, None)
        if bar is not None:
            bar.close()

    def _line(self, text: str) -> None:
        print(text, file=self.stream, flush=True)
