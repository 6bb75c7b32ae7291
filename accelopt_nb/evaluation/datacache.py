"""A shared, memory-mapped cache of the inputs and references of each input set.

Computing a problem's inputs and its float64 reference is most of an evaluation at paper shapes
(matmul: about 60%), and identical for every candidate. Each input set, keyed by (task hash, shape
preset, seed or adversarial index, NumPy version), is computed once by whichever judge needs it
first and written as ``.npy`` files: ``nki_<i>.npy`` (the kernel's inputs, NKI layout) and
``ref_<i>.npy`` (the reference outputs). Every judge then maps them read-only (``np.load(...,
mmap_mode="r")``), so all workers share one copy in the page cache, across batches and runs; the
runner maps the inputs copy-on-write, so a kernel that writes its inputs changes nothing shared.

Entries appear atomically (written to a temporary directory, then renamed), so concurrent judges
never see half an entry; two computing the same entry at once is harmless. An entry larger than
``max_entry_mb`` (bmm at paper shape: 2 GiB of references) is kept in the job's own directory
and dropped with it.

Next to the inputs (``<cache root>/profiles``), :class:`ProfileCache` keeps the performance model's
profile of each trace-only instruction stream by its fingerprint, so candidates that differ only in
text the stream does not see (constants, names, comments) are estimated once.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from accelopt_nb.taskfile import TaskModule

INPUT_CACHE_ENV = "ACCELOPT_CACHE_DIR"
MAX_ENTRY_MB = 1024


def default_input_cache_dir() -> Path:
    """``$ACCELOPT_CACHE_DIR/inputs``, else ``./.accelopt_cache/inputs`` (next to the result cache)."""
    root = os.environ.get(INPUT_CACHE_ENV)
    return (Path(root) if root else Path.cwd() / ".accelopt_cache") / "inputs"


@dataclass
class InputSet:
    """One input set on disk: the kernel's inputs and the reference, mapped read-only."""

    directory: Path
    n_inputs: int
    reference: Any                         # what task.forward returned (array or tuple of arrays)
    input_dtypes: list[str]


class InputCache:
    """Input sets under ``root`` (None: not shared, every entry lives under the job's directory)."""

    def __init__(self, root: str | Path | None, *, max_entry_mb: int = MAX_ENTRY_MB) -> None:
        self.root = Path(root) if root is not None else None
        self.max_entry_bytes = max_entry_mb * 1024 * 1024

    def count(self, task_key: str, kind: str, compute: Callable[[], int]) -> int:
        """How many input sets of ``kind`` the task has (remembered like the sets themselves)."""
        name = hashlib.sha256(f"{task_key}|{kind}|count|numpy {np.__version__}".encode()).hexdigest()
        if self.root is None:
            return compute()
        path = self.root / name[:2] / f"{name}.count"
        try:
            return int(path.read_text())
        except (OSError, ValueError):
            n = compute()
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                f.write(str(n))
            os.replace(tmp, path)
            return n

    def get(self, task: TaskModule, task_key: str, kind: str, index: int, scratch: Path,
            compute: Callable[[], tuple[list[np.ndarray], Any]]) -> InputSet:
        """The input set ``kind`` ("seed"/"adversarial"; "profile": inputs only, reference None)
        ``index`` of the task, from the cache or from ``compute()`` -> (NKI inputs, reference)."""
        name = hashlib.sha256(f"{task_key}|{kind}|{index}|numpy {np.__version__}".encode()).hexdigest()
        final = self.root / name[:2] / name if self.root is not None else None
        if final is not None and (final / "meta.json").is_file():
            try:
                return _open(final)
            except (OSError, ValueError, KeyError):
                shutil.rmtree(final, ignore_errors=True)   # damaged: compute it again
        nki, ref = compute()
        size = sum(np.asarray(a).nbytes for a in [*nki, *_as_tuple(ref)])
        if final is None or size > self.max_entry_bytes:
            local = Path(scratch) / f"inputs-{kind}-{index}"
            if not (local / "meta.json").is_file():
                _write(local, nki, ref)
            return _open(local)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=final.parent))
        try:
            _write(tmp, nki, ref)
            try:
                os.rename(tmp, final)
            except OSError:       # another judge won the race: use its entry
                pass
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return _open(final)


def _as_tuple(ref: Any) -> tuple:
    return tuple(ref) if isinstance(ref, (tuple, list)) else (ref,)


def _write(directory: Path, nki: list[Any], ref: Any) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for i, a in enumerate(nki):
        np.save(directory / f"nki_{i}.npy", np.asarray(a), allow_pickle=False)
    refs = () if ref is None else _as_tuple(ref)
    for i, r in enumerate(refs):
        np.save(directory / f"ref_{i}.npy", np.asarray(r), allow_pickle=False)
    meta = {"n_inputs": len(nki), "n_ref": len(refs),
            "ref_kind": "none" if ref is None else "tuple" if isinstance(ref, tuple) else "list"
            if isinstance(ref, list) else "single"}
    (directory / "meta.json").write_text(json.dumps(meta))   # written last: marks it complete


def _open(directory: Path) -> InputSet:
    meta = json.loads((directory / "meta.json").read_text())
    refs = [np.load(directory / f"ref_{i}.npy", mmap_mode="r", allow_pickle=False)
            for i in range(int(meta["n_ref"]))]
    kind = meta["ref_kind"]
    ref: Any = (None if kind == "none" else tuple(refs) if kind == "tuple" else refs if kind == "list"
                else refs[0])
    dtypes = [str(np.load(directory / f"nki_{i}.npy", mmap_mode="r", allow_pickle=False).dtype)
              for i in range(int(meta["n_inputs"]))]
    return InputSet(directory=directory, n_inputs=int(meta["n_inputs"]), reference=ref,
                    input_dtypes=dtypes)


class ProfileCache:
    """Profiles of instruction streams by fingerprint (``backends.simulator.trace_fingerprint``), so a
    kernel whose trace-only stream another kernel already had skips the performance model: the same
    stream gets the same profile. Keyed by fingerprint, hardware, the evaluator's version and the
    model's own fingerprint (a refit never serves old profiles). On disk under ``root`` (shared by the
    judges of a machine, written atomically), and in this process (a warm worker keeps the last ones)."""

    MEMORY_ENTRIES = 256
    _memory: "dict[str, dict[str, Any]]" = {}
    _lock = threading.Lock()

    def __init__(self, root: str | Path | None) -> None:
        self.root = Path(root) if root is not None else None

    @classmethod
    def beside(cls, input_cache: str | Path | None) -> "ProfileCache":
        """The cache next to an input cache (``<cache root>/inputs`` -> ``<cache root>/profiles``);
        in this process only when inputs are not shared either."""
        return cls(Path(input_cache).parent / "profiles" if input_cache is not None else None)

    @staticmethod
    def key(fingerprint: str, hw: str) -> str:
        from accelopt_nb.evaluation.job import EVALUATOR_VERSION, model_fingerprint
        return hashlib.sha256(f"{fingerprint}|{hw}|{EVALUATOR_VERSION}|{model_fingerprint()}".encode()).hexdigest()

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            kept = self._memory.get(key)
        if kept is not None:
            return dict(kept)
        if self.root is None:
            return None
        try:
            profile = json.loads((self.root / key[:2] / f"{key}.json").read_text())
        except (OSError, ValueError):
            return None
        self._remember(key, profile)
        return dict(profile)

    def put(self, key: str, profile: dict[str, Any]) -> None:
        self._remember(key, profile)
        if self.root is None:
            return
        path = self.root / key[:2] / f"{key}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(profile, f)
        os.replace(tmp, path)

    @classmethod
    def forget(cls) -> None:
        """Drop this process's copies (the disk keeps its own)."""
        with cls._lock:
            cls._memory.clear()

    def _remember(self, key: str, profile: dict[str, Any]) -> None:
        with self._lock:
            if key not in self._memory and len(self._memory) >= self.MEMORY_ENTRIES:
                self._memory.pop(next(iter(self._memory)))
            self._memory[key] = dict(profile)
