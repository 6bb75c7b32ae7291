"""`accelopt reproduce`: run the paper-figure and teaching notebooks with papermill.

``--smoke`` runs every notebook at smoke size, fully offline (the package's fake model, labelled as such
in every figure title); ``--paper`` runs the paper-size configs against the endpoints they name. Writes
the executed notebooks, each figure as PNG + SVG + the CSV behind it, and ``index.md`` to ``--out``.
Exits non-zero naming each notebook and cell that failed.
"""
from __future__ import annotations

import argparse
import time

NAME = "reproduce"
HELP = "regenerate the paper's figures and run the teaching notebooks (papermill): --smoke offline, --paper"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from accelopt_nb.reproduce.runner import EXIT_HELP

    p.epilog = EXIT_HELP
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--smoke", dest="mode", action="store_const", const="smoke",
                      help="small, offline run with the fake model (the default when no CONFIG is given)")
    mode.add_argument("--paper", dest="mode", action="store_const", const="paper",
                      help="the paper's settings (needs the LLM endpoints the configs name)")
    p.add_argument("--out", default="reproduce_out", help="output directory (default reproduce_out); "
                   "run stores under OUT/runs are resumed by a second run")
    p.add_argument("--only", nargs="+", default=[], metavar="NAME",
                   help="run only these notebooks (e.g. nkibench_table cost nki_basics)")
    p.add_argument("--checkout", default=None, help="source checkout with notebooks/ and papermill_configs/ "
                   "(default: the one accelopt_nb is installed from)")
    p.add_argument("--unpriced-ok", action="store_true",
                   help="let cost experiments (configs with unpriced_ok) run models without a price; their "
                        "figures say 'unpriced' (without it such a model is refused before anything runs)")
    p.add_argument("--list", action="store_true", help="list the notebooks and exit")
    p.add_argument("configs", nargs="*", metavar="CONFIG",
                   help="papermill config files to run instead of the --smoke/--paper set")


def run(args: argparse.Namespace) -> int:
    import sys

    from accelopt_nb.reproduce.runner import (NOTEBOOKS, NotebookFailedError, allow_unpriced, exit_status,
                                              find_checkout, plan, reproduce)

    if args.list:
        for spec in NOTEBOOKS:
            modes = "/".join(spec.modes)
            print(f"{spec.name:24s} {spec.kind:13s} {modes:12s} {spec.file:32s} {spec.title}")
        return 0
    checkout = find_checkout(args.checkout)
    mode = args.mode or (None if args.configs else "smoke")
    jobs = plan(mode, only=args.only, configs=args.configs, checkout=checkout)
    if args.unpriced_ok:
        allow_unpriced(jobs)
    t0 = time.monotonic()
    try:
        outcomes = reproduce(jobs, args.out, checkout=checkout, mode=mode, log=lambda m: print(m, flush=True))
    except NotebookFailedError as exc:
        print(f"accelopt reproduce: error: {exc}", file=sys.stderr)
        outcomes = exc.outcomes
    figures = sum(len(o.figures) for o in outcomes)
    print(f"{len(outcomes)} notebook(s), {figures} figure(s) in {time.monotonic() - t0:.0f} s; index: {args.out}/index.md")
    status, why = exit_status(outcomes)
    if status:
        print(f"accelopt reproduce: exit status {status}: {why}", file=sys.stderr)
    return status
