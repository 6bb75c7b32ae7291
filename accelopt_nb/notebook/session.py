"""Opening a session from ``%accelopt open``: the options become a :class:`LaunchSpec`.

``open_session`` checks the endpoint first (a dead one raises ``EndpointUnreachableError`` in
seconds, with the reason); a cassette in replay mode needs no endpoint.
"""
from __future__ import annotations

import argparse
from typing import Any


def open_for_notebook(args: argparse.Namespace, progress: Any = None) -> Any:
    """A session from ``%accelopt open``'s options (see the magic's help)."""
    from accelopt_nb.search.launch import LaunchSpec, open_session
    from accelopt_nb.store.backends import is_database_url

    model = {"base_url": args.base_url, "model": args.model, "model_preset": args.model_preset,
             "api_key_env": args.api_key_env, "price": args.price, "seed": args.seed, "extra_body": args.extra_body}
    overrides = {"evaluation.shape_preset": args.shapes} if args.shapes else {}
    if args.seed is not None:
        overrides["seed"] = args.seed
    resume = "new"
    if args.resume:   # a database holds everyone's runs: --resume there names one, never starts a new run
        resume = "resume" if args.store is not None and is_database_url(args.store) else "auto"
    return open_session(LaunchSpec(args.problem, run_dir=args.run_dir, store=args.store, model=model,
                                   preset=args.preset, overrides=overrides, run_id=args.run_id,
                                   resume=resume, cap_usd=args.cap_usd,
                                   cassette=args.cassette, cassette_mode=args.cassette_mode,
                                   check_endpoint=not args.skip_check, progress=progress,
                                   allow_model_change=args.allow_model_change))


__all__ = ["open_for_notebook"]
