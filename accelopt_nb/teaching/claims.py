"""Claims: a teaching notebook's statements about its own numbers, checked where they are made.

A course notebook explains what a profile shows ("double buffering is faster", "the copy is
DMA-bound"). Each such sentence sits in a ``claim(...)`` next to the numbers it is about, so a
change of the simulator or the performance model that breaks the story fails the notebook (and
its test) instead of leaving text that contradicts the table above it::

    claim(double.latency < single.latency / 1.2,
          "double buffering hides the loads: at least 1.2x faster",
          f"{single.latency / double.latency:.2f}x")
"""
from __future__ import annotations

import html
from dataclasses import dataclass

from accelopt_nb.errors import AccelOptError


class ClaimError(AccelOptError):
    """A course notebook's statement about its own numbers does not hold for them."""


@dataclass(frozen=True)
class Claim:
    text: str
    measured: str = ""

    def __str__(self) -> str:
        return f"\u2714 {self.text}" + (f" ({self.measured})" if self.measured else "")

    __repr__ = __str__

    def _repr_html_(self) -> str:
        extra = f" <span style='color:#57606a'>({html.escape(self.measured)})</span>" if self.measured else ""
        return f"<span style='color:#1a7f37'>\u2714</span> {html.escape(self.text)}{extra}"


def claim(holds: object, text: str, measured: str = "") -> Claim:
    """Check one statement the notebook makes; raise :class:`ClaimError` when the numbers disagree.

    ``holds`` is the statement as a condition on the numbers, ``text`` the sentence the notebook
    makes, ``measured`` the numbers it rests on (shown beside the tick, and in the error). The tick is
    displayed at once (several claims in one cell each show); the :class:`Claim` is returned.
    """
    if not bool(holds):
        got = f" (the numbers: {measured})" if measured else ""
        raise ClaimError(f"the notebook says {text!r}, but its numbers disagree{got}: the explanation "
                         "around this cell does not hold for these parameters or for this version of "
                         "the simulator and performance model")
    made = Claim(text, measured)
    _show(made)
    return _Shown(made)


class _Shown(Claim):
    """A claim already displayed: as a cell's last value it shows nothing more."""

    def __init__(self, made: Claim) -> None:
        object.__setattr__(self, "text", made.text)
        object.__setattr__(self, "measured", made.measured)

    def _repr_html_(self) -> str:           # type: ignore[override]
        return ""

    def _ipython_display_(self) -> None:
        pass


def _show(made: Claim) -> None:
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:                      # pragma: no cover - IPython ships with the notebook extra
        get_ipython = None
    if get_ipython is not None and get_ipython() is not None:
        display(made)
    else:
        print(made)


__all__ = ["Claim", "ClaimError", "claim"]
