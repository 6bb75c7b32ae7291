import os
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"

HEADER = """import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.typing as nt
from neuronxcc.nki import trace
from neuronxcc.nki.language import par_dim
"""


@pytest.fixture
def run_kernel(tmp_path):
    """Write kernel source (with the standard NKI import header) to a file, load and simulate it."""
    from accelopt_nb.sim import SimOptions, load_kernel, simulate

    counter = {"n": 0}

    def _run(body: str, *inputs, header: bool = True, **opts):
        counter["n"] += 1
        path = tmp_path / f"kernel_{counter['n']}.py"
        path.write_text((HEADER if header else "") + body)
        kern = load_kernel(path)
        return simulate(kern, *inputs, options=SimOptions(**opts))

    return _run


@pytest.fixture
def rng():
    return np.random.default_rng(0)
