"""Filling a teaching notebook's exercise cells with answers (reference answers, or a test's wrong ones)."""
from __future__ import annotations

import copy
from typing import Any, Mapping

TAG_PREFIX = "exercise-"


def exercise_ids(nb: Any) -> list[str]:
    """The exercise ids of a notebook, in order (from the cells tagged ``exercise-<id>``)."""
    return [t[len(TAG_PREFIX):] for c in nb.cells for t in c.get("metadata", {}).get("tags", [])
            if t.startswith(TAG_PREFIX)]


def fill_exercises(nb: Any, answers: Mapping[str, str]) -> Any:
    """A copy of ``nb`` whose exercise cells are replaced by ``answers[id]`` where given."""
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        for tag in cell.get("metadata", {}).get("tags", []):
            if tag.startswith(TAG_PREFIX) and tag[len(TAG_PREFIX):] in answers:
                cell["source"] = answers[tag[len(TAG_PREFIX):]]
    return nb
