"""The sandbox worker: ``python -m accelopt_nb.evaluation.worker JOB.json RESULT.json``.

It limits its own resources first, then imports and calls the job's target function, and always
tries to leave a RESULT.json behind: ``{"kind": "ok", "value": ...}``, ``{"kind": "error", ...}``
or ``{"kind": "out_of_memory", ...}``. If it dies before that (a signal, a hard crash), the parent
sees no result and reports a crash.

``python -m accelopt_nb.evaluation.worker --serve`` is the warm variant (:mod:`.pool`): it imports
the evaluation stack once, then answers one request per line on stdin with one result line, in
the same shapes, on the stream that was its stdout (its own fd 1 then points at stderr, so nothing
printed can corrupt the protocol).
"""
from __future__ import annotations

import json
import os
import resource
import sys
import traceback

MIB = 1024 * 1024
# The descriptor a warm worker answers on (``serve``); a forked runner closes its copy.
PROTOCOL_FD: int | None = None


def _limit_resources(memory_mb: int | None, file_size_mb: int | None) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    _lower_soft_limit(resource.RLIMIT_AS, memory_mb)
    _lower_soft_limit(resource.RLIMIT_FSIZE, file_size_mb)


def _lower_soft_limit(kind: int, mb: int | None) -> None:
    """Set the soft limit to ``mb`` MiB (never above the hard limit, which stays); nothing for None or 0."""
    if not mb:
        return
    limit = int(mb) * MIB
    _, hard = resource.getrlimit(kind)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(kind, (limit, hard))


def is_memory_error(exc: BaseException) -> bool:
    """MemoryError anywhere in the cause chain (a simulator may wrap it in a kernel error)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, MemoryError):
            return True
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return False


def _write(path: str, data: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def _call(target: str, payload: object) -> dict:
    try:
        module_name, func_name = target.split(":")
        module = __import__(module_name, fromlist=[func_name])
        return {"kind": "ok", "value": getattr(module, func_name)(payload)}
    except BaseException as exc:  # noqa: BLE001 - the whole point is to report anything
        if isinstance(exc, KeyboardInterrupt):
            raise
        kind = "out_of_memory" if is_memory_error(exc) else "error"
        error = {"type": type(exc).__name__, "message": str(exc)[:4000],
                 "traceback": "".join(traceback.format_exception(type(exc), exc,
                                                                 exc.__traceback__))[-8000:]}
        del exc  # drop frames (and any large arrays they hold) before writing the result
        return {"kind": kind, "error": error}


def serve(preload: list[str]) -> int:
    """The warm worker loop: preload, then one request line in, one result line out."""
    global PROTOCOL_FD
    proto = os.fdopen(os.dup(1), "w")
    PROTOCOL_FD = proto.fileno()
    os.dup2(2, 1)
    _limit_resources(None, None)
    for name in preload:
        __import__(name)
    # Move everything imported so far out of the collector's reach: a forked runner's collections
    # then never touch (and copy-on-write duplicate) the parent's pages.
    import gc
    gc.collect()
    gc.freeze()
    proto.write(json.dumps({"kind": "ready", "pid": os.getpid()}) + "\n")
    proto.flush()
    for line in sys.stdin:
        request = json.loads(line)
        proto.write(json.dumps(_call(request["target"], request["payload"])) + "\n")
        proto.flush()
    return 0


def main(argv: list[str]) -> int:
    if len(argv) > 1 and argv[1] == "--serve":
        return serve(argv[2:])
    job_path, result_path = argv[1], argv[2]
    with open(job_path) as f:
        job = json.load(f)
    _limit_resources(job.get("memory_mb"), job.get("file_size_mb"))
    result = _call(job["target"], job["payload"])
    _write(result_path, result)
    return 0 if result["kind"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
