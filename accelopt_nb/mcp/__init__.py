"""NKIBench as an environment for any agent: an MCP server and a skill for coding agents.

* :mod:`.environment` — the tools as plain Python (:class:`Environment`): problems, the judge
  (simulate, profile, evaluate), the NKI API reference and the run store (best kernels, lineage,
  memory), with validated inputs and structured errors;
* :mod:`.server` — those tools over the Model Context Protocol (stdio, streamable HTTP on loopback);
* :mod:`.apiref` — the reference of one ``nl`` / ``nisa`` call;
* ``skill.md`` — the AccelOpt workflow written for a coding agent that has these tools
  (``accelopt mcp --skill``).

The ``mcp`` SDK is optional (``pip install 'accelopt_nb[mcp]'``); only :mod:`.server` needs it.
"""
from __future__ import annotations

from importlib import resources

from accelopt_nb.mcp.environment import Environment, Limits, ToolFailure

__all__ = ["Environment", "Limits", "ToolFailure", "skill_text"]


def skill_text() -> str:
    """The skill file shipped with the package (``accelopt_nb/mcp/skill.md``)."""
    return (resources.files("accelopt_nb.mcp") / "skill.md").read_text(encoding="utf-8")
