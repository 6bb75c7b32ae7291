"""Row builders for the run store: stable ids and JSON encoding, no database access.

Ids are derived from content unless the caller supplies one, so the same kernel, plan or
memory item written twice maps to the same row (an idempotent write).
"""
from __future__ import annotations

import hashlib
import json
import math
from datetime import datetime, timezone
from typing import Any, Mapping

from accelopt_nb.errors import StoreError

__all__ = ["now_iso", "sha256_text", "to_json", "kernel_row", "plan_row", "evaluation_row",
           "memory_item_row", "problem_row", "llm_call_row"]


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _derived_id(prefix: str, *parts: Any) -> str:
    material = "\x00".join("" if p is None else str(p) for p in parts)
    return f"{prefix}-{sha256_text(material)[:16]}"


def to_json(value: Any) -> str | None:
    """Canonical JSON (sorted keys) so an identical rewrite compares equal.

    Python's Infinity/NaN extension is allowed: kernel results legitimately hold inf.
    """
    if value is None:
        return None
    try:
        return json.dumps(value, sort_keys=True, ensure_ascii=False, default=_default)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"value cannot be stored as JSON: {exc}") from exc


def _default(obj: Any) -> Any:
    # numpy scalars and arrays, paths, dataclasses end up here.
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if hasattr(obj, "__dataclass_fields__"):
        return {k: getattr(obj, k) for k in obj.__dataclass_fields__}
    return str(obj)


def _real(value: float | None) -> float | None:
    """A float column; NaN is stored as NULL (SQLite would do so anyway), inf is kept."""
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) else value


def _require(value: Any, name: str) -> None:
    if value is None or value == "":
        raise StoreError(f"{name} is required")


def problem_row(run_id: str, problem_id: str, spec: Mapping[str, Any] | None) -> dict[str, Any]:
    _require(problem_id, "problem_id")
    return {"run_id": run_id, "problem_id": problem_id, "spec_json": to_json(dict(spec or {})),
            "created_at": now_iso()}


def kernel_row(run_id: str, *, problem_id: str, source: str, iteration: int,
               parent_id: str | None = None, plan_id: str | None = None, origin: str | None = None,
               data: Mapping[str, Any] | None = None, kernel_id: str | None = None) -> dict[str, Any]:
    _require(problem_id, "problem_id")
    if not isinstance(source, str) or not source.strip():
        raise StoreError("kernel source must be non-empty text")
    digest = sha256_text(source)
    kid = kernel_id or _derived_id("k", problem_id, iteration, plan_id, parent_id, digest)
    return {"run_id": run_id, "kernel_id": kid, "problem_id": problem_id, "iteration": int(iteration),
            "sha256": digest, "source": source, "parent_id": parent_id, "plan_id": plan_id,
            "origin": origin, "data_json": to_json(data), "created_at": now_iso()}


def plan_row(run_id: str, *, problem_id: str, iteration: int, text: str,
             parent_kernel_id: str | None = None, data: Mapping[str, Any] | None = None,
             plan_id: str | None = None) -> dict[str, Any]:
    _require(problem_id, "problem_id")
    pid = plan_id or _derived_id("p", problem_id, iteration, parent_kernel_id, sha256_text(text))
    return {"run_id": run_id, "plan_id": pid, "problem_id": problem_id, "iteration": int(iteration),
            "parent_kernel_id": parent_kernel_id, "text": text, "data_json": to_json(data),
            "created_at": now_iso()}


def evaluation_row(run_id: str, *, kernel_id: str, backend: str, status: str,
                   sha256: str | None = None, correct: bool | None = None,
                   latency_us: float | None = None, pct_peak: float | None = None,
                   result: Mapping[str, Any] | None = None, attempt: int = 0,
                   eval_id: str | None = None, hw: str | None = None,
                   fidelity: str | None = None) -> dict[str, Any]:
    """An evaluation row; ``hw`` and ``fidelity`` default to the result's own."""
    _require(kernel_id, "kernel_id")
    _require(backend, "backend")
    _require(status, "status")
    result_map = result if isinstance(result, Mapping) else {}
    return {"run_id": run_id, "eval_id": eval_id or f"{kernel_id}:{backend}:{int(attempt)}",
            "kernel_id": kernel_id, "sha256": sha256, "backend": backend, "attempt": int(attempt),
            "status": status, "correct": None if correct is None else int(bool(correct)),
            "latency_us": _real(latency_us), "pct_peak": _real(pct_peak),
            "result_json": to_json(result), "created_at": now_iso(),
            "hw": hw or result_map.get("hw"), "fidelity": fidelity or result_map.get("fidelity")}


def memory_item_row(run_id: str, *, problem_id: str, iteration: int, summary: str,
                    slow_kernel_id: str | None = None, fast_kernel_id: str | None = None,
                    speedup: float | None = None, data: Mapping[str, Any] | None = None,
                    item_id: str | None = None) -> dict[str, Any]:
    _require(problem_id, "problem_id")
    iid = item_id or _derived_id("m", problem_id, iteration, slow_kernel_id, fast_kernel_id,
                                 sha256_text(summary))
    return {"run_id": run_id, "item_id": iid, "problem_id": problem_id, "iteration": int(iteration),
            "slow_kernel_id": slow_kernel_id, "fast_kernel_id": fast_kernel_id,
            "speedup": _real(speedup), "summary": summary, "data_json": to_json(data),
            "created_at": now_iso()}


_LLM_DEFAULTS = {"prompt_tokens": 0, "completion_tokens": 0, "reasoning_tokens": 0, "cached_tokens": 0,
                 "attempts": 0, "transport_failures": 0, "unusable_outputs": 0, "replayed": False}


def llm_call_row(row: Mapping[str, Any], columns: tuple[str, ...]) -> dict[str, Any]:
    """A ledger row (``LLMCallRecord.to_row()``) shaped for the ``llm_calls`` table."""
    unknown = set(row) - set(columns)
    if unknown:
        raise StoreError(f"unknown llm_calls column(s): {sorted(unknown)}")
    out = {c: row.get(c, _LLM_DEFAULTS.get(c)) for c in columns}
    for required in ("call_id", "role", "model", "status"):
        _require(out[required], required)
    out["replayed"] = int(bool(out["replayed"]))
    return out
