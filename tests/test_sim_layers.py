"""The simulator's layering: the performance model sees only the trace types."""
import subprocess
import sys


def test_perf_loads_only_the_trace_types_of_the_simulator():
    # perf loads its modules on first use, so import the model itself, not just the package.
    code = ("import sys, accelopt_nb.perf\n"
            "from accelopt_nb.perf import estimate, Profile\n"
            "import accelopt_nb.perf.model, accelopt_nb.perf.schedule, accelopt_nb.perf.calibrate\n"
            "print(sorted(m for m in sys.modules if m.startswith('accelopt_nb.sim')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['accelopt_nb.sim', 'accelopt_nb.sim.trace']"
