"""Reference NKI kernels written for this project (tutorial-style progressions), shipped as files.

They are kernel *files* for :func:`accelopt_nb.sim.load_kernel` (they import ``neuronxcc.nki``, or
``nki`` for the ``*_nki.py`` files in today's style, which only the simulator provides), not modules
to import:

* ``matmul_tutorial.py`` -- the NKI matmul tutorial's steps: tiled, hoisted, blocked free dims, blocked M/N/K;
* ``mamba_tutorial.py`` -- the NKI Mamba tutorial's human-expert steps v1, v2, v3;
* ``silu_fused.py`` -- SiLU as one fused ScalarE activation per tile on wide tiles (notebook 04's SiLU
  comparison, notebook 05's reference kernel);
* ``silu_staged_256.py`` -- a SiLU that stages two row blocks on 256 partitions, past the 128-partition limit
  (line 11): the kernel error an MCP client gets back (``scripts/mcp_transcript.py``, ``tests/test_mcp_server.py``);
* the teaching course's demonstrations (notebooks 01-08), each file one concept, the ``*_nki.py`` file
  beside it the same kernels in today's standalone ``nki`` style: ``basics.py`` / ``basics_nki.py`` (a
  first kernel), ``dma.py`` (DMA transfer size), ``tensor_engine.py`` / ``tensor_engine_nki.py``
  (stationary/moving operands, transposes, fp32 vs bf16), ``loops.py`` / ``loops_nki.py`` (loop kinds,
  double buffering), ``engines.py`` / ``engines_nki.py`` (engine balance), ``fusion.py`` /
  ``fusion_nki.py`` (GELU spelled out and as one activation), ``spills.py`` / ``spills_nki.py`` (SBUF
  capacity), ``order.py`` (program order, a limit of the performance model).

The performance-fidelity benchmark, the human-experts reproduction and the teaching notebooks use them.
"""
from __future__ import annotations

from pathlib import Path

KERNELS_DIR = Path(__file__).resolve().parent


def kernel_path(name: str) -> Path:
    """The path of a shipped kernel file, e.g. ``kernel_path("matmul_tutorial")``."""
    path = KERNELS_DIR / f"{name.removesuffix('.py')}.py"
    if not path.is_file():
        from accelopt_nb.errors import ConfigError
        shipped = sorted(p.stem for p in KERNELS_DIR.glob("*.py") if not p.stem.startswith("_"))
        raise ConfigError(f"no shipped kernel {name!r}; shipped: {', '.join(shipped)}")
    return path
