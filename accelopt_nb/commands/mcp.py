"""`accelopt mcp`: NKIBench as an environment for coding agents, over the Model Context Protocol.

::

    accelopt mcp --run-dir runs/agent                      # stdio: what a coding agent launches
    accelopt mcp --transport http --port 8765              # streamable HTTP on 127.0.0.1:8765/mcp
    accelopt mcp --store postgresql://me@db/kernels        # a team's shared kernel database
    accelopt mcp --skill                                   # the AccelOpt workflow for an agent
    accelopt mcp --client-config claude                    # the config snippet for a client
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from accelopt_nb.evaluation.backends import backend_names
from accelopt_nb.perf.hardware import presets as hardware_names
from accelopt_nb.renamed import add_renamed
from nkibench.problem import PRESETS

NAME = "mcp"
HELP = ("serve NKIBench to coding agents over MCP: problems, simulate/profile/evaluate, the NKI API "
        "reference and the kernel database")

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run-dir", type=Path, default=Path("runs/mcp"),
                   help="where the session writes (the SQLite store, the result cache, kernel copies); "
                        "default runs/mcp")
    p.add_argument("--store", metavar="PATH_OR_URL",
                   help="the run store: a .sqlite file or directory, or postgresql://user@host/db for a "
                        "team's shared database (default: <run-dir>/accelopt.sqlite)")
    p.add_argument("--session", help="session name (default: generated); reuse one to continue its runs")
    p.add_argument("--author", help="who is working: recorded with every kernel and lesson")
    p.add_argument("--hw", choices=hardware_names(), default="trn1", help="default hardware model")
    p.add_argument("--backend", choices=backend_names(), default="simulator",
                   help="where kernels run: the CPU simulator (default) or real Trainium")
    p.add_argument("--shapes", choices=PRESETS, default="small", help="default shape preset")
    add_renamed(p, "--preset", "--shapes", dest="shapes", choices=PRESETS)
    p.add_argument("--max-source-kb", type=int, default=200, help="largest kernel source accepted, KiB")
    p.add_argument("--transport", choices=["stdio", "http"], default="stdio",
                   help="stdio (default: the client starts the server) or streamable HTTP")
    p.add_argument("--host", default="127.0.0.1", help="HTTP: loopback address to listen on")
    p.add_argument("--port", type=int, default=8765, help="HTTP: port (default 8765); the endpoint is /mcp")
    p.add_argument("--skill", action="store_true", help="print the skill file for coding agents and exit")
    p.add_argument("--client-config", choices=["claude", "cursor", "codex"],
                   help="print the MCP client configuration that starts this server, and exit")


def client_config(client: str, args: argparse.Namespace) -> str:
    """The snippet a client needs to start this server with the same options (absolute paths)."""
    script = Path(sys.executable).parent / "accelopt"   # this environment's console script
    if script.is_file():
        exe, cmd_args = str(script), ["mcp"]
    elif shutil.which("accelopt"):
        exe, cmd_args = str(shutil.which("accelopt")), ["mcp"]
    else:
        exe, cmd_args = sys.executable, ["-m", "accelopt_nb.cli", "mcp"]
    cmd_args += ["--run-dir", str(args.run_dir.resolve())]
    for flag, value in (("--store", args.store), ("--session", args.session), ("--author", args.author)):
        if value:
            cmd_args += [flag, value]
    for flag, value, default in (("--hw", args.hw, "trn1"), ("--backend", args.backend, "simulator"),
                                 ("--shapes", args.shapes, "small")):
        if value != default:
            cmd_args += [flag, value]
    if client == "codex":  # ~/.codex/config.toml
        quoted = ", ".join(json.dumps(a) for a in cmd_args)
        return f"[mcp_servers.accelopt]\ncommand = {json.dumps(exe)}\nargs = [{quoted}]\n"
    # Claude Code (.mcp.json in the project) and Cursor (.cursor/mcp.json) share this shape.
    return json.dumps({"mcpServers": {"accelopt": {"command": exe, "args": cmd_args}}}, indent=2) + "\n"


def run(args: argparse.Namespace) -> int:
    from accelopt_nb.errors import ConfigError

    if args.skill:
        from accelopt_nb.mcp import skill_text
        sys.stdout.write(skill_text())
        return 0
    if args.client_config:
        sys.stdout.write(client_config(args.client_config, args))
        return 0
    if args.transport == "http" and args.host not in LOOPBACK:
        raise ConfigError(f"--host {args.host}: the server has no authentication, so it listens on loopback "
                          f"only ({', '.join(LOOPBACK)}); reach it from elsewhere through an SSH tunnel")
    if args.max_source_kb < 1:
        raise ConfigError("--max-source-kb must be at least 1")
    try:
        from accelopt_nb.mcp.server import serve
    except ImportError as exc:
        raise ConfigError(f"the MCP server needs the mcp package: pip install 'accelopt_nb[mcp]' ({exc})") from None
    import os

    from accelopt_nb.mcp import Environment, Limits

    run_dir = args.run_dir.resolve()
    # The judge's caches live in the run directory too: the session writes nowhere else.
    os.environ["ACCELOPT_CACHE_DIR"] = str(run_dir / ".accelopt_cache")
    env = Environment(run_dir, store=args.store, session=args.session, hw=args.hw, backend=args.backend,
                      shapes=args.shapes, author=args.author,
                      limits=Limits(max_source_bytes=args.max_source_kb * 1024))
    print(f"accelopt mcp: session {env.session}, run dir {run_dir}, store {env.store.location}"
          + (f", http://{args.host}:{args.port}/mcp" if args.transport == "http" else ", stdio"),
          file=sys.stderr)
    try:
        serve(env, args.transport, host=args.host, port=args.port)
    finally:
        env.close()
    return 0
