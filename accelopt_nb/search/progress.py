"""Progress display for a search: one bar per step, one summary line when a step ends.

Pass an instance as ``Session(progress=...)``; it works in a terminal and (through
``tqdm.auto``) in Jupyter. Events come from the session as plain dicts with a ``kind``:
``iteration``, ``phase`` (a step starts, with ``total`` items), ``item`` (one LLM call or
evaluation finished, ``ok``), ``phase_done`` (with a ``message``).
"""
from __future__ import annotations

import sys
import threading
from typing import Any, TextIO


class StepProgress:
    """Bars for the LLM calls and evaluations of each step, and a log line per finished step."""

    def __init__(self, stream: TextIO | None = None, bars: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        # Bars only where they render (a terminal, or bars=True in Jupyter); logs get the lines alone.
        self.bars = bars if bars is not None else bool(getattr(self.stream, "isatty", lambda: False)())
        self._bar: Any = None
        self._failed = 0
        self._lock = threading.Lock()

    def __call__(self, event: dict[str, Any]) -> None:
        with self._lock:
            kind = event["kind"]
            if kind == "iteration":
                self._line(f"[{event['problem']}] iteration {event['iteration']}")
            elif kind == "phase":
                self._close()
                self._failed = 0
                if self.bars and event.get("total"):
                    from tqdm.auto import tqdm

                    self._bar = tqdm(total=event["total"], desc=f"  {event['phase']}", unit="kernel"
                                     if event["phase"] in ("evaluate", "baseline") else "call", file=self.stream, leave=False)
            elif kind == "item":
                if not event.get("ok", True):
                    self._failed += 1
                if self._bar is not None:
                    self._bar.update(1)
                    if self._failed:
                        self._bar.set_postfix(failed=self._failed, refresh=False)
            elif kind == "phase_done":
                self._close()
                self._line(f"  {event['phase']:<9} {event.get('message', '')}")

    def _close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def _line(self, text: str) -> None:
        print(text, file=self.stream, flush=True)
