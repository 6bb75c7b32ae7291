"""The NKI CPU simulator: run unmodified ``neuronxcc.nki`` kernels on NumPy.

>>> from accelopt_nb.sim import load_kernel, simulate
>>> kern = load_kernel("my_kernel.py")
>>> result = simulate(kern, a, b)          # result.outputs, result.trace
"""
from accelopt_nb.sim.frontend import Kernel, SimResult, jit, load_kernel, simulate
from accelopt_nb.sim.runtime import SimOptions
from accelopt_nb.sim.trace import Instruction, Region, TensorInfo, Trace

__all__ = ["Kernel", "SimResult", "SimOptions", "jit", "load_kernel", "simulate", "Instruction", "Region",
           "TensorInfo", "Trace"]
