"""FAKE neuronxcc.nki.typing: any name resolves (the simulator, not this module, runs the kernel)."""
from ._placeholder import resolve as __getattr__  # noqa: F401
