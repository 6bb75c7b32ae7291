"""Fidelity of the performance model against measured and published trn1 latencies.

Three suites, every kernel traced in trace-only mode and timed by accelopt_nb.perf:

* ``tutorials`` — our own kernels following the documented NKI tutorial steps (benchmarks/kernels/):
  each step's speedup against the published one (target: within 15%).
* ``nkibench`` — the paper's own 14 NKIBench baseline kernels at their shapes, from a checkout of
  its public repository (``--accelopt-repo DIR``, github.com/zhang677/AccelOpt), against the
  measured trn1 table shipped in ``accelopt_nb/perf/data/nkibench_trn1_measured.csv``: latency
  and HBM bytes per kernel, Spearman ρ, median and worst error. The free parameters of the model
  are fitted on the half with the shortest instruction streams and the other half is
  held out: the error reported for the held-out half is the model's expected error.
* ``mamba-paper`` — the repository's ``samples/nki/mamba_v1..v3.py`` on its NKIBench mamba task:
  the v1 -> v3 speedup against the measured 28.4% -> 52.7% of peak (1.86x).

Each suite is run with the shipped hardware file ("after") and with the model before v2 ("before":
the free parameters at their documented values, redundant work not elided, engines as written).

    python benchmarks/perf_fidelity.py [--accelopt-repo DIR] [--only SUITE] [--refit] [--loo]
                                       [--json OUT.json] [--plot figures/perf_fidelity.png]

``--refit`` refits the free parameters on the fit half (what trn1.yaml ships); ``--loo`` adds a
leave-one-out over all 14 kernels (about 10 min CPU: one fit per kernel, sharing latencies).
"""
from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import yaml

from accelopt_nb.kernels import KERNELS_DIR as KERNELS
from accelopt_nb.perf import estimate, load_hw
from accelopt_nb.perf.calibrate import (FREE_PARAMETERS, HeldOut, LatencyCache, documented_overrides, error_stats, fit, leave_one_out, rms_log_error,
                                        spearman)
from accelopt_nb.perf.uncertainty import (CLASS_LABEL, COVERAGE, DATA as UNCERTAINTY, KERNEL_CLASSES, RESIDUALS, bar,
                                          table_entry)
from accelopt_nb.sim import SimOptions, load_kernel, simulate

MEASURED = Path(__file__).resolve().parents[1] / "accelopt_nb" / "perf" / "data" / "nkibench_trn1_measured.csv"
TRACE_ONLY = SimOptions(trace_only=True)
# the model before v2: documented free parameters, every load moves data
BEFORE = {**documented_overrides(), "elide_redundant_work": False, "compiler_engine_placement": False,
          "sequential_hbm_order": False, "launch_overhead_s": 0.0, "dma_issue_s": 0.0, "dma_issue_dge_s": 0.0,
          "dma_packet_overhead_s": 0.0, "rename_full_overwrites": "none", "sequential_rules_need_middle_end": False}
PAPER_MAMBA_PCT = (28.36, 52.7)        # the paper, trn1: NKIBench baseline (= mamba_v1) and the human best (v3)
# the grid of every fit here (--refit, --loo): what trn1.yaml ships, and what leave-one-out validates.
# All four free parameters: v3 ships the affine rule off and all four at this grid's fit of the fit half
# (1.39 / 4.64 / 4.58 / 25; perf_model.md §2b, §8), so the procedure behind the shipped numbers is the one validated.
FIT_GRID = dict(passes=2, steps=7, params=FREE_PARAMETERS)


# ---- suite 1: tutorial progressions (published numbers, nki_hw_facts.md §5) ---------------------
@dataclass(frozen=True)
class Point:
    suite: str
    label: str
    file: str
    kernel: str
    shape: dict
    published_ms: float


MATMUL = dict(M=4096, K=8192, N=8192)
POINTS = [
    Point("matmul", "tiled", "matmul_tutorial.py", "matmul_tiled", MATMUL, 51.80),
    Point("matmul", "hoisted loads", "matmul_tutorial.py", "matmul_hoisted", MATMUL, 42.96),
    Point("matmul", "blocked free dims", "matmul_tutorial.py", "matmul_blocked_free", MATMUL, 22.07),
    Point("matmul", "blocked M/N/K", "matmul_tutorial.py", "matmul_blocked_mnk", MATMUL, 6.97),
    Point("mamba", "v1 (L=512)", "mamba_tutorial.py", "mamba_v1", dict(batch=1, channels=4096, seq=512, state=16), 2.34),
    Point("mamba", "v2 (L=512)", "mamba_tutorial.py", "mamba_v2", dict(batch=1, channels=4096, seq=512, state=16), 1.61),
    Point("mamba", "v2 (L=8192)", "mamba_tutorial.py", "mamba_v2", dict(batch=1, channels=4096, seq=8192, state=16), 53.33),
    Point("mamba", "v3 (L=8192)", "mamba_tutorial.py", "mamba_v3", dict(batch=1, channels=4096, seq=8192, state=16), 27.8),
]
STEPS = [(0, 1), (1, 2), (2, 3), (4, 5), (6, 7)]      # consecutive points that are a published step
STEP_TOLERANCE = 0.15
# Published steps the model is not held to, and why. The tutorial's matmul latencies come from an older
# compiler: Autocomp measured the identical tiled kernel at the same shape in 20.99 ms (51.80 published), the
# model (v3, per-packet DMA cost) 23.1 ms. Its DMA-bound steps (tiled, hoisted, blocked free: 1 KiB-per-
# partition loads) all run ~2.2x slower than today's DMA, the TensorE-bound blocked M/N/K (6.97 ms) does not, so
# the last step's 3.17x mixes the two toolchains (docs/perf_model.md §3, §7.1). Printed, not counted.
STEPS_NOT_HELD = {(2, 3): "older compiler: DMA-bound start (22.07 ms) vs TensorE-bound end (6.97 ms)"}


def tutorial_inputs(p: Point) -> list[np.ndarray]:
    """Shape-only inputs (trace-only mode never reads them), allocated lazily by the OS."""
    s = p.shape
    if p.suite == "matmul":
        bf16 = ml_dtypes.bfloat16
        return [np.empty((s["K"], s["M"]), dtype=bf16), np.empty((s["K"], s["N"]), dtype=bf16)]
    b, c, l, st = s["batch"], s["channels"], s["seq"], s["state"]
    f32 = np.float32
    return [np.empty((b, c, l), f32), np.empty((b, c, l), f32), np.empty((c, st), f32),
            np.empty((b, st, l), f32), np.empty((b, st, l), f32)]


def run_tutorials(configs: dict[str, Any]) -> dict:
    rows = []
    for p in POINTS:
        trace = simulate(load_kernel(KERNELS / p.file, name=p.kernel), *tutorial_inputs(p), options=TRACE_ONLY).trace
        row = dict(suite=p.suite, label=p.label, published_ms=p.published_ms)
        for name, hw in configs.items():
            row[f"{name}_ms"] = estimate(trace, hw).latency
        rows.append(row)
        print(f"  {p.suite:6s} {p.label:18s} published {p.published_ms:7.2f} ms  "
              + "  ".join(f"{n} {row[f'{n}_ms']:8.3f}" for n in configs), flush=True)
    steps = []
    for a, b in STEPS:
        ra, rb = rows[a], rows[b]
        pub = ra["published_ms"] / rb["published_ms"]
        step = dict(step=f"{ra['suite']}: {ra['label']} -> {rb['label']}", published=pub)
        for name in configs:
            step[name] = ra[f"{name}_ms"] / rb[f"{name}_ms"]
        step["within"] = abs(step["after"] / pub - 1) <= STEP_TOLERANCE
        step["not_held"] = STEPS_NOT_HELD.get((a, b), "")
        steps.append(step)
    return dict(points=rows, steps=steps, all_within=all(s["within"] for s in steps if not s["not_held"]))


# ---- suite 2: the paper's 14 NKIBench baselines ---------------------------------------------
def measured_table() -> dict[str, dict[str, float]]:
    out = {}
    with MEASURED.open() as f:
        for r in csv.DictReader(f):
            out[r["problem"]] = dict(latency_ms=float(r["baseline_latency_ms"]),
                                     hbm_bytes=float(r["hbm_read_bytes"]) + float(r["hbm_write_bytes"]),
                                     pct_peak=float(r["baseline_pct_peak"]))
    return out


def _module(path: Path):
    spec = importlib.util.spec_from_file_location(f"ref_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _problem_of(filename: str, problems: list[str]) -> str:
    # kernel files are <problem>_<shape>_<n>.py; the longest matching problem name wins (matmul vs matmul_add_...)
    return max((p for p in problems if filename.startswith(p + "_")), key=len)


def nkibench_traces(repo: Path, problems: list[str]) -> dict[str, Any]:
    root = repo / "NKIBench"
    traces = {}
    for kfile in sorted((root / "kernels").glob("*.py")):
        prob = _problem_of(kfile.name, problems)
        ref = next((root / "reference").glob(kfile.name.rsplit("_", 1)[0] + "_numpy_*.py"))
        mod = _module(ref)
        np.random.seed(0)
        inputs = mod.transform_to_nki_inputs(mod.get_inputs())
        t0 = time.perf_counter()
        traces[prob] = simulate(load_kernel(kfile), *inputs, options=TRACE_ONLY).trace
        print(f"  traced {prob:24s} {len(traces[prob]):6d} instructions in {time.perf_counter() - t0:5.1f} s",
              flush=True)
    return traces


def split(traces: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Fit half / held-out half: the 7 shortest instruction streams (cheap to refit) / the 7 longest.

    The rule looks at nothing measured, and it makes the held-out half the harder test: the
    fit sees small streaming and fused kernels, the held-out half is the large matmul, attention
    and softmax kernels.
    """
    names = sorted(traces, key=lambda p: (len(traces[p]), p))
    half = len(names) // 2
    return sorted(names[:half]), sorted(names[half:])


def _err(r: np.ndarray) -> np.ndarray:
    return np.maximum(r, 1 / r)


def stats(rows: list[dict], name: str) -> dict:
    r = np.array([row[f"{name}_ratio"] for row in rows])
    h = np.array([row[f"{name}_hbm_ratio"] for row in rows])
    return dict(n=len(rows), spearman=spearman([row[f"{name}_ms"] for row in rows],
                                               [row["measured_ms"] for row in rows]) if len(rows) > 2 else None,
                median_error=float(np.median(_err(r))), worst_error=float(_err(r).max()),
                rms_log_error=rms_log_error(r), median_hbm_error=float(np.median(_err(h))))


def run_nkibench(traces: dict[str, Any], configs: dict[str, Any]) -> dict:
    meas = measured_table()
    fit_half, test_half = split(traces)
    rows = []
    for prob, trace in sorted(traces.items()):
        m = meas[prob]
        row = dict(problem=prob, half="fit" if prob in fit_half else "test", measured_ms=m["latency_ms"],
                   measured_hbm_mb=m["hbm_bytes"] / 1e6)
        for name, hw in configs.items():
            prof = estimate(trace, hw)
            hbm = prof.hbm_read_bytes + prof.hbm_write_bytes
            ms = prof.end_to_end_ms         # measured: neuron-profile total_time, start and stop included (§2b)
            row.update({f"{name}_ms": ms, f"{name}_ratio": ms / m["latency_ms"],
                        f"{name}_hbm_mb": hbm / 1e6, f"{name}_hbm_ratio": hbm / m["hbm_bytes"]})
        rows.append(row)
    out = dict(rows=rows, fit_half=fit_half, test_half=test_half)
    for name in configs:
        out[name] = {"all": stats(rows, name), "fit": stats([r for r in rows if r["half"] == "fit"], name),
                     "test": stats([r for r in rows if r["half"] == "test"], name)}
    return out


LOO_FIRST = ("adamw", "rope_single_freq_apply", "silu", "mamba")
LOO_VERSION = {"before": "v2.2", "after": "v3"}     # the model a leave-one-out record's residuals come from


def run_loo(traces: dict[str, Any], hw: str, rules: dict[str, Any] | None = None,
            folds: list[int] | None = None, cache: Any = None) -> HeldOut:
    """Leave-one-out over all 14: each kernel timed with the free parameters fitted on the other 13.

    Every fit starts from the documented values, as --refit does; the traces are simulated once
    and each fit only re-times them (calibrate.LatencyCache). ``rules``: hardware keys of the model
    fitted (V22 for the model before issue 37; none for the shipped one); the free parameters are refitted.
    """
    meas = measured_table()
    names = sorted(traces)
    t0 = time.process_time()
    held = leave_one_out([traces[p] for p in names], [meas[p]["latency_ms"] / 1e3 for p in names], names=names,
                         base=load_hw(hw, {**(rules or {}), **documented_overrides()}), folds=folds, cache=cache,
                         **FIT_GRID,
                         progress=lambda m: print(f"  loo: {m} ({time.process_time() - t0:.0f} s CPU)", flush=True))
    return held


# ---- suite 3: the paper repository's Mamba progression ---------------------------------------
def run_mamba_paper(repo: Path, configs: dict[str, Any]) -> dict:
    ref = next((repo / "NKIBench" / "reference").glob("mamba_*_numpy_*.py"))
    mod = _module(ref)
    np.random.seed(0)
    inputs = mod.transform_to_nki_inputs(mod.get_inputs())
    lat: dict[str, dict[str, float]] = {}
    for v in ("v1", "v2", "v3"):
        trace = simulate(load_kernel(repo / "samples" / "nki" / f"mamba_{v}.py"), *inputs, options=TRACE_ONLY).trace
        lat[v] = {name: estimate(trace, hw).latency for name, hw in configs.items()}
    measured = PAPER_MAMBA_PCT[1] / PAPER_MAMBA_PCT[0]
    out = dict(latency_ms=lat, measured_speedup_v1_v3=measured)
    for name in configs:
        out[f"{name}_speedup_v1_v3"] = lat["v1"][name] / lat["v3"][name]
    out["within"] = abs(out["after_speedup_v1_v3"] / measured - 1) <= STEP_TOLERANCE
    return out


# ---- trn2 plausibility -------------------------------------------------------------------------
# The NKI matmul tutorial's trn2 version (fp32 4096x8192x8192) publishes engine-active fractions
# only (DMA / TensorE, nki_hw_facts.md §5); the paper gives the baselines' trn2 geometric mean.
TRN2_MATMUL_ACTIVE = {"tiled": (0.9993, 0.8728), "hoisted loads": (0.9973, 0.9985),
                      "blocked free dims": (0.9570, 0.9952), "blocked M/N/K": (0.2154, 0.9950)}
PAPER_TRN2_GEOMEAN_PCT = 45.0


def run_trn2(traces: dict[str, Any] | None, trn1: Any, trn2: Any) -> dict:
    import nkibench

    out: dict[str, Any] = {"matmul_tutorial": []}
    f32 = np.float32
    for p in POINTS[:4]:
        s = p.shape
        trace = simulate(load_kernel(KERNELS / p.file, name=p.kernel),
                         np.empty((s["K"], s["M"]), f32), np.empty((s["K"], s["N"]), f32), options=TRACE_ONLY).trace
        prof = estimate(trace, trn2)
        dma, pe = TRN2_MATMUL_ACTIVE[p.label]
        out["matmul_tutorial"].append(dict(step=p.label, model_ms=prof.latency, model_dma=prof.dma_active_time_percent,
                                           model_pe=prof.tensor_engine_active_time_percent, published_dma=dma,
                                           published_pe=pe))
    if traces:
        pct1, pct2 = [], []
        for prob, trace in sorted(traces.items()):
            problem = nkibench.get_problem(prob)
            pct1.append(100 * problem.peak("paper", "trn1").ms / estimate(trace, trn1).latency)
            pct2.append(100 * problem.peak("paper", "trn2").ms / estimate(trace, trn2).latency)
        out["pct_peak"] = dict(zip(sorted(traces), zip(pct1, pct2)))
        out["geomean_trn1"] = float(np.exp(np.mean(np.log(pct1))))
        out["geomean_trn2"] = float(np.exp(np.mean(np.log(pct2))))
        meas = measured_table()
        out["geomean_trn1_measured"] = float(np.exp(np.mean(np.log([meas[p]["pct_peak"] for p in sorted(traces)]))))
    return out


def print_trn2(res: dict) -> None:
    print(f"  {'matmul tutorial (fp32)':24s} {'model ms':>9s} {'DMA act':>8s} {'publ.':>6s} {'PE act':>7s} {'publ.':>6s}")
    for r in res["matmul_tutorial"]:
        print(f"  {r['step']:24s} {r['model_ms']:9.3f} {r['model_dma']:8.2f} {r['published_dma']:6.2f} "
              f"{r['model_pe']:7.2f} {r['published_pe']:6.2f}")
    if "geomean_trn2" in res:
        print(f"  NKIBench baselines, geometric mean % of peak: trn1 model {res['geomean_trn1']:.1f} (measured "
              f"{res['geomean_trn1_measured']:.1f}); trn2 model {res['geomean_trn2']:.1f} (paper "
              f"{PAPER_TRN2_GEOMEAN_PCT:.0f})")


# ---- the measured corpus: per-source held-out numbers and variant ranking -----------------------
# The model as it stood before issue 37 (v2.2: the shipped trn1.yaml of 2026-12-01): the "before" of
# every corpus table. Each rule added since is a hardware key; these values switch it off.
V22: dict[str, Any] = {"launch_overhead_s": 0.0, "dma_issue_s": 0.0, "dma_issue_dge_s": 0.0,
                       "dma_packet_overhead_s": 0.0,
                       "tensor_tensor_cycles_per_elem": 1.39, "reciprocal_cycles_per_elem": 4.64,
                       "matmul_fp32_factor": 4.58, "dependent_overhead_cycles": 38,
                       "rename_full_overwrites": "none", "sequential_rules_need_middle_end": False,
                       "sequential_hbm_order": True}


# the rules of each model whose leave-one-out is run (--only loo); the free parameters are refitted each time
LOO_RULES: dict[str, dict[str, Any]] = {
    "before": {k: v for k, v in V22.items() if k not in {p.key for p in FREE_PARAMETERS}}, "after": {}}


def loo_record(held: HeldOut, model: str, classes: dict[str, str], cpu_s: float) -> dict[str, Any]:
    """A leave-one-out run as benchmarks/data/loo_nkibench_*.json keeps it (what --loo-record reads)."""
    what = {"before": "v2.2 rules (main before issue 37: no launch, no DMA issue slots, no packet rule)",
            "after": "v3 as shipped (trn1.yaml rules)"}[model]
    return {"what": "leave-one-out over the paper's 14 NKIBench trn1 baselines: model / measured latency of each "
                    "kernel timed with the free parameters fitted on the other 13 (FIT_GRID: 2 passes x 7 steps, "
                    "all four free parameters, from the documented values), and the kernel class the model gave it",
            "model": f"{model}: {what}", "note": f"rerun {time.strftime('%Y-%m-%d')}, {cpu_s:.0f} s CPU",
            "ratios": {n: round(r, 4) for n, r in zip(held.names, held.ratios)},
            "median_error": round(held.median_error, 4), "worst_error": round(held.worst_error, 4),
            "spearman": None if held.spearman is None else round(held.spearman, 4), "classes": classes}


def corpus_configs(hw_after: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per hardware: the v2.2 model ("before") and the shipped one ("after")."""
    return {hw: {"before": load_hw(hw, V22), "after": after} for hw, after in hw_after.items()}


def run_corpus(cases: list, configs: dict[str, dict[str, Any]], cache_dir: Path | None,
               progress: bool = True, reuse: dict[str, Any] | None = None, log: Path | None = None,
               max_instructions: int | None = None) -> dict[str, Any]:
    """Time every case with each config of its hardware; a case the simulator rejects is listed, not timed.

    ``reuse``: a previous run's JSON whose "before" columns are taken as they are (the v2.2 model does
    not change), so only the shipped model is re-timed. ``log``: each finished row is appended there
    as a JSON line as soon as it is timed (a long run interrupted keeps what it did).
    ``max_instructions``: cases with longer instruction streams are listed under ``skipped``, not timed
    (timing a multi-million-instruction stream takes minutes of CPU per model).
    """
    from perf_corpus import TIMERS
    old = {(r["hw"], r["family"], r["variant"]): r for r in (reuse or {}).get("corpus", {}).get("rows", [])}
    rows, failed, skipped = [], [], []
    for c in cases:
        if c.hw not in configs:
            continue
        t0 = time.perf_counter()
        try:
            trace = c.trace(cache_dir)
        except Exception as exc:        # the simulator rejects it: a fact about the simulator, reported
            failed.append(dict(source=c.source, hw=c.hw, family=c.family, variant=c.variant,
                               error=f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"))
            _log(log, {"failed": failed[-1]})
            if progress:
                print(f"  not run  {c.name:52s} {failed[-1]['error'][:110]}", flush=True)
            continue
        if max_instructions is not None and len(trace.instructions) > max_instructions:
            skipped.append(dict(source=c.source, role=c.role, hw=c.hw, family=c.family, variant=c.variant,
                                instructions=len(trace.instructions)))
            _log(log, {"skipped": skipped[-1]})
            if progress:
                print(f"  skipped  {c.name:52s} {len(trace.instructions)} instructions (> --max-instructions)", flush=True)
            continue
        row = dict(source=c.source, role=c.role, hw=c.hw, family=c.family, variant=c.variant,
                   measured_ms=c.measured_ms, instructions=len(trace.instructions))
        prev = old.get((c.hw, c.family, c.variant))
        for name, hw in configs[c.hw].items():
            if name == "before" and prev is not None and "before_ms" in prev:
                row.update({k: prev[k] for k in ("before_ms", "before_ratio", "before_class")})
                continue
            if c.dge:       # the row's build: its DMA instructions are the DGE's (perf_model.md §2b)
                hw = load_hw(hw, {"dge": True})
            prof = estimate(trace, hw)
            ms = prof.end_to_end_ms if TIMERS[c.timer] else prof.latency    # what the source's timer spans
            row[f"{name}_ms"] = ms
            row[f"{name}_ratio"] = ms / c.measured_ms
            row[f"{name}_class"] = prof.kernel_class
        rows.append(row)
        _log(log, row)
        if progress:
            print(f"  {c.hw} {c.name:52s} measured {c.measured_ms:9.4f} ms  "
                  + "  ".join(f"{n} x{row[f'{n}_ratio']:.2f}" for n in configs[c.hw] if f"{n}_ratio" in row)
                  + f"  [{row.get('after_class', row.get('before_class'))}, {time.perf_counter() - t0:.0f} s]",
                  flush=True)
    return dict(rows=rows, failed=failed, skipped=skipped)


def _log(log: Path | None, record: dict) -> None:
    if log is not None:
        with log.open("a") as f:
            f.write(json.dumps(record) + "\n")


def rows_from_log(path: Path, cases: list) -> dict[str, Any]:
    """A recorded run (``--json OUT`` writes OUT.rows.jsonl as it goes): its rows, rejections and skips for the
    selected cases (the last record of a case wins); selected cases it has nothing on are listed as not timed."""
    wanted = {(c.hw, c.family, c.variant) for c in cases}
    last: dict[tuple, tuple[str, dict]] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            rec = json.loads(line)
            kind, r = next(((k, rec[k]) for k in ("failed", "skipped") if k in rec), ("row", rec))
            if (r["hw"], r["family"], r["variant"]) in wanted:
                last[(r["hw"], r["family"], r["variant"])] = (kind, r)
    out: dict[str, list] = {"row": [], "failed": [], "skipped": []}
    for key, (kind, r) in last.items():
        out[kind].append(r)
    untimed = [dict(source=c.source, role=c.role, hw=c.hw, family=c.family, variant=c.variant)
               for c in cases if (c.hw, c.family, c.variant) not in last]
    return dict(rows=out["row"], failed=out["failed"], skipped=out["skipped"], untimed=untimed)


def source_table(rows: list[dict], name: str) -> list[dict]:
    """Per (hardware, source, role): n, Spearman, median / p90 / worst of max(r, 1/r), geometric-mean ratio."""
    out = []
    for (hw, src, role), group in sorted(_groups(rows, ("hw", "source", "role")).items()):
        st = error_stats([r[f"{name}_ms"] for r in group], [r["measured_ms"] for r in group])
        out.append(dict(hw=hw, source=src, role=role, **st.__dict__))
    return out


def ranking_table(rows: list[dict], name: str) -> list[dict]:
    """Per family of >= 3 variants: Spearman, whether the model picks the measured fastest, what picking by the
    model loses (measured latency of its pick over the measured best), and the direction of each measured step
    (consecutive variants of a trace whose measured latencies differ by more than 2%)."""
    out = []
    for (hw, fam), group in sorted(_groups(rows, ("hw", "family")).items()):
        if len(group) < 3:
            continue
        model = [r[f"{name}_ms"] for r in group]
        meas = [r["measured_ms"] for r in group]
        pick = int(np.argmin(model))
        best = float(min(meas))
        agree, pairs = pairwise_agreement(model, meas)
        steps = wrong = flat = 0
        for a, b in zip(group, group[1:]):
            dm = b["measured_ms"] / a["measured_ms"]
            if abs(dm - 1) <= 0.02:
                continue
            steps += 1
            dp = b[f"{name}_ms"] / a[f"{name}_ms"]
            if abs(dp - 1) <= 0.005:
                flat += 1
            elif (dp < 1) != (dm < 1):
                wrong += 1
        out.append(dict(hw=hw, family=fam, n=len(group), spearman=spearman(model, meas), pairwise=agree, pairs=pairs,
                        picks_fastest=bool(meas[pick] <= best * 1.02), loss=meas[pick] / best,
                        steps=steps, wrong_direction=wrong, flat=flat))
    return out


def pairwise_agreement(model: list[float], measured: list[float], tol: float = 0.02) -> tuple[float | None, int]:
    """Share of variant pairs the model orders as the hardware did, over pairs whose measured latencies differ
    by more than ``tol``; a pair the model calls equal (within 0.5%) counts half. None without such pairs."""
    score, pairs = 0.0, 0
    for i in range(len(model)):
        for j in range(i + 1, len(model)):
            dm = measured[j] / measured[i]
            if abs(dm - 1) <= tol:
                continue
            pairs += 1
            dp = model[j] / model[i]
            score += 0.5 if abs(dp - 1) <= 0.005 else float((dp < 1) == (dm < 1))
    return (score / pairs if pairs else None), pairs


ROLE_GROUP = {"fit": "fit (in-sample)", "tuned": "seen (tuned, dev)", "dev": "seen (tuned, dev)",
              "held-out": "held-out", "ranking": "held-out, ranking only (level of another configuration)"}


def class_table(rows: list[dict], name: str) -> list[dict]:
    """Per (hardware, role group, kernel class under that model): n, median / worst of max(r, 1/r), geomean."""
    out = []
    keyed = [dict(r, group=ROLE_GROUP.get(r["role"], r["role"]), cls=r[f"{name}_class"]) for r in rows]
    for (hw, group, cls), g in sorted(_groups(keyed, ("hw", "group", "cls")).items()):
        st = error_stats([r[f"{name}_ms"] for r in g], [r["measured_ms"] for r in g])
        out.append(dict(hw=hw, group=group, kernel_class=cls, **st.__dict__))
    for (hw, group), g in sorted(_groups(keyed, ("hw", "group")).items()):
        st = error_stats([r[f"{name}_ms"] for r in g], [r["measured_ms"] for r in g])
        out.append(dict(hw=hw, group=group, kernel_class="all", **st.__dict__))
    return out


def _groups(rows: list[dict], keys: tuple[str, ...]) -> dict[tuple, list[dict]]:
    g: dict[tuple, list[dict]] = {}
    for r in rows:
        g.setdefault(tuple(r[k] for k in keys), []).append(r)
    return g


def print_corpus(res: dict, names: tuple[str, ...] = ("before", "after")) -> None:
    for name in names:
        print(f"\n  per source ({name}; ratio = model / measured; errors are max(r, 1/r))")
        print(f"  {'hw':4s} {'source':24s} {'role':8s} {'n':>3s} {'rho':>6s} {'median':>7s} {'p90':>6s} {'worst':>7s} "
              f"{'geomean':>8s}")
        for t in source_table(res["rows"], name):
            rho = f"{t['spearman']:6.2f}" if t["spearman"] is not None else f"{'-':>6s}"
            print(f"  {t['hw']:4s} {t['source']:24s} {t['role']:8s} {t['n']:3d} {rho} {t['median_error']:7.2f} "
                  f"{t['p90_error']:6.2f} {t['worst_error']:7.2f} {t['geomean_ratio']:8.2f}")
        print(f"\n  variant ranking per family ({name})")
        print(f"  {'hw':4s} {'family':28s} {'n':>3s} {'rho':>6s} {'picks best':>10s} {'loss':>6s} {'steps':>5s} "
              f"{'wrong':>5s} {'flat':>4s}")
        for t in ranking_table(res["rows"], name):
            print(f"  {t['hw']:4s} {t['family']:28s} {t['n']:3d} {t['spearman']:6.2f} {str(t['picks_fastest']):>10s} "
                  f"{t['loss']:6.2f} {t['steps']:5d} {t['wrong_direction']:5d} {t['flat']:4d}")
    if res.get("skipped"):
        print(f"\n  {len(res['skipped'])} measured kernels over --max-instructions (not timed):")
        for f in res["skipped"]:
            print(f"    {f['hw']} {f['family']}:{f['variant']} ({f['instructions']} instructions)")
    if res["failed"]:
        print(f"\n  {len(res['failed'])} measured kernels the simulator does not run (not timed):")
        for f in res["failed"]:
            print(f"    {f['hw']} {f['family']}:{f['variant']}: {f['error'][:150]}")


def uncertainty_from(rows: list[dict], loo: "HeldOut | None", loo_classes: dict[str, str] | None,
                     loo_basis: str = "leave-one-out") -> dict[str, Any]:
    """The uncertainty.yaml table: per hardware and kernel class, the interval of HELD-OUT residuals only.

    Residuals are measured / model of the shipped model ("after") on sources whose role is held-out,
    plus the leave-one-out residuals of the fit source (each kernel timed with parameters fitted
    without it) when given. Tuned and dev sources never enter (docs/perf_model.md §7).
    """
    by: dict[str, dict[str, list[tuple[float, str]]]] = {}
    for r in heldout_rows(rows, loo, loo_classes, loo_basis):
        src = r["source"] + (f" ({r['basis']})" if r["basis"] != "held-out" else "")
        by.setdefault(r["hw"], {}).setdefault(r["kernel_class"], []).append((r["measured_ms"] / r["model_ms"], src))
    hardware = {}
    for hw, classes in sorted(by.items()):
        # every class with a residual: one or two give no interval of their own, but they tell the error bar
        # that the class was measured (pooled, widened to them) rather than never (a prior)
        entries = {c: table_entry([v for v, _ in res], [s for _, s in res]) for c, res in sorted(classes.items())}
        pooled = [x for res in classes.values() for x in res]
        hardware[hw] = {"classes": entries, "pooled": table_entry([v for v, _ in pooled], [s for _, s in pooled])}
    return {"coverage": COVERAGE, "hardware": hardware}


def heldout_rows(rows: list[dict], loo: "HeldOut | None", loo_classes: dict[str, str] | None,
                 loo_basis: str = "leave-one-out") -> list[dict]:
    """The residuals :func:`uncertainty_from` takes its intervals over, one per kernel (for heldout.csv)."""
    out = [dict(source=r["source"], family=r["family"], variant=r["variant"], hw=r["hw"], kernel_class=r["after_class"],
                measured_ms=r["measured_ms"], model_ms=r["after_ms"], basis="held-out")
           for r in rows if r["role"] == "held-out"]
    if loo is not None and loo_classes:
        for name, ratio, m in zip(loo.names, loo.ratios, loo.measured_s):
            out.append(dict(source="accelopt-nkibench-trn1", family=f"nkibench/{name}", variant="baseline", hw="trn1",
                            kernel_class=loo_classes[name], measured_ms=m * 1e3, model_ms=ratio * m * 1e3,
                            basis=loo_basis))
    return out


def write_heldout(rows: list[dict], path: Path = RESIDUALS) -> None:
    cols = ("source", "family", "variant", "hw", "kernel_class", "measured_ms", "model_ms", "basis")
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{r[k]:.6g}" if isinstance(r[k], float) else r[k]) for k in cols})


def write_uncertainty(table: dict[str, Any], path: Path = UNCERTAINTY) -> None:
    sources = sorted({s for hw in table["hardware"].values() for s in hw["pooled"]["sources"]})
    head = ("# Error bars of the performance model (accelopt_nb/perf/uncertainty.py): per hardware and kernel class,\n"
            "# a log-normal prediction interval (coverage below) of measured/model latency over HELD-OUT residuals:\n"
            "# held-out corpus sources and, when the run includes it, the fit source's leave-one-out (docs/perf_model.md\n"
            f"# §7, §9). This table: {', '.join(sources)}. The residuals themselves: heldout.csv next to this file.\n"
            "# Written by `python benchmarks/perf_fidelity.py --write-uncertainty`; do not edit by hand.\n")
    path.write_text(head + yaml.safe_dump(table, sort_keys=False))


def _x(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}"


_PLACEHOLDER = {"--autocomp": "AUTOCOMP", "--accelopt-repo": "ACCELOPT", "--trace-cache": "CACHE", "--json": "OUT.json",
                "--rows": "ROWS.jsonl", "--reuse": "OLD.json"}


def _command_line(argv: list[str]) -> str:
    """The command as a reader would type it: this machine's paths replaced by what they stand for."""
    out = []
    for prev, a in zip([""] + list(argv), argv):
        if prev == "--clone":
            out.append(a.partition("=")[0] + "=CLONE")
            continue
        out.append(_PLACEHOLDER.get(prev, "PATH" if Path(a).is_absolute() else a))
    return " ".join(f"'{a}'" if any(ch in a for ch in "|()* ") else a for a in out)


def error_bar_table(table: dict[str, Any]) -> list[str]:
    """What a profile of each class gets from an uncertainty table: which bars rest on residuals, which are priors."""
    out = ["| hw | class | basis | n (own) | interval | rests on |", "|---|---|---|---:|---|---|"]
    for hw in sorted(table["hardware"]):
        for c in KERNEL_CLASSES:
            u = bar(table, hw, c, load_hw(hw).model_error)
            own = ((table["hardware"][hw].get("classes") or {}).get(c) or {}).get("n", 0)
            why = {"held-out": ", ".join(u.sources),
                   "pooled": f"{hw} pooled ({u.n}: {', '.join(u.sources)}), the class's own {own} and its prior",
                   "prior": f"no {hw} residual of this class"}[u.basis]
            out.append(f"| {hw} | {CLASS_LABEL[c]} | {u.basis} | {u.n if u.basis == 'held-out' else own} | "
                       f"×{u.low:.2f}–×{u.high:.2f} | {why} |")
    return out


def markdown_tables(res: dict, names: tuple[str, ...], command: str,
                    looks: "dict[str, tuple[HeldOut, dict[str, Any]]] | None" = None,
                    uncertainty: dict[str, Any] | None = None) -> str:
    """The corpus results as markdown (docs/perf_heldout.md): per class, per source, variant ranking, per model."""
    rows = res["rows"]
    n_hw = {hw: len(g) for (hw,), g in _groups(rows, ("hw",)).items()}
    out = ["# Performance model: held-out error tables (generated)", "",
           f"Written by `{command}`; do not edit by hand (docs/perf_model.md §7 explains the protocol).",
           "Models: " + ", ".join(f"`{n}`" for n in names) + " — `before` is v2.2 (main before issue 37), `after` the "
           "shipped model, any other the shipped model under its `--variant` overrides. Errors are max(r, 1/r) of "
           "r = model / measured; geomean > 1 means the model is slow. Kernels timed: "
           + ", ".join(f"{hw} {n}" for hw, n in sorted(n_hw.items())) + ".", ""]
    for name in names:
        out += [f"## Model `{name}`", "", "### Fit set vs held-out, per kernel class", "",
                "| hw | kernels | class | n | median | worst | geomean | ρ |", "|---|---|---|---:|---:|---:|---:|---:|"]
        for t in class_table(rows, name):
            out.append(f"| {t['hw']} | {t['group']} | {t['kernel_class']} | {t['n']} | ×{t['median_error']:.2f} | "
                       f"×{t['worst_error']:.2f} | {t['geomean_ratio']:.2f} | {_x(t['spearman'])} |")
        out += ["", "### Per source", "", "| hw | source | role | n | ρ | median | p90 | worst | geomean |",
                "|---|---|---|---:|---:|---:|---:|---:|---:|"]
        for t in source_table(rows, name):
            out.append(f"| {t['hw']} | {t['source']} | {t['role']} | {t['n']} | {_x(t['spearman'])} | "
                       f"×{t['median_error']:.2f} | ×{t['p90_error']:.2f} | ×{t['worst_error']:.2f} | "
                       f"{t['geomean_ratio']:.2f} |")
        out += ["", "### Variant ranking (families of >= 3 measured variants)", "",
                "| hw | family | n | Spearman ρ | pairwise agreement (pairs) | picks fastest | loss | steps | wrong | flat |",
                "|---|---|---:|---:|---:|---|---:|---:|---:|---:|"]
        for t in ranking_table(rows, name):
            out.append(f"| {t['hw']} | {t['family']} | {t['n']} | {t['spearman']:.2f} | {_x(t['pairwise'])} "
                       f"({t['pairs']}) | {'yes' if t['picks_fastest'] else 'no'} | ×{t['loss']:.2f} | {t['steps']} | "
                       f"{t['wrong_direction']} | {t['flat']} |")
        out.append("")
    out += ["## Per kernel", "", "| hw | source | role | family | variant | measured ms | "
            + " | ".join(f"{n} ×" for n in names) + " | class |", "|---|---|---|---|---|---:|" + "---:|" * len(names) + "---|"]
    for r in rows:
        out.append(f"| {r['hw']} | {r['source']} | {r['role']} | {r['family']} | {r['variant']} | {r['measured_ms']:.4g} | "
                   + " | ".join(f"{r[f'{n}_ratio']:.2f}" for n in names) + f" | {r.get('after_class', '')} |")
    if looks:
        out += ["", "## Leave-one-out over the paper's 14 (fit source)", "",
                "Each kernel timed with the free parameters fitted on the other 13 (`--only loo`; all four free "
                "parameters, 2 passes x 7 steps from the documented values). Ratio = model / measured.", ""]
        out += [f"- `{label}`: {rec['model']} ({rec.get('note', '')})" for label, (_, rec) in looks.items()]
        first = next(iter(looks.values()))[0]
        out += ["", "| left out | measured ms | " + " | ".join(f"{label} ×" for label in looks) + " |",
                "|---|---:|" + "---:|" * len(looks)]
        for k, (n, m) in enumerate(zip(first.names, first.measured_s)):
            out.append(f"| {n} | {m * 1e3:.4g} | " + " | ".join(
                f"{dict(zip(h.names, h.ratios))[n]:.3f}" if n in h.names else "not run" for h, _ in looks.values())
                + " |")
        for what, get in (("kernels left out", lambda h: str(len(h.names))),
                          ("median of max(r, 1/r)", lambda h: f"×{h.median_error:.3f}"),
                          ("90th percentile", lambda h: f"×{float(np.percentile(h.errors, 90)):.3f}"),
                          ("worst", lambda h: f"×{h.worst_error:.3f} ({h.names[int(np.argmax(h.errors))]})"),
                          ("Spearman ρ", lambda h: _x(h.spearman)),
                          ("geomean ratio", lambda h: f"{float(np.exp(np.mean(np.log(h.ratios)))):.3f}")):
            out.append(f"| **{what}** | | " + " | ".join(get(h) for h, _ in looks.values()) + " |")
        common = set.intersection(*(set(h.names) for h, _ in looks.values()))
        if 0 < len(common) < max(len(h.names) for h, _ in looks.values()):     # a run cut short: compare like with like
            def on_common(h: HeldOut) -> str:
                e = [max(r, 1 / r) for n, r in zip(h.names, h.ratios) if n in common]
                return f"×{float(np.median(e)):.3f} / ×{max(e):.3f}"
            out.append(f"| **median / worst on the {len(common)} kernels all ran** | | "
                       + " | ".join(on_common(h) for h, _ in looks.values()) + " |")
    if uncertainty is not None:
        out += ["", "## Error bars as profiles get them (uncertainty.yaml written by this run)", "",
                f"Per hardware and class: `held-out` rests on the class's own residuals ({COVERAGE:.0%} prediction "
                "interval), `pooled` on all of the hardware's, widened to the class's own 1-3 and never narrower than "
                "its prior, `prior` on none (x0.5-x2, or the class's bar on other hardware widened by the hardware's "
                "model_error; docs/perf_model.md §9).", ""]
        out += error_bar_table(uncertainty)
    if res.get("untimed"):
        out += ["", "## Not in the recorded run (not timed: CPU budget of the run)", ""]
        out += [f"- {f['hw']} {f['source']} ({f['role']}) {f['family']}:{f['variant']}" for f in res["untimed"]]
    if res.get("skipped"):
        out += ["", "## Not timed this run (over --max-instructions)", ""]
        out += [f"- {f['hw']} {f['family']}:{f['variant']} ({f['instructions']} instructions)" for f in res["skipped"]]
    if res["failed"]:
        out += ["", "## Measured kernels the simulator does not run", ""]
        out += [f"- {f['hw']} {f['family']}:{f['variant']}: {f['error'][:160]}" for f in res["failed"]]
    return "\n".join(out) + "\n"


# ---- report ----------------------------------------------------------------------------------
def print_nkibench(res: dict) -> None:
    print(f"\n  {'problem':24s} {'half':4s} {'measured':>9s} {'before':>8s} {'ratio':>6s} {'after':>8s} {'ratio':>6s}"
          f" | {'HBM MB':>8s} {'before':>6s} {'after':>6s}")
    for r in res["rows"]:
        print(f"  {r['problem']:24s} {r['half']:4s} {r['measured_ms']:9.3f} {r['before_ms']:8.3f} "
              f"{r['before_ratio']:6.2f} {r['after_ms']:8.3f} {r['after_ratio']:6.2f} | {r['measured_hbm_mb']:8.1f} "
              f"{r['before_hbm_ratio']:6.2f} {r['after_hbm_ratio']:6.2f}")
    print(f"\n  {'':16s} {'Spearman':>8s} {'median x':>8s} {'worst x':>8s} {'HBM med x':>9s}")
    for name in ("before", "after"):
        for part in ("all", "fit", "test"):
            s = res[name][part]
            rho = f"{s['spearman']:8.3f}" if s["spearman"] is not None else f"{'-':>8s}"
            print(f"  {name + ' ' + part:16s} {rho} {s['median_error']:8.3f} {s['worst_error']:8.3f} "
                  f"{s['median_hbm_error']:9.3f}")


def plot(out: dict, path: Path) -> None:
    """Left: model vs measured latency of the 14 baselines, before and after. Right: HBM bytes."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = out["nkibench"]["rows"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 5))
    for ax, key, unit in ((axes[0], "ms", "latency (ms)"), (axes[1], "hbm_mb", "HBM bytes (MB)")):
        meas = np.array([r[f"measured_{key}"] for r in rows])
        for name, marker, color in (("before", "x", "tab:gray"), ("after", "o", "tab:blue")):
            model = np.array([r[f"{name}_{key}"] for r in rows])
            held = np.array([r["half"] == "test" for r in rows])
            ax.scatter(meas[~held], model[~held], marker=marker, color=color, label=f"{name} (fit half)")
            hollow = dict(facecolors="none", edgecolors=color) if marker == "o" else dict(color=color)
            ax.scatter(meas[held], model[held], marker=marker, alpha=0.6, label=f"{name} (held out)", **hollow)
        lo, hi = meas.min() / 2, meas.max() * 2
        ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
        ax.plot([lo, hi], [lo * 1.5, hi * 1.5], "k:", lw=0.6)
        ax.plot([lo, hi], [lo / 1.5, hi / 1.5], "k:", lw=0.6)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(f"measured trn1 {unit}")
        ax.set_ylabel(f"model {unit}")
        for r in rows:
            ax.annotate(r["problem"], (r[f"measured_{key}"], r[f"after_{key}"]), fontsize=6, alpha=0.7)
        ax.grid(alpha=0.3, which="both")
    axes[0].legend(fontsize=7)
    a, b = out["nkibench"]["after"], out["nkibench"]["before"]
    axes[0].set_title(f"latency: held-out median x{a['test']['median_error']:.2f} (before x{b['test']['median_error']:.2f}),"
                      f" rho {a['all']['spearman']:.2f}", fontsize=9)
    axes[1].set_title(f"HBM bytes: median x{a['all']['median_hbm_error']:.2f} (before x{b['all']['median_hbm_error']:.2f})",
                      fontsize=9)
    fig.suptitle("accelopt_nb performance model v2 vs measured trn1, the paper's 14 NKIBench baselines")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hw", default="trn1", help="the 'after' trn1 hardware for the older suites (preset or YAML)")
    ap.add_argument("--accelopt-repo", type=Path, help="checkout of github.com/zhang677/AccelOpt (NKIBench, samples)")
    ap.add_argument("--autocomp", type=Path, help="checkout of github.com/ucb-bar/autocomp (its optimization traces)")
    ap.add_argument("--clone", action="append", default=[], metavar="OWNER/NAME=DIR",
                    help="a checkout of github.com/OWNER/NAME for the corpus rows whose kernel lives there "
                         "(github:OWNER/NAME:... locators; e.g. xaviergonzalez/asst4-trainium2=DIR)")
    ap.add_argument("--trace-cache", type=Path, help="keep traces here between runs (keyed by kernel, inputs and "
                                                      "the simulator's source)")
    ap.add_argument("--only", choices=("corpus", "loo", "tutorials", "nkibench", "mamba-paper", "trn2"),
                    help="one suite (default: the corpus tables, then leave-one-out on the paper's 14)")
    ap.add_argument("--no-loo", action="store_true", help="skip the leave-one-out over the paper's 14 (slow)")
    ap.add_argument("--loo", action="store_true", help="(kept for old command lines: leave-one-out is the default)")
    ap.add_argument("--refit", action="store_true", help="nkibench suite: refit the free parameters on the fit half")
    ap.add_argument("--write-uncertainty", action="store_true",
                    help="write accelopt_nb/perf/data/uncertainty.yaml from the held-out residuals")
    ap.add_argument("--json", type=Path, help="also write the results as JSON")
    ap.add_argument("--reuse", type=Path, help="a previous --json: take its 'before' (model v2.2) columns as they are")
    ap.add_argument("--models", default="before,after",
                    help="which models to time on the corpus: before (v2.2), after (shipped); default both")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME:KEY=VALUE[,KEY=VALUE]",
                    help="also time the corpus with the shipped model under these overrides, side by side "
                         "(e.g. no-packet:dma_packet_overhead_s=0)")
    ap.add_argument("--max-instructions", type=int, help="corpus: list, do not time, longer instruction streams")
    ap.add_argument("--loo-record", type=Path, action="append", default=[], metavar="[LABEL=]RECORD.json",
                    help="take the fit source's leave-one-out from this record (benchmarks/data/loo_nkibench_*.json, "
                         "written by --only loo --loo-out) instead of rerunning it; repeat it for before and after "
                         "side by side (labelled LABEL); the last one is the shipped model's, whose residuals feed "
                         "the error bars (its model is named in their basis)")
    ap.add_argument("--loo-models", default="after",
                    help="--only loo: which models' leave-one-out: before (v2.2 rules), after (shipped); comma list")
    ap.add_argument("--loo-folds", help="--only loo: leave out only kernels A-B (indices in name order, e.g. 0-4), "
                                         "so one leave-one-out can run as several processes; --loo-merge joins them")
    ap.add_argument("--loo-merge", type=Path, nargs="+", help="--only loo: join these partial records into --loo-out")
    ap.add_argument("--loo-out", type=Path, help="--only loo: write each leave-one-out record here (MODEL in the "
                                                   "path is replaced by the model's name)")
    ap.add_argument("--rows", type=Path, help="corpus: take every row from a previous run's OUT.rows.jsonl (time "
                                               "nothing; regenerate the tables and error bars from it)")
    ap.add_argument("--tables", type=Path, help="corpus: also write the tables as markdown (docs/perf_heldout.md)")
    ap.add_argument("--select", help="corpus: only cases whose 'source family:variant' matches this regular expression")
    ap.add_argument("--plot", type=Path, help="also draw model vs measured (PNG; needs --accelopt-repo)")
    args = ap.parse_args(argv)
    out: dict[str, Any] = {}
    ok = True
    repo = args.accelopt_repo
    if repo is not None and not (repo / "NKIBench" / "kernels").is_dir():
        print(f"error: {repo} has no NKIBench/kernels directory (is it a checkout of zhang677/AccelOpt?)")
        return 2
    if args.autocomp is not None and not (args.autocomp / "examples").is_dir():
        print(f"error: {args.autocomp} has no examples/ directory (is it a checkout of ucb-bar/autocomp?)")
        return 2
    if args.only == "loo" and args.loo_merge:
        parts = [json.loads(p.read_text()) for p in args.loo_merge]
        meas = measured_table()
        ratios = {n: r for rec in parts for n, r in rec["ratios"].items()}
        names = sorted(ratios)
        held = HeldOut(tuple(names), tuple(ratios[n] for n in names), tuple(meas[n]["latency_ms"] / 1e3 for n in names))
        rec = dict(parts[0], ratios=ratios, median_error=round(held.median_error, 4),
                   worst_error=round(held.worst_error, 4), spearman=None if held.spearman is None else round(held.spearman, 4),
                   note=f"{parts[0]['note'].split(',')[0]}, {len(parts)} processes, "
                        f"{sum(float(p['note'].split(', ')[-1].split(' ')[0]) for p in parts):.0f} s CPU")
        args.loo_out.write_text(json.dumps(rec, indent=1) + "\n")
        print("\n".join("  " + line for line in held.format().splitlines()))
        print(f"wrote {args.loo_out}")
        return 0
    if args.only == "loo":
        if repo is None:
            print("\n--only loo needs --accelopt-repo DIR (a checkout of github.com/zhang677/AccelOpt)")
            return 2
        from perf_corpus import load_cases
        cases = [c for c in load_cases(accelopt=repo) if c.source == "accelopt-nkibench-trn1"]
        traces14 = {c.family.split("/", 1)[1]: c.trace(args.trace_cache) for c in cases}
        out["leave_one_out"] = {}
        for model in args.loo_models.split(","):
            rules = LOO_RULES[model]
            print(f"\nleave-one-out over the paper's 14, model {model} (each timed with the free parameters "
                  f"fitted on the other 13)")
            t0 = time.process_time()
            folds = None
            if args.loo_folds:
                lo, _, hi = args.loo_folds.partition("-")
                folds = list(range(int(lo), int(hi or lo) + 1))
            hw = load_hw("trn1", rules)
            classes = {p: estimate(t, hw).kernel_class for p, t in traces14.items()}
            names = sorted(traces14)
            # the kernels whose left-out error was largest in v2.2 first: a run cut short keeps the telling folds
            order = sorted(folds if folds is not None else range(len(names)),
                           key=lambda k: LOO_FIRST.index(names[k]) if names[k] in LOO_FIRST else len(LOO_FIRST) + k)
            cache = LatencyCache(FIT_GRID["params"])
            done: list[HeldOut] = []
            for k in order:     # fold by fold, one shared cache; the record is rewritten after each fold
                done.append(run_loo(traces14, "trn1", rules, [k], cache))
                held = HeldOut(tuple(h.names[0] for h in done), tuple(h.ratios[0] for h in done),
                               tuple(h.measured_s[0] for h in done))
                rec = loo_record(held, model, classes, time.process_time() - t0)
                if args.loo_out:
                    Path(str(args.loo_out).replace("MODEL", model)).write_text(json.dumps(rec, indent=1) + "\n")
            out["leave_one_out"][model] = rec
            print("\n".join("  " + line for line in held.format().splitlines()))
    if args.only in (None, "corpus"):
        from perf_corpus import load_cases
        skipped: list[str] = []
        clones = {k: Path(v) for k, _, v in (spec.partition("=") for spec in args.clone)}
        cases = load_cases(autocomp=args.autocomp, accelopt=repo, skipped=skipped, clones=clones)
        order = {"held-out": 0, "ranking": 1, "dev": 2, "fit": 3, "tuned": 4}    # the numbers that matter most come first
        cases.sort(key=lambda c: order.get(c.role, len(order)))
        if args.select:
            import re
            cases = [c for c in cases if re.search(args.select, f"{c.source} {c.name}")]
        if skipped:
            print(f"skipping {len(skipped)} corpus rows whose kernels need a checkout: "
                  f"{sorted({s.split('(')[-1].rstrip(')') for s in skipped})}")
        configs = corpus_configs({"trn1": load_hw("trn1"), "trn2": load_hw("trn2")})
        wanted = set(args.models.split(","))
        configs = {hw: {n: c for n, c in cfg.items() if n in wanted} for hw, cfg in configs.items()}
        for spec in args.variant:
            vname, _, kv = spec.partition(":")
            over = {k: yaml.safe_load(v) for k, v in (item.split("=", 1) for item in kv.split(",") if item)}
            for hw in configs:
                configs[hw][vname] = load_hw(hw, over)
        reuse = None
        if args.reuse:      # a --json file, or the rows log a run writes next to it as it goes
            text = args.reuse.read_text()
            reuse = (json.loads(text) if args.reuse.suffix == ".json" else
                     {"corpus": {"rows": [r for r in (json.loads(line) for line in text.splitlines() if line.strip())
                                          if "failed" not in r and "skipped" not in r]}})
        print(f"measured corpus: {len(cases)} kernels (per source, per family; before = model v2.2, after = shipped)")
        log = args.json.with_suffix(".rows.jsonl") if args.json else None
        if args.rows:
            res = rows_from_log(args.rows, cases)
        else:
            res = run_corpus(cases, configs, args.trace_cache, reuse=reuse, log=log,
                             max_instructions=args.max_instructions)
        names = tuple(n for n in next(iter(configs.values()), {}) if all(f"{n}_ms" in r for r in res["rows"]))
        out["corpus"] = dict(res, sources={n: source_table(res["rows"], n) for n in names},
                             ranking={n: ranking_table(res["rows"], n) for n in names})
        print_corpus(res, names)
        held = None
        if repo is not None and not args.no_loo and args.only in (None, "loo"):
            traces14 = {c.family.split("/", 1)[1]: c.trace(args.trace_cache) for c in cases
                        if c.source == "accelopt-nkibench-trn1"}
            print("\nleave-one-out over the paper's 14 (each timed with the free parameters fitted on the other 13)")
            held = run_loo(traces14, "trn1")
            out["leave_one_out"] = dict(ratios=dict(zip(held.names, held.ratios)), median_error=held.median_error,
                                        worst_error=held.worst_error, spearman=held.spearman)
            print("\n".join("  " + line for line in held.format().splitlines()))
        loo_basis, loo_classes = "leave-one-out", None
        looks: dict[str, tuple[HeldOut, dict[str, Any]]] = {}
        if held is None and args.loo_record:
            meas = measured_table()
            for spec in args.loo_record:
                label, _, path = str(spec).rpartition("=")
                rec = json.loads(Path(path).read_text())
                loo_names = sorted(rec["ratios"])
                held = HeldOut(tuple(loo_names), tuple(rec["ratios"][n] for n in loo_names),
                               tuple(meas[n]["latency_ms"] / 1e3 for n in loo_names))
                label = label or rec["model"].split(":")[0].split(" ")[0]
                looks[label] = (held, rec)
                loo_basis, loo_classes = f"leave-one-out {LOO_VERSION.get(label, label)}", rec["classes"]
                print(f"\nleave-one-out over the paper's 14 from {Path(path).name} ({rec['model']})")
        elif held is not None:
            looks["after"] = (held, {"model": "after: the shipped model", "note": "rerun in this run"})
        table = None
        if args.write_uncertainty:
            classes = loo_classes or {r["family"].split("/", 1)[1]: r["after_class"] for r in res["rows"]
                                      if r["source"] == "accelopt-nkibench-trn1"}
            table = uncertainty_from(res["rows"], held, classes, loo_basis)
        if args.tables:
            cmd = "python benchmarks/perf_fidelity.py " + _command_line(argv if argv is not None else sys.argv[1:])
            args.tables.write_text(markdown_tables(res, names, cmd, looks, table))
            print(f"wrote {args.tables}")
        if table is not None:
            write_uncertainty(table)
            write_heldout(heldout_rows(res["rows"], held, classes, loo_basis))
            out["uncertainty"] = table
            print(f"\nwrote {UNCERTAINTY} and {RESIDUALS}")
    if args.only in ("tutorials",):
        configs = {"before": load_hw(args.hw, BEFORE), "after": load_hw(args.hw)}
        print(f"tutorial progressions (published trn1; every step within {STEP_TOLERANCE:.0%})")
        out["tutorials"] = run_tutorials(configs)
        for s in out["tutorials"]["steps"]:
            print(f"  {s['step']:48s} published {s['published']:5.2f}x before {s['before']:5.2f}x "
                  f"after {s['after']:5.2f}x  {'ok' if s['within'] else 'OFF'}"
                  + (f"  (not held: {s['not_held']})" if s["not_held"] else ""))
        ok &= out["tutorials"]["all_within"]
    traces: dict[str, Any] = {}
    after = load_hw(args.hw)
    configs = {"before": load_hw(args.hw, BEFORE), "after": after}
    if args.only in ("nkibench", "mamba-paper", "trn2") and repo is None and args.only != "trn2":
        print("\nthis suite needs --accelopt-repo DIR (a checkout of github.com/zhang677/AccelOpt)")
        return 2
    if args.only == "nkibench":
        print("\nthe paper's 14 NKIBench baselines vs measured trn1 (fit half / held-out half)")
        traces = nkibench_traces(repo, list(measured_table()))
        if args.refit:
            fit_half, _ = split(traces)
            meas = measured_table()
            cal = fit([traces[p] for p in fit_half], [meas[p]["latency_ms"] / 1e3 for p in fit_half],
                      base=load_hw(args.hw, documented_overrides()), **FIT_GRID,
                      progress=lambda m: print(f"  fit: {m}", flush=True))
            out["refit"] = cal.overrides
            print(f"  fitted on {fit_half}: {cal.overrides}")
            configs["after"] = cal.hw()
        out["nkibench"] = run_nkibench(traces, configs)
        print_nkibench(out["nkibench"])
    if args.only == "mamba-paper":
        print("\nthe paper repository's Mamba progression (samples/nki/mamba_v1..v3, NKIBench mamba task)")
        m = run_mamba_paper(repo, configs)
        out["mamba_paper"] = m
        for v, lat in m["latency_ms"].items():
            print(f"  {v}: before {lat['before']:.3f} ms  after {lat['after']:.3f} ms")
        print(f"  v1 -> v3 speedup: measured {m['measured_speedup_v1_v3']:.2f}x  before {m['before_speedup_v1_v3']:.2f}x"
              f"  after {m['after_speedup_v1_v3']:.2f}x  {'ok' if m['within'] else 'OFF'}")
        ok &= m["within"]
    if args.only == "trn2":
        print("\ntrn2 plausibility (the model's trn2 preset)")
        out["trn2"] = run_trn2(traces or None, after, load_hw("trn2"))
        print_trn2(out["trn2"])
    if args.json:
        args.json.write_text(json.dumps(out, indent=2, default=float))
    if args.plot and "nkibench" in out:
        plot(out, args.plot)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
