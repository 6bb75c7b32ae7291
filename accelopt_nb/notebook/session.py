"""Opening a session from the notebook: the endpoint is checked first, as the CLI does.

A dead endpoint fails here, in seconds and with the reason, instead of in the first step after a
run of failed calls. A cassette in replay mode needs no endpoint.
"""
from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from accelopt_nb.errors import LLMError


class EndpointError(LLMError):
    """The LLM endpoint does not answer (checked before a session or an experiment starts)."""


def check_endpoint(model: Any) -> str:
    """Raise :class:`EndpointError` if ``GET /models`` fails; returns a warning (or "") otherwise."""
    from accelopt_nb.llm.check import preflight
    from accelopt_nb.llm.loop_thread import LoopThread

    loop = LoopThread(name="accelopt-preflight")  # Jupyter's own event loop is already running
    try:
        reachable, message = loop.run(preflight(model))
    finally:
        loop.close()
    if not reachable:
        raise EndpointError(message + " (start the server or fix --base-url; `accelopt llm check` diagnoses it)")
    return message


def open_for_notebook(args: argparse.Namespace, progress: Any = None) -> Any:
    """A session from ``%accelopt open``'s options (see the magic's help)."""
    from accelopt_nb.llm import Cassette
    from accelopt_nb.search.launch import model_config, open_session

    model = model_config(base_url=args.base_url, model=args.model, model_preset=args.model_preset,
                         api_key_env=args.api_key_env, price=args.price)
    replay = args.cassette is not None and args.cassette_mode == "replay"
    if not (args.skip_check or replay):
        warning = check_endpoint(model)
        if warning:
            print(warning)
    overrides = {"evaluation.shape_preset": args.shape_preset} if args.shape_preset else {}
    session = open_session(args.problem, args.run_dir or Path("runs") / args.problem, model=model,
                           preset=args.preset, overrides=overrides, run_id=args.run_id, resume=args.resume,
                           cap_usd=args.cap_usd, progress=progress)
    if args.cassette is not None:
        cassette = Cassette(args.cassette, args.cassette_mode)
        for client in {id(c): c for c in session._clients.values()}.values():
            client.cassette = cassette
    return session


__all__ = ["EndpointError", "check_endpoint", "open_for_notebook"]
