"""FAKE neuronxcc.nki.language: any name resolves (the simulator, not this module, runs the kernel)."""
from ._placeholder import resolve as __getattr__  # noqa: F401
