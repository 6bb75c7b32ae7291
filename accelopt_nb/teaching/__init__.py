"""The teaching course: exercise checks, claims about the notebooks' own numbers, and kernel display.

A course notebook (``notebooks/0x_*.ipynb``) has exercise cells, tagged ``exercise-<id>``, where
the learner writes code, each followed by a check cell ``check("<id>", answer..., **params)`` that
prints RIGHT or WRONG with the reason. Checks use only the simulator and the performance model,
and compute the right answer for the notebook's parameters. :mod:`accelopt_nb.teaching.answers`
holds the reference answers; ``accelopt reproduce`` and the tests fill them in
(:func:`accelopt_nb.teaching.notebook.fill_exercises`). ``claim(...)`` cells check what the text
says about the numbers above it (:mod:`accelopt_nb.teaching.claims`).
"""
from accelopt_nb.teaching.checks import Verdict, check
from accelopt_nb.teaching.claims import Claim, ClaimError, claim
from accelopt_nb.teaching.show import kernel_source, show_kernel, side_by_side

__all__ = ["Claim", "ClaimError", "Verdict", "check", "claim", "kernel_source", "show_kernel", "side_by_side"]
