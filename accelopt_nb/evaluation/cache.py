"""On-disk cache of evaluation results, so duplicate kernels are never evaluated twice.

The key (:meth:`EvalJob.cache_key`) hashes the kernel source, the problem (its name, or the hash
of its task file), the preset, backend, hardware, the evaluator version, a hash of the simulator's and
the performance model's files (so a refit never serves old profiles) and the options that can
change a verdict. One JSON file per key; writes are atomic, so concurrent workers are safe.
Timeouts, memory exhaustion and crashes depend on the machine's load, so they are not cached.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from accelopt_nb.evaluation.job import EvalJob
from accelopt_nb.evaluation.result import TRANSIENT_STATUSES, EvalResult

CACHE_ENV = "ACCELOPT_CACHE_DIR"


def default_cache_dir() -> Path:
    """``$ACCELOPT_CACHE_DIR/eval``, else ``./.accelopt_cache/eval``."""
    root = os.environ.get(CACHE_ENV)
    return (Path(root) if root else Path.cwd() / ".accelopt_cache") / "eval"


class EvalCache:
    """A directory of cached :class:`EvalResult` JSON files."""

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root) if root is not None else default_cache_dir()

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, job: EvalJob) -> EvalResult | None:
        path = self._path(job.cache_key())
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        try:
            result = EvalResult.from_dict(data)
        except (KeyError, TypeError, ValueError):
            return None  # written by an incompatible version: treat as a miss
        result.cached = True
        result.label = job.label
        return result

    def put(self, job: EvalJob, result: EvalResult) -> bool:
        """Store a result; returns False for results that are not worth caching."""
        if result.status in TRANSIENT_STATUSES:
            return False
        path = self._path(job.cache_key())
        path.parent.mkdir(parents=True, exist_ok=True)
        data = result.to_dict()
        data["cached"] = False
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
        os.replace(tmp, path)
        return True

    def clear(self) -> int:
        n = 0
        for p in self.root.glob("*/*.json"):
            p.unlink(missing_ok=True)
            n += 1
        return n


def open_cache(cache: "bool | str | Path | EvalCache | None") -> EvalCache | None:
    """The cache a ``cache=`` argument names: True (the default directory), False/None (none), a
    directory, or an :class:`EvalCache`."""
    if cache is None or cache is False:
        return None
    if cache is True:
        return EvalCache()
    if isinstance(cache, EvalCache):
        return cache
    return EvalCache(cache)
