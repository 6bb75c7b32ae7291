"""NKIBench as an environment: the tools an agent calls, as plain Python (the MCP server is a thin
layer over this class, so the same environment serves tests, notebooks and other protocols).

One :class:`Environment` serves one *session* (one agent, or one person) in one run directory:

* problems come from the NKIBench registry; kernels are sent as source text and judged by the
  evaluation service (static check, sandboxed judge, fidelity levels, result cache);
* every kernel submitted for evaluation is recorded in the run store with its parent, the plan
  that produced it and its evaluations (per hardware and fidelity): one run per problem and shape
  preset, ``<session>-<problem>-<shape preset>``, whose root is the problem's baseline kernel;
* reads of the store (best kernels, lineage, memory) cover every run in it, so in a shared
  PostgreSQL store a session sees the whole team's kernels.

Every input is validated before anything runs. A bad input raises :class:`ToolFailure`, whose
``to_dict()`` is the structured error the client receives (``code``, ``message`` and details such
as the known problem names, or the kernel's file, line, API and rule). No tool takes a file path:
the environment writes only inside its run directory (the SQLite store, the result cache and a
copy of each submitted kernel), and only under names it makes itself.
"""
from __future__ import annotations

import math
import re
import threading
import uuid
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

from accelopt_nb.errors import AccelOptError, ConfigError, KernelError, ProblemError, StoreError

__all__ = ["Environment", "Limits", "ToolFailure", "PROFILE_FIELDS"]

# The neuron-profile summary fields an agent sees (the paper's planner fields), then the engine and
# DMA activity and the model's own diagnosis. Fractions are in [0, 1].
PROFILE_FIELDS = (
    "hbm_read_bytes", "hbm_write_bytes", "sbuf_read_bytes", "sbuf_write_bytes", "psum_read_bytes",
    "psum_write_bytes", "spill_save_bytes", "spill_reload_bytes", "hardware_flops", "transpose_flops",
    "peak_flops_bandwidth_ratio", "mm_arithmetic_intensity", "hfu_estimated_percent", "mbu_estimated_percent",
    "tensor_engine_active_time_percent", "vector_engine_active_time_percent", "scalar_engine_active_time_percent",
    "gpsimd_engine_active_time_percent", "dma_active_time_percent", "instruction_count", "bound", "bottleneck",
    "estimate_note", "uncertainty")
BASELINE_ID = "baseline"
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,99}$")
_FILENAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_\-]{0,63}\.py$")


@dataclass(frozen=True)
class Limits:
    """Input limits: an agent can send anything, the environment accepts only this much."""

    max_source_bytes: int = 200_000
    max_text_chars: int = 20_000        # a plan or a memory summary
    max_results: int = 100


class ToolFailure(AccelOptError):
    """A tool could not do what was asked; ``to_dict()`` is the structured error for the client."""

    def __init__(self, code: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = {k: v for k, v in details.items() if v is not None}

    def to_dict(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, **self.details}}


def _now_stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")


def _finite(x: Any) -> float | None:
    if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(float(x)):
        return float(x)
    return None


class Environment:
    """The NKIBench environment of one session (see the module docstring)."""

    def __init__(self, run_dir: str | Path, *, store: str | Path | None = None, session: str | None = None,
                 hw: str = "trn1", backend: str = "simulator", shapes: str = "small",
                 author: str | None = None, limits: Limits = Limits()) -> None:
        from accelopt_nb.evaluation.cache import EvalCache
        from accelopt_nb.evaluation.backends import backend_names
        from accelopt_nb.perf.hardware import presets as hardware_names
        from accelopt_nb.store import RunStore

        if hw not in hardware_names():
            raise ConfigError(f"unknown hardware {hw!r}; choose one of {', '.join(hardware_names())}")
        if backend not in backend_names():
            raise ConfigError(f"unknown backend {backend!r}; choose one of {', '.join(backend_names())}")
        if session is not None and not _NAME.match(session):
            raise ConfigError(f"session name {session!r}: use letters, digits, '_', '-', '.' (at most 100)")
        self.run_dir = Path(run_dir).resolve()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.store = RunStore(store if store is not None else self.run_dir)
        self.session = session or f"mcp-{_now_stamp()}-{uuid.uuid4().hex[:6]}"
        self.hw, self.backend, self.shapes = hw, backend, shapes
        self.author = author
        self.limits = limits
        self.cache = EvalCache(self.run_dir / ".accelopt_cache" / "eval")
        self._lock = threading.RLock()
        self._problems: dict[tuple[str, str], Any] = {}
        self._runs: dict[tuple[str, str], str] = {}

    def close(self) -> None:
        self.store.close()

    # ================================================================== validation
    def _text(self, value: Any, field: str, *, limit: int | None = None, allow_empty: bool = False) -> str:
        if not isinstance(value, str):
            raise ToolFailure("invalid_argument", f"{field} must be a string", field=field)
        if not allow_empty and not value.strip():
            raise ToolFailure("invalid_argument", f"{field} is empty", field=field)
        limit = limit or self.limits.max_text_chars
        if len(value) > limit:
            raise ToolFailure("too_large", f"{field} has {len(value)} characters; the limit is {limit}",
                              field=field, limit=limit)
        return value

    def _source(self, source: Any) -> str:
        if not isinstance(source, str):
            raise ToolFailure("invalid_argument", "source must be the kernel's Python source text", field="source")
        size = len(source.encode("utf-8"))
        if size > self.limits.max_source_bytes:
            raise ToolFailure("source_too_large", f"the kernel source is {size} bytes; the limit is "
                              f"{self.limits.max_source_bytes}", field="source", limit=self.limits.max_source_bytes)
        if not source.strip():
            raise ToolFailure("invalid_argument", "the kernel source is empty", field="source")
        return source

    def _filename(self, filename: Any) -> str:
        if not isinstance(filename, str) or not _FILENAME.match(filename):
            raise ToolFailure("invalid_argument", "filename is only a label for error messages: a bare name "
                              "like 'kernel.py' (letters, digits, '_' or '-', ending in .py, no directories)",
                              field="filename")
        return filename

    def _choice(self, value: Any, field: str, choices: tuple[str, ...], default: str) -> str:
        if value is None:
            return default
        if value not in choices:
            raise ToolFailure(f"unknown_{field}", f"unknown {field} {value!r}; choose one of {', '.join(choices)}",
                              field=field, choices=list(choices))
        return str(value)

    def _hw(self, hw: Any) -> str:
        from accelopt_nb.perf.hardware import presets as hardware_names
        return self._choice(hw, "hw", tuple(hardware_names()), self.hw)

    def _fidelity(self, fidelity: Any, default: str = "full") -> str:
        from accelopt_nb.evaluation.job import FIDELITIES
        return self._choice(fidelity, "fidelity", FIDELITIES, default)

    def _problem(self, name: Any):
        import nkibench

        known = nkibench.list_problems()
        if not isinstance(name, str) or name not in known:
            close = __import__("difflib").get_close_matches(str(name), known, n=3)
            raise ToolFailure("unknown_problem", f"unknown NKIBench problem {name!r}", field="problem",
                              did_you_mean=close or None, known=known)
        return nkibench.get_problem(name)

    def _preset(self, problem: Any, shapes: Any) -> str:
        preset = self.shapes if shapes is None else shapes
        if preset not in problem.presets:
            raise ToolFailure("unknown_shapes", f"problem {problem.name!r} has no shape preset {preset!r}",
                              field="shapes", choices=list(problem.presets))
        return str(preset)

    def _limit(self, limit: Any) -> int:
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= self.limits.max_results:
            raise ToolFailure("invalid_argument", f"limit must be an integer from 1 to {self.limits.max_results}",
                              field="limit")
        return limit

    def _search_problem(self, name: str, preset: str):
        from accelopt_nb.search.problem import SearchProblem

        key = (name, preset)
        with self._lock:
            if key not in self._problems:
                self._problems[key] = SearchProblem.from_nkibench(name, preset)
            return self._problems[key]

    # ================================================================== runs of this session
    def run_id(self, problem: str, preset: str) -> str:
        """This session's run for a problem and preset (created, with its baseline kernel, on first use)."""
        key = (problem, preset)
        with self._lock:
            if key in self._runs:
                return self._runs[key]
            sp = self._search_problem(problem, preset)
            run_id = f"{self.session}-{problem}-{preset}"
            config = {"source": "mcp", "session": self.session, "problem": problem, "shape_preset": preset,
                      "backend": self.backend, "author": self.author}
            try:
                self.store.create_run(run_id, config)
            except StoreError as exc:
                raise ToolFailure("store_error", str(exc)) from None
            self.store.add_problem(run_id, problem, sp.to_spec())
            self.store.add_kernel(run_id, kernel_id=BASELINE_ID, problem_id=problem, source=sp.baseline_source,
                                  iteration=-1, origin="baseline", data={"order": 0})
            self._runs[key] = run_id
            return run_id

    def _find_kernel(self, kernel_id: Any, problem: str | None, run_id: Any) -> dict[str, Any]:
        """A stored kernel by id: in ``run_id``; else in this session's runs (of ``problem``); else
        anywhere in the store, when the id is unique there."""
        if not isinstance(kernel_id, str) or not _NAME.match(kernel_id):
            raise ToolFailure("invalid_argument", "kernel_id must be a kernel id such as 'baseline' or "
                              "'k-0123abcd...'", field="kernel_id")
        if run_id is not None:
            if not isinstance(run_id, str) or not _NAME.match(run_id):
                raise ToolFailure("invalid_argument", "run_id is not a run id", field="run_id")
            rows = self.store.query(f"SELECT {_KERNEL_COLS} FROM kernels WHERE run_id=? AND kernel_id=?",
                                    (run_id, kernel_id))
        else:
            with self._lock:
                mine = [rid for (p, _), rid in self._runs.items() if problem is None or p == problem]
            rows = []
            for rid in mine:
                rows += self.store.query(f"SELECT {_KERNEL_COLS} FROM kernels WHERE run_id=? AND kernel_id=?",
                                         (rid, kernel_id))
            if not rows and kernel_id != BASELINE_ID:
                rows = self.store.query(f"SELECT {_KERNEL_COLS} FROM kernels WHERE kernel_id=?", (kernel_id,))
        if problem is not None:
            rows = [r for r in rows if r["problem_id"] == problem]
        if not rows:
            hint = ("the baseline of a problem exists once this session used it (show_problem, profile or "
                    "evaluate)" if kernel_id == BASELINE_ID else "ids come from evaluate, best_kernels or lineage")
            raise ToolFailure("unknown_kernel", f"no kernel {kernel_id!r}"
                              + (f" in run {run_id!r}" if run_id else "") + f"; {hint}", field="kernel_id")
        if len(rows) > 1:
            raise ToolFailure("ambiguous_kernel", f"kernel {kernel_id!r} is in several runs; pass run_id",
                              field="kernel_id", runs=[r["run_id"] for r in rows])
        return rows[0]

    def _latest_eval(self, run_id: str, kernel_id: str, hw: str) -> dict[str, Any] | None:
        rows = self.store.query("SELECT status, latency_us, pct_peak, fidelity, attempt FROM evaluations "
                                "WHERE run_id=? AND kernel_id=? AND hw=? ORDER BY attempt", (run_id, kernel_id, hw))
        return rows[-1] if rows else None

    def _correct_ms(self, run_id: str, kernel_id: str, hw: str) -> float | None:
        ev = self._latest_eval(run_id, kernel_id, hw)
        if ev is None or ev["status"] != "correct" or ev["latency_us"] is None:
            return None
        return _finite(float(ev["latency_us"]) / 1e3)

    # ================================================================== judging
    def _judge(self, problem: str, source: str, *, preset: str, hw: str, fidelity: str, filename: str,
               label: str, seeds: tuple[int, ...] | None = None, adversarial: bool = True):
        from accelopt_nb.evaluation import EvalOptions, evaluate

        options = EvalOptions(kernel_filename=filename, adversarial=adversarial,
                              **({"seeds": seeds} if seeds else {}))
        try:
            return evaluate(problem, source, backend=self.backend, hw=hw, preset=preset, options=options,
                            cache=self.cache, label=label, fidelity=fidelity)  # type: ignore[arg-type]
        except (ProblemError, ConfigError) as exc:
            raise ToolFailure("invalid_argument", str(exc)) from None
        except AccelOptError as exc:  # the evaluator's own failure (missing toolchain, ...), not the kernel's
            raise ToolFailure("evaluation_unavailable", f"{type(exc).__name__}: {exc}") from None

    def _verdict(self, result: Any, sp: Any, *, hw: str) -> dict[str, Any]:
        latency = _finite(result.latency_ms) if result.correct else None
        peak = sp.peak(hw)
        checks = []
        for c in result.checks:
            errs = [e for e in (_finite(x) for x in c.rel_errors) if e is not None]
            checks.append({"kind": c.kind, "index": c.index, "passed": c.passed,
                           "max_rel_error": max(errs) if errs else None, "reason": c.reason})
        profile = result.profile or {}
        return {
            "status": result.status.value, "correct": result.correct, "message": result.message,
            "error": result.error, "latency_ms": latency,
            "peak_ms": _finite(peak[0]) if peak else None, "peak_bound": peak[1] if peak else None,
            "pct_peak": sp.percent_of_peak(latency, hw) if latency else None,
            "tolerance": _finite(result.tolerance), "checks": checks,
            "profile": {k: profile[k] for k in PROFILE_FIELDS if k in profile} or None,
            "log": result.log[-20:], "fidelity": result.fidelity, "checked_preset": result.checked_preset,
            "cached": result.cached, "wall_time_s": round(result.wall_time_s, 3),
        }

    def _record(self, run_id: str, kernel_id: str, result: Any, verdict: Mapping[str, Any]) -> None:
        lat = verdict["latency_ms"]
        with self._lock:  # attempt numbers are per kernel: count and write under one lock
            attempt = len(self.store.query("SELECT eval_id FROM evaluations WHERE run_id=? AND kernel_id=?",
                                           (run_id, kernel_id)))
            for _ in range(8):  # another server on the same session name may have taken this attempt
                try:
                    self.store.add_evaluation(run_id, kernel_id=kernel_id, backend=result.backend,
                                              status=result.status.value, sha256=result.kernel_sha256,
                                              correct=result.correct, latency_us=None if lat is None else lat * 1e3,
                                              pct_peak=verdict["pct_peak"], result=result.to_dict(),
                                              attempt=attempt, hw=result.hw, fidelity=result.fidelity)
                    return
                except StoreError as exc:
                    if "conflicting write" not in str(exc):
                        raise
                    attempt += 1
            raise ToolFailure("store_error", f"could not record the evaluation of {kernel_id} in {run_id}")

    @staticmethod
    def _kernel_failure(verdict: dict[str, Any], **context: Any) -> ToolFailure | None:
        """A kernel that never ran (refused, did not build, crashed): the call failed, with the
        kernel's file, line, API and rule."""
        if verdict["status"] not in ("rejected", "build_failed", "crashed"):
            return None
        err = verdict.get("error") or {}
        return ToolFailure("kernel_error", verdict["message"], status=verdict["status"],
                           kernel_error={k: err.get(k) for k in ("type", "message", "file", "line", "api", "rule")},
                           verdict=verdict, **context)

    # ================================================================== tools: problems
    def list_problems(self) -> dict[str, Any]:
        import nkibench

        out = []
        for name in nkibench.list_problems():
            p = nkibench.get_problem(name)
            peaks = {}
            for preset in p.presets:
                try:
                    pk = p.peak(preset, self.hw)
                    peaks[preset] = {"ms": pk.ms, "bound": pk.bound}
                except AccelOptError:
                    continue
            out.append({"name": name, "summary": p.description.split(". ")[0].rstrip(".") + ".",
                        "shapes": {preset: p.shapes(preset) for preset in p.presets},
                        "tolerance": p.tolerance, "peak": {self.hw: peaks}})
        return {"problems": out, "hw": self.hw, "default_shapes": self.shapes}

    def show_problem(self, problem: Any, shapes: Any = None) -> dict[str, Any]:
        from accelopt_nb.agents.prompts import reference_for_agents

        p = self._problem(problem)
        preset = self._preset(p, shapes)
        sp = self._search_problem(p.name, preset)
        peaks = {}
        from accelopt_nb.perf.hardware import presets as hardware_names
        for hw in hardware_names():
            try:
                pk = p.peak(preset, hw)
            except AccelOptError:
                continue
            peaks[hw] = {"ms": pk.ms, "bound": pk.bound, "vec_flops": pk.vec_flops, "mm_flops": pk.mm_flops,
                         "hbm_bytes": pk.hbm_bytes}
        run_id = self.run_id(p.name, preset)
        return {
            "name": p.name, "description": p.description, "shape_preset": preset, "shape_presets": list(p.presets),
            "shapes": p.shapes(preset), "shape_docs": {s.name: s.doc for s in p.params},
            "inputs": p.inputs, "outputs": p.outputs, "layout": p.layout, "constraints": list(p.constraints),
            "tolerance": p.tolerance, "adversarial_inputs": bool(sp.adversarial), "peak": peaks,
            "reference_source": reference_for_agents(sp.reference_source),
            "baseline_source": sp.baseline_source, "baseline_kernel_id": BASELINE_ID, "run_id": run_id,
        }

    # ================================================================== tools: the judge
    def simulate(self, problem: Any, source: Any, shapes: Any = None, seed: Any = 42,
                 filename: Any = "kernel.py") -> dict[str, Any]:
        """One run of the kernel on one seed's inputs, checked against the reference (not recorded)."""
        p = self._problem(problem)
        preset = self._preset(p, shapes)
        source = self._source(source)
        filename = self._filename(filename)
        if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**31:
            raise ToolFailure("invalid_argument", "seed must be an integer in [0, 2**31)", field="seed")
        sp = self._search_problem(p.name, preset)
        result = self._judge(p.name, source, preset=preset, hw=self.hw, fidelity="full", filename=filename,
                             label=filename, seeds=(seed,), adversarial=False)
        verdict = self._verdict(result, sp, hw=self.hw)
        out = {"problem": p.name, "shape_preset": preset, "seed": seed, "status": verdict["status"],
               "correct_on_this_seed": verdict["status"] == "correct", "message": verdict["message"],
               "error": verdict["error"], "checks": verdict["checks"], "log": verdict["log"],
               "latency_ms": verdict["latency_ms"], "note": "one seed, no adversarial inputs, not recorded: "
               "use evaluate for the verdict that counts"}
        failure = self._kernel_failure(verdict, problem=p.name)
        if failure is not None:
            raise failure
        return out

    def profile(self, problem: Any, kernel_id: Any = BASELINE_ID, run_id: Any = None, shapes: Any = None,
                hw: Any = None, fidelity: Any = None, explain: Any = False) -> dict[str, Any]:
        """The neuron-profile fields, latency and % of peak of a stored kernel (the baseline by default)."""
        p = self._problem(problem)
        preset = self._preset(p, shapes)
        hw, fidelity = self._hw(hw), self._fidelity(fidelity)
        if run_id is None:
            self.run_id(p.name, preset)
        row = self._find_kernel(kernel_id, p.name, run_id)
        run = row["run_id"]
        sp = self._search_problem(p.name, preset)
        result = self._judge(p.name, row["source"], preset=preset, hw=hw, fidelity=fidelity,
                             filename=f"{row['kernel_id']}.py", label=row["kernel_id"])
        verdict = self._verdict(result, sp, hw=hw)
        if run in self._runs.values():
            self._record(run, row["kernel_id"], result, verdict)
        out = {"problem": p.name, "shape_preset": preset, "hw": hw, "run_id": run, "kernel_id": row["kernel_id"],
               **verdict}
        if explain:
            from accelopt_nb.agents.prompts import PROFILE_GLOSSARY
            out["glossary"] = {k: v for k, v in PROFILE_GLOSSARY.items() if k in (verdict["profile"] or {})}
        failure = self._kernel_failure(verdict, kernel_id=row["kernel_id"], run_id=run)
        if failure is not None:
            raise failure
        return out

    def evaluate(self, problem: Any, source: Any, parent_kernel_id: Any = BASELINE_ID, plan: Any = None,
                 shapes: Any = None, hw: Any = None, fidelity: Any = None,
                 filename: Any = "kernel.py") -> dict[str, Any]:
        """Judge a candidate kernel and record it (with its parent and plan) in this session's run."""
        p = self._problem(problem)
        preset = self._preset(p, shapes)
        hw, fidelity = self._hw(hw), self._fidelity(fidelity)
        source = self._source(source)
        filename = self._filename(filename)
        if plan is not None:
            plan = self._text(plan, "plan")
        run_id = self.run_id(p.name, preset)
        parent = self._find_kernel(parent_kernel_id, p.name, run_id)
        sp = self._search_problem(p.name, preset)
        iteration = int(parent["iteration"]) + 1
        plan_id = None
        if plan is not None:
            plan_id = self.store.add_plan(run_id, problem_id=p.name, iteration=iteration, text=plan,
                                          parent_kernel_id=parent["kernel_id"],
                                          data={"origin": "mcp", "author": self.author})
        kernel_id = self.store.add_kernel(run_id, problem_id=p.name, source=source, iteration=iteration,
                                          parent_id=parent["kernel_id"], plan_id=plan_id, origin="mcp",
                                          data={"author": self.author, "filename": filename})
        self._save_copy(run_id, kernel_id, source)
        result = self._judge(p.name, source, preset=preset, hw=hw, fidelity=fidelity, filename=filename,
                             label=kernel_id)
        verdict = self._verdict(result, sp, hw=hw)
        self._record(run_id, kernel_id, result, verdict)
        parent_ms = self._parent_latency(run_id, parent["kernel_id"], p.name, preset, hw)
        base_ms = parent_ms if parent["kernel_id"] == BASELINE_ID else self._correct_ms(run_id, BASELINE_ID, hw)
        lat = verdict["latency_ms"]
        out = {"problem": p.name, "shape_preset": preset, "hw": hw, "run_id": run_id, "kernel_id": kernel_id,
               "parent_kernel_id": parent["kernel_id"], "plan_id": plan_id, "iteration": iteration, **verdict,
               "parent_latency_ms": parent_ms,
               "speedup_over_parent": (parent_ms / lat) if (parent_ms and lat) else None,
               "speedup_over_baseline": (base_ms / lat) if (base_ms and lat) else None}
        failure = self._kernel_failure(verdict, kernel_id=kernel_id, run_id=run_id)
        if failure is not None:
            raise failure
        return out

    def _parent_latency(self, run_id: str, parent_id: str, problem: str, preset: str, hw: str) -> float | None:
        ms = self._correct_ms(run_id, parent_id, hw)
        if ms is None and parent_id == BASELINE_ID and self._latest_eval(run_id, BASELINE_ID, hw) is None:
            # The baseline is the reference point of every speedup: measure it once per hardware.
            sp = self._search_problem(problem, preset)
            result = self._judge(problem, sp.baseline_source, preset=preset, hw=hw, fidelity="full",
                                 filename="baseline.py", label=BASELINE_ID)
            self._record(run_id, BASELINE_ID, result, self._verdict(result, sp, hw=hw))
            ms = self._correct_ms(run_id, BASELINE_ID, hw)
        return ms

    def _save_copy(self, run_id: str, kernel_id: str, source: str) -> None:
        """A copy of the kernel for people to read and diff: ``<run dir>/kernels/<run>/<kernel>.py``."""
        directory = self.run_dir / "kernels" / run_id
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"{kernel_id}.py").write_text(source)

    # ================================================================== tools: the API reference
    def nki_api(self, name: Any, front_end: Any = "neuronxcc") -> dict[str, Any]:
        from accelopt_nb.mcp.apiref import UnknownAPIError, lookup

        name = self._text(name, "name", limit=200)
        front_end = self._choice(front_end, "front_end", ("neuronxcc", "nki", "both"), "neuronxcc")
        try:
            entries = lookup(name, front_end, hw=self.hw)
        except UnknownAPIError as exc:
            raise ToolFailure("unknown_api", str(exc), field="name", did_you_mean=exc.suggestions or None) from None
        return {"query": name, "entries": entries}

    # ================================================================== tools: the kernel database
    def best_kernels(self, problem: Any = None, hw: Any = None, fidelity: Any = None, limit: Any = 5,
                     include_source: Any = False) -> dict[str, Any]:
        from accelopt_nb.store.queries import best_kernels

        name = self._problem(problem).name if problem is not None else None
        hw = self._hw(hw)
        fidelity = None if fidelity is None else self._fidelity(fidelity)
        rows = best_kernels(self.store, problem=name, hw=hw, fidelity=fidelity, limit=self._limit(limit))
        for r in rows:
            r["created_at"] = str(r["created_at"])
            if include_source:
                r["source"] = self.store.get_kernel(r["run_id"], r["kernel_id"])["source"]
        return {"problem": name, "hw": hw, "fidelity": fidelity, "kernels": rows, "store": self.store.location}

    def get_kernel(self, kernel_id: Any, problem: Any = None, run_id: Any = None) -> dict[str, Any]:
        from accelopt_nb.store.queries import latest_evaluations

        name = self._problem(problem).name if problem is not None else None
        row = self._find_kernel(kernel_id, name, run_id)
        plan = None
        if row["plan_id"]:
            plans = self.store.query("SELECT text FROM plans WHERE run_id=? AND plan_id=?",
                                     (row["run_id"], row["plan_id"]))
            plan = plans[0]["text"] if plans else None
        evals = latest_evaluations(self.store, row["run_id"], row["kernel_id"])
        for e in evals:
            latency_us = e.pop("latency_us")
            e["latency_ms"] = None if latency_us is None else _finite(float(latency_us) / 1e3)
            e["created_at"] = str(e["created_at"])
        return {**{k: row[k] for k in ("run_id", "kernel_id", "problem_id", "iteration", "parent_id", "origin",
                                       "sha256", "source")}, "plan": plan, "evaluations": evals}

    def lineage(self, kernel_id: Any, problem: Any = None, run_id: Any = None, hw: Any = None) -> dict[str, Any]:
        from accelopt_nb.store.queries import lineage

        name = self._problem(problem).name if problem is not None else None
        row = self._find_kernel(kernel_id, name, run_id)
        hw = self._hw(hw)
        chain = lineage(self.store, row["run_id"], row["kernel_id"], hw=hw)
        return {"run_id": row["run_id"], "hw": hw, "chain": chain}

    def memory(self, problem: Any = None, limit: Any = 16) -> dict[str, Any]:
        from accelopt_nb.store.queries import memory_items

        name = self._problem(problem).name if problem is not None else None
        items = memory_items(self.store, problem=name, limit=self._limit(limit))
        for it in items:
            it["created_at"] = str(it["created_at"])
        return {"problem": name, "items": items}

    def add_memory(self, problem: Any, slow_kernel_id: Any, fast_kernel_id: Any, summary: Any,
                   shapes: Any = None, hw: Any = None) -> dict[str, Any]:
        """Record a lesson: what changed between a slower and a faster kernel of this session, and why
        it helped (both measured correct on ``hw``)."""
        p = self._problem(problem)
        preset = self._preset(p, shapes)
        hw = self._hw(hw)
        summary = self._text(summary, "summary")
        run_id = self.run_id(p.name, preset)
        slow = self._find_kernel(slow_kernel_id, p.name, run_id)
        fast = self._find_kernel(fast_kernel_id, p.name, run_id)
        if slow["kernel_id"] == fast["kernel_id"]:
            raise ToolFailure("invalid_argument", "slow_kernel_id and fast_kernel_id are the same kernel")
        slow_ms, fast_ms = (self._correct_ms(run_id, k["kernel_id"], hw) for k in (slow, fast))
        missing = [k["kernel_id"] for k, ms in ((slow, slow_ms), (fast, fast_ms)) if ms is None]
        if missing:
            raise ToolFailure("not_measured", f"kernel(s) {', '.join(missing)} have no correct evaluation on {hw}; "
                              "a lesson needs both latencies", kernel_ids=missing)
        speedup = slow_ms / fast_ms  # type: ignore[operator]
        title = summary.strip().splitlines()[0].strip("*# ").strip()[:200]
        item_id = self.store.add_memory_item(run_id, problem_id=p.name, iteration=int(fast["iteration"]),
                                             summary=summary, slow_kernel_id=slow["kernel_id"],
                                             fast_kernel_id=fast["kernel_id"], speedup=speedup,
                                             data={"title": title, "hw": hw, "author": self.author,
                                                   "slow_ms": slow_ms, "fast_ms": fast_ms})
        return {"item_id": item_id, "run_id": run_id, "speedup": speedup, "title": title,
                "slow_ms": slow_ms, "fast_ms": fast_ms}

    def session_info(self) -> dict[str, Any]:
        return {"session": self.session, "run_dir": str(self.run_dir), "store": self.store.location,
                "store_backend": self.store.backend.name, "backend": self.backend, "hw": self.hw,
                "default_shapes": self.shapes, "author": self.author, "limits": asdict(self.limits),
                "runs": {f"{p}/{preset}": rid for (p, preset), rid in sorted(self._runs.items())}}


_KERNEL_COLS = "run_id, kernel_id, problem_id, iteration, sha256, source, parent_id, plan_id, origin"
