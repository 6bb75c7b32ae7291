"""The NKI surface: ``nl`` / ``nisa`` / ``nki.compiler`` on the core, both front ends (``neuronxcc.nki`` 0.1 and the
standalone ``nki`` package) as facades bound against the documented signatures, and the kernel loader."""
