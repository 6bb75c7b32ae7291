"""`accelopt` command line: a thin layer over the Python API.

Each subcommand lives in its own module under :mod:`accelopt_nb.commands` and defines
``NAME``, ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``. The CLI discovers
them, so adding a command never touches this file.
"""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
import warnings
from typing import Sequence

from accelopt_nb import commands as _commands_pkg
from accelopt_nb.commands import stdout_for_json_only
from accelopt_nb.errors import AccelOptError


def _command_modules():
    for info in sorted(pkgutil.iter_modules(_commands_pkg.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        yield importlib.import_module(f"{_commands_pkg.__name__}.{info.name}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="accelopt",
        description="LLM-driven optimization of Trainium NKI kernels, on a CPU simulator or real hardware.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for mod in _command_modules():
        p = sub.add_parser(mod.NAME, help=mod.HELP.replace("%", "%%"), description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    with warnings.catch_warnings(record=True) as renamed:   # an old option spelling: one line, not a traceback
        warnings.simplefilter("always", FutureWarning)
        args = parser.parse_args(argv)
    for w in renamed:
        print(f"accelopt {args.command}: warning: {w.message}", file=sys.stderr)
    try:
        # with --json, stdout carries the JSON only: a kernel's own prints go to stderr
        with stdout_for_json_only(bool(getattr(args, "json", False))):
            return int(args._run(args) or 0)
    except AccelOptError as exc:
        print(f"accelopt {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"accelopt {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
