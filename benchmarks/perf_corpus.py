"""The measured-latency corpus of the performance model: facts in a table, kernels from clones.

``benchmarks/data/perf_corpus.csv`` holds one row per measurement we did not make: the source, its
role in the held-out protocol (docs/perf_model.md §7), hardware, the family of variants it belongs
to, where its kernel lives, the arguments it was measured at, the measured latency and how and
where it was measured. The paper's 14 NKIBench baselines come from
``accelopt_nb/perf/data/nkibench_trn1_measured.csv`` (one place for those facts).

Kernels are never copied into this repository: a row's ``kernel`` names a clone given on the
command line (``autocomp:PATH#STEP`` — step STEP, root first, of an optimization trace in a clone of
github.com/ucb-bar/autocomp, or ``autocomp:PATH`` — a whole kernel file there; ``accelopt:PATH`` — a file of a clone of github.com/zhang677/AccelOpt;
``github:OWNER/NAME:PATH::FUNCTION`` — a function of a file of any other clone, given as
``clones={"OWNER/NAME": Path(...)}``, ``--clone OWNER/NAME=DIR`` in benchmarks/perf_fidelity.py)
or a kernel of our own (``ours:PATH::FUNCTION``, relative to this repository). The input builders
below are ours, from the shapes each source states; a row whose ``args`` name an NKIBench ``task``
(an agent's candidate for that task, in any clone) takes the task's tiled inputs as its baseline does,
from the AccelOpt clone's reference file.

    cases = load_cases(autocomp=Path(...), accelopt=Path(...))      # rows whose kernels are reachable
    trace = cases[0].trace(cache_dir)                                # trace-only simulation, cached
"""
from __future__ import annotations

import ast
import csv
import hashlib
import importlib.util
import json
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import ml_dtypes
import numpy as np

from accelopt_nb.sim import SimOptions, load_kernel, simulate

ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path(__file__).resolve().parent / "data" / "perf_corpus.csv"
NKIBENCH_MEASURED = ROOT / "accelopt_nb" / "perf" / "data" / "nkibench_trn1_measured.csv"
TRACE_ONLY = SimOptions(trace_only=True)
# "ranking": never fitted or tuned on, but its absolute level is of another configuration than the model's (a
# source whose numbers need two NeuronCores' compute, docs/perf_model.md §10): it grades the order of kernels and
# variants, and feeds no error bar
ROLES = ("fit", "tuned", "dev", "held-out", "ranking")
# What each row's timer spans, from its recorded method: True where the number includes the kernel's start/stop
# cost (the model's launch_overhead_s; docs/perf_model.md §2b), so the model's Profile.end_to_end_ms is compared
# with it, else Profile.latency (first instruction to last completion).
TIMERS: dict[str, bool] = {
    "total_time": True,     # neuron-profile total_time: from the TPB start to the stop notification (SCHEMA)
    "nc_latency": True,     # nki.benchmark nc_latency / neuron-bench NCL: NeuronCore-side, start/stop included
    "exec_time": False,     # neuron-profile total_exec_time: setup/teardown opcodes excluded (SCHEMA)
}

# what an optimization-trace candidate's code assumes is already imported (its harness imports these)
KERNEL_HEADER = ("import math\nimport numpy as np\nimport neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\n"
                 "import neuronxcc.nki.isa as nisa\nimport neuronxcc.nki.typing as nt\n"
                 "import neuronxcc.nki.compiler as ncc\nfrom neuronxcc.nki.language import par_dim\n\n")


@dataclass
class Case:
    """One measured kernel: a corpus row plus how to trace it here."""

    source: str
    role: str                      # fit | tuned | dev | held-out | ranking (docs/perf_model.md §7)
    hw: str
    family: str                    # variants of one problem, measured the same way (ranking gauge)
    variant: str
    measured_ms: float
    kernel: str                    # locator (see the module docstring)
    method: str = ""
    timer: str = "total_time"      # what the measurement spans (TIMERS)
    provenance: str = ""
    dge: bool = False              # built with DMA descriptors on the hardware DGE (trn2's default flags)
    build: Callable[[], tuple[Any, list, dict]] | None = field(default=None, repr=False)
    key: str = ""                  # stable id of what is traced (source text, function, inputs)

    @property
    def name(self) -> str:
        return f"{self.family}:{self.variant}"

    def trace(self, cache_dir: Path | None = None):
        """The trace-only simulation of this case (pickled under ``cache_dir`` by content)."""
        path = cache_dir / f"{self.key}.pkl" if cache_dir else None
        if path is not None and path.is_file():
            return pickle.loads(path.read_bytes())
        kernel, inputs, kwargs = self.build()
        trace = simulate(kernel, *inputs, options=TRACE_ONLY, **kwargs).trace
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(pickle.dumps(trace, protocol=5))
        return trace


# ---- inputs (shape-only: trace-only simulation never reads values) --------------------------
def _arr(shape, dtype) -> np.ndarray:
    dt = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    return np.zeros(shape, dtype=dt)


def _inputs(family: str, a: dict, dtype: str, fn: str) -> tuple[list, dict]:
    if family in ("autocomp/gemm", "tutorial/matmul"):
        return [_arr((a["K"], a["M"]), dtype), _arr((a["K"], a["N"]), dtype)], {}
    if family in ("autocomp/mamba", "tutorial/mamba"):
        b, c, L, s = a["batch"], a["channels"], a["seq"], a["state"]
        return [_arr((b, c, L), dtype), _arr((b, c, L), dtype), _arr((c, s), dtype), _arr((b, s, L), dtype),
                _arr((b, s, L), dtype)], {}
    if family == "autocomp/attention":
        return [_arr((a["d_head"], a["seq"]), dtype) for _ in range(3)], {}
    if family == "autocomp/sd_attention":
        return [_arr((a["seq"], a["d_head"]), dtype) for _ in range(3)], {}
    if family == "autocomp/conv1d_depthwise":
        return ([_arr((a["N"], a["C"], a["H"], a["W"]), dtype), _arr((a["C"], 1, 1, a["filter_w"]), dtype)],
                {"padding": ((0, 0), (a["pad"], a["pad"]))})
    if family in ("cs149/vector_add", "cs149/vector_add_256k"):
        n = a["n"]
        if fn == "vector_add_chunked":
            return [_arr((n, 1), dtype), _arr((n, 1), dtype)], {"row_chunk": a["row_chunk"]}
        if fn == "vector_add_streamed":
            return [_arr((128, n // 128), dtype), _arr((128, n // 128), dtype)], {"free_dim": a["free_dim"]}
        tiles = n // (128 * a["free_dim"])
        return [_arr((tiles, 128, a["free_dim"]), dtype), _arr((tiles, 128, a["free_dim"]), dtype)], {}
    if family == "cs149/conv2d":     # the assignment's test harness: X (B, C_in, H, W), W (C_out, C_in, k, k), bias
        return ([_arr((a["batch"], a["in_channels"], a["height"], a["width"]), dtype),
                 _arr((a["out_channels"], a["in_channels"], a["filter"], a["filter"]), dtype),
                 _arr((a["out_channels"],), dtype)], {"pool_size": a["pool_size"]})
    if family == "cs149/transpose":
        return [_arr((a["m"], a["n"]), dtype)], {}
    raise ValueError(f"no input builder for family {family!r}")


def _module(path: Path):
    spec = importlib.util.spec_from_file_location(f"ref_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _nkibench_inputs(repo: Path, problem: str) -> list:
    kfile = _nkibench_kernel(repo, problem)          # <problem>_<shape>_<n>.py; its reference <problem>_<shape>_numpy_*
    ref = next((repo / "NKIBench" / "reference").glob(kfile.name.rsplit("_", 1)[0] + "_numpy_*.py"))
    mod = _module(ref)
    np.random.seed(0)
    return mod.transform_to_nki_inputs(mod.get_inputs())


# ---- kernels from clones -----------------------------------------------------------------------
def trace_steps(path: Path) -> list[dict[str, Any]]:
    """The candidates of an Autocomp optimization trace, root (baseline) first: code and score.

    The file is a nested ``CodeCandidate(parent=..., code='''...''', score=...)`` expression; it is
    parsed, never executed.
    """
    node = ast.parse(path.read_text()).body[0].value
    out = []
    while isinstance(node, ast.Call):
        kw = {k.arg: k.value for k in node.keywords}
        out.append({"code": ast.literal_eval(kw["code"]), "score": ast.literal_eval(kw["score"])})
        node = kw.get("parent")
    return out[::-1]


def _key(*parts: Any) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(repr(p).encode())
    return h.hexdigest()[:20]


def _sim_version() -> str:
    """Traces depend on the simulator: its source text is part of every cache key."""
    sim = ROOT / "accelopt_nb" / "sim"
    return _key(*(p.read_text() for p in sorted(sim.rglob("*.py"))))


def load_rows(path: Path = CORPUS) -> list[dict[str, str]]:
    with path.open() as f:
        rows = list(csv.DictReader(f))
    for i, r in enumerate(rows, start=2):
        if r["timer"] not in TIMERS:
            raise ValueError(f"{path.name}:{i}: timer {r['timer']!r} is not one of {sorted(TIMERS)} "
                             f"(what the measurement spans decides the model's quantity it is compared with)")
        if r.get("dge") not in ("on", "off") or (r["dge"] == "on" and r["hw"] != "trn2"):
            raise ValueError(f"{path.name}:{i}: dge {r.get('dge')!r} must be 'off', or 'on' for a trn2 build with "
                             f"descriptors on the hardware DGE (trn2's default flags; AccelOpt builds with --disable-dge)")
        if r["role"] not in ROLES:
            raise ValueError(f"{path.name}:{i}: role {r['role']!r} is not one of {list(ROLES)} "
                             f"(the role decides which tables and error bars a row may enter)")
    return rows


def load_cases(*, autocomp: Path | None = None, accelopt: Path | None = None, corpus: Path = CORPUS,
               skipped: list[str] | None = None, clones: dict[str, Path] | None = None) -> list[Case]:
    """Every corpus row whose kernel is reachable (clones given), plus the paper's 14 with ``accelopt``.

    ``clones``: checkouts of other repositories by ``OWNER/NAME``, for ``github:`` locators.
    Rows whose clone is missing are named in ``skipped`` (when given) and left out.
    """
    clones = clones or {}
    sim = _sim_version()
    cases: list[Case] = []
    if accelopt is not None:
        with NKIBENCH_MEASURED.open() as f:
            for r in csv.DictReader(f):
                prob = r["problem"]
                kfile = _nkibench_kernel(accelopt, prob)
                cases.append(Case("accelopt-nkibench-trn1", "fit", "trn1", f"nkibench/{prob}", "baseline",
                                  float(r["baseline_latency_ms"]), f"accelopt:{kfile.relative_to(accelopt)}",
                                  method="neuron-profile total_time, mean of 10 after 2 warm-ups", timer="total_time",
                                  provenance="zhang677/AccelOpt@47e29a7 experiments/full_complete_local/profile_results.csv",
                                  build=_builder_file(kfile, "kernel", lambda p=prob: _nkibench_inputs(accelopt, p), {}),
                                  key=_key(sim, kfile.read_text(), prob)))
    for r in load_rows(corpus):
        loc, fam = r["kernel"], r["family"]
        args = json.loads(r["args"])
        repo_key, _, rest = loc.partition(":")
        base = dict(source=r["source"], role=r["role"], hw=r["hw"], family=fam, variant=r["variant"],
                    measured_ms=float(r["latency_ms"]), kernel=loc, method=r["method"], timer=r["timer"],
                    provenance=r["provenance"], dge=r["dge"] == "on")
        if repo_key == "ours":
            rel, _, fn = rest.partition("::")
            inputs, kwargs = _inputs(fam, args, r["dtype"], fn)
            src = (ROOT / rel).read_text()
            cases.append(Case(**base, build=_builder_source(src, str(ROOT / rel), fn, inputs, kwargs),
                              key=_key(sim, src, fn, args, r["dtype"])))
        elif repo_key == "autocomp":
            if autocomp is None:
                if skipped is not None:
                    skipped.append(f"{r['family']}:{r['variant']} (needs --autocomp)")
                continue
            rel, _, step = rest.partition("#")
            code = trace_steps(autocomp / rel)[int(step)]["code"] if step else (autocomp / rel).read_text()
            src = KERNEL_HEADER + code
            inputs, kwargs = _inputs(fam, args, r["dtype"], "test")
            cases.append(Case(**base, build=_builder_source(src, f"{rel}#{step}", "test", inputs, kwargs),
                              key=_key(sim, src, args, r["dtype"])))
        elif repo_key == "accelopt":
            if accelopt is None:
                if skipped is not None:
                    skipped.append(f"{r['family']}:{r['variant']} (needs --accelopt-repo)")
                continue
            kfile = accelopt / rest
            cases.append(Case(**base, build=_builder_file(kfile, "kernel",
                                                          lambda t=args["task"]: _nkibench_inputs(accelopt, t), {}),
                              key=_key(sim, kfile.read_text(), args)))
        elif repo_key == "github":
            repo, _, rest = rest.partition(":")
            rel, _, fn = rest.partition("::")
            if repo not in clones:
                if skipped is not None:
                    skipped.append(f"{r['family']}:{r['variant']} (needs --clone {repo}=DIR)")
                continue
            kfile = clones[repo] / rel
            if not kfile.is_file():
                raise ValueError(f"corpus row {r['family']}:{r['variant']}: {kfile} is not a file (is {clones[repo]} "
                                 f"a checkout of github.com/{repo}?)")
            if "task" in args:      # a candidate of an NKIBench task: it takes the task's tiled inputs, as the baseline
                if accelopt is None:
                    if skipped is not None:
                        skipped.append(f"{r['family']}:{r['variant']} (needs --accelopt-repo)")
                    continue
                _nkibench_task(accelopt, args["task"], f"{r['family']}:{r['variant']}")
                inputs, kwargs = (lambda t=args["task"]: _nkibench_inputs(accelopt, t)), {}
            else:
                inputs, kwargs = _inputs(fam, args, r["dtype"], fn)
            src = kfile.read_text()
            cases.append(Case(**base, build=_builder_source(src, str(kfile), fn, inputs, kwargs),
                              key=_key(sim, src, fn, args, r["dtype"])))
        else:
            raise ValueError(f"corpus row {r['family']}:{r['variant']}: unknown kernel locator {loc!r}")
    return cases


def _nkibench_task(repo: Path, task: str, row: str) -> None:
    """Refuse a corpus row whose NKIBench task is unknown or absent from the checkout, naming it."""
    if task not in _NKIBENCH_PROBLEMS:
        raise ValueError(f"corpus row {row}: unknown NKIBench task {task!r} (one of {list(_NKIBENCH_PROBLEMS)})")
    try:
        _nkibench_kernel(repo, task)
    except ValueError as exc:
        raise ValueError(f"corpus row {row}: {exc}") from None


def _nkibench_kernel(repo: Path, problem: str) -> Path:
    files = [p for p in (repo / "NKIBench" / "kernels").glob(f"{problem}_*.py")
             if not any(p.name.startswith(q + "_") and len(q) > len(problem) for q in _NKIBENCH_PROBLEMS)]
    if not files:
        raise ValueError(f"no NKIBench/kernels/{problem}_*.py under {repo} (is it a checkout of "
                         f"github.com/zhang677/AccelOpt?)")
    return sorted(files)[0]


_NKIBENCH_PROBLEMS = ("adamw", "add_rmsnorm_matmul", "bmm", "bmm_softmax", "gqa_full", "lora", "mamba", "matmul",
                      "matmul_add_rmsnorm", "rmsnorm_matmul", "rope_single_freq_apply", "silu", "swiglu",
                      "transpose_matmul")


def _builder_source(src: str, filename: str, fn: str, inputs: list | Callable[[], list], kwargs: dict):
    """``inputs``: the arrays, or a function that makes them when the case is traced (large NKIBench inputs)."""
    def build():
        return load_kernel(source=src, name=fn, filename=filename), (inputs() if callable(inputs) else inputs), kwargs
    return build


def _builder_file(path: Path, fn: str, inputs: Callable[[], list], kwargs: dict):
    def build():
        return load_kernel(path, name=fn), inputs(), kwargs
    return build


__all__ = ["CORPUS", "Case", "KERNEL_HEADER", "ROLES", "load_cases", "load_rows", "trace_steps"]
