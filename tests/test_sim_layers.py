"""The simulator's layering: the performance model sees only the trace types."""
import subprocess
import sys


def test_perf_loads_only_the_trace_types_of_the_simulator():
    code = ("import sys, accelopt_nb.perf\n"
            "print(sorted(m for m in sys.modules if m.startswith('accelopt_nb.sim')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['accelopt_nb.sim', 'accelopt_nb.sim.trace']"
