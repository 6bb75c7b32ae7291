import os
import resource
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


@pytest.fixture(scope="session")
def eval_pool():
    """One pool of warm evaluation workers for every test that runs a search: starting a pool per session (2
    workers, each importing the simulator and the performance model) was most of those tests' CPU. Jobs stay
    independent (each runs in its own forked runner) and every session keeps its own result cache."""
    from accelopt_nb.evaluation import LocalPoolEvaluator

    with LocalPoolEvaluator(workers=2) as pool:
        yield pool


# --cpu-durations N: the N tests that used the most CPU (user + system, this process and the child processes
# it reaped while the test ran). On a shared machine CPU time moves far less with load than wall time.
def pytest_addoption(parser):
    parser.addoption("--cpu-durations", type=int, default=None, metavar="N",
                     help="show the N tests that used the most CPU time (0: all)")


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


_CPU_BY_TEST: dict[str, float] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if item.config.getoption("--cpu-durations") is None:
        yield
        return
    start = _cpu_seconds()
    yield
    _CPU_BY_TEST[item.nodeid] = _cpu_seconds() - start


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    n = config.getoption("--cpu-durations")
    if n is None or not _CPU_BY_TEST:
        return
    ranked = sorted(_CPU_BY_TEST.items(), key=lambda kv: -kv[1])
    terminalreporter.write_sep("=", f"CPU seconds per test (total {sum(_CPU_BY_TEST.values()):.1f} s over "
                                    f"{len(ranked)} tests)")
    for nodeid, seconds in ranked[:n or None]:
        terminalreporter.write_line(f"{seconds:8.2f}s  {nodeid}")
