"""The paper's published numbers, shipped as cited data so a reproduction never needs the paper's repository.

* :func:`nkibench_trn1` -- per-problem trn1 measurements (baseline and best % of peak, bound, traffic);
* :func:`paper_facts` -- headline numbers (49%->61% / 45%->59%, memory 13 vs 16 iterations, 26x, Mamba).

Sources are in the data files' headers (``data/nkibench_trn1_published.csv``, ``data/paper_facts.yaml``).
"""
from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Any

import numpy as np
import pandas as pd
import yaml

_DATA = resources.files(__package__) / "data"


def nkibench_trn1() -> pd.DataFrame:
    """One row per NKIBench problem: the paper's measured trn1 baseline and best-kernel numbers."""
    with (_DATA / "nkibench_trn1_published.csv").open() as f:
        return pd.read_csv(f, comment="#")


@lru_cache(maxsize=1)
def paper_facts() -> dict[str, Any]:
    return yaml.safe_load((_DATA / "paper_facts.yaml").read_text())


def geomean(values: Any) -> float:
    v = np.asarray(list(values), dtype=float)
    return float(np.exp(np.mean(np.log(v)))) if len(v) else float("nan")
