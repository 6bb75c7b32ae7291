"""The teaching course's exercises: check cells that say whether an answer is right.

A teaching notebook (``notebooks/0x_*.ipynb``) has exercise cells, tagged ``exercise-<id>``, where
the learner writes code, each followed by a check cell ``check("<id>", answer...)`` that prints
RIGHT or WRONG with the reason. Checks use only the simulator and the performance model.
:mod:`accelopt_nb.teaching.answers` holds the reference answers; ``accelopt reproduce`` and the
tests fill them in (:func:`accelopt_nb.teaching.notebook.fill_exercises`).
"""
from accelopt_nb.teaching.checks import Verdict, check

__all__ = ["Verdict", "check"]
