"""Renamed options and config keys: the old spelling works for one more release, with a warning.

One meaning per option name: ``--preset`` is the search preset, ``--shapes`` the problem's shape preset
(``small`` or ``paper``), ``--model-preset`` the LLM preset. The spellings they replace (``--preset`` for
shapes or models, ``--shape-preset``, a papermill config's top-level ``preset``) still parse, warn with
a :class:`FutureWarning` that names the new spelling, and go in the release after :data:`REMOVED_IN`'s.
"""
from __future__ import annotations

import argparse
import warnings
from typing import Any, Sequence

REMOVED_IN = "0.2.0"


def warn_renamed(old: str, new: str, *, where: str = "") -> None:
    """Warn that ``old`` (an option or key) is now spelled ``new``."""
    at = f" in {where}" if where else ""
    warnings.warn(f"{old}{at} is renamed {new}; the old spelling stops working in accelopt_nb {REMOVED_IN}",
                  FutureWarning, stacklevel=3)


class _RenamedStore(argparse.Action):
    """Stores into the new option's ``dest`` and warns that the old spelling was used."""

    def __init__(self, option_strings: Sequence[str], dest: str, *, new: str, **kwargs: Any) -> None:
        self.new = new
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        warn_renamed(option_string or self.option_strings[0], self.new, where=parser.prog)
        setattr(namespace, self.dest, values)


def add_renamed(parser: Any, old: str, new: str, *, dest: str, choices: Sequence[str] | None = None) -> None:
    """Accept ``old`` as a hidden alias of the option ``new`` (which must be added with ``dest``)."""
    parser.add_argument(old, dest=dest, action=_RenamedStore, new=new, choices=choices,
                        default=argparse.SUPPRESS, help=argparse.SUPPRESS)


__all__ = ["REMOVED_IN", "add_renamed", "warn_renamed"]
