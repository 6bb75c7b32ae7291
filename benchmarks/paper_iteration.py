"""One paper-size search iteration (B·N·K = 144 candidates at the paper's shapes), old path vs new.

    .venv/bin/python benchmarks/paper_iteration.py [--problems silu matmul] [--candidates 144]
        [--arms old new-full new-multi] [--workers 2] [--llm-latency 0] [--fake tiles|variants]
        [--no-unit] [--json out.json] [--trees before=DIR after=DIR] [--fixer-smoke]

Against a local FAKE model (an OpenAI-compatible server on loopback) that answers at once (or
after ``--llm-latency`` seconds) with distinct, valid kernels: the problem's baseline with a
distinct module constant each, so no two kernels share a syntax tree, and (``--fake tiles``, the
default) its ``TILE_N`` set to the n-th width of a tile mix (``TILE_MIX``), so the candidates have
a few different instruction streams and latencies (``--fake variants``: all the baseline's).
Planner calls are 72 (= B·N of the paper), executor calls 144 (K = 2), in one iteration from the
baseline. The unit of the goal (issue 33: one paper-size iteration at most 5x it) is one full
evaluation of the baseline, measured first in the same run (``--no-unit`` skips it).

Arms, measured side by side in one run, each with its own empty evaluation cache:

* ``old``: the v1 flow: plan, then execute, then evaluate every candidate at full fidelity
  (``runtime.pipeline: false``, ``evaluation.fidelity: full``);
* ``new-full``: pipelined (executor calls start as each plan arrives, each kernel is evaluated as
  it arrives), every candidate at full fidelity;
* ``new-multi``: pipelined, candidates screened, the beam confirmed at full fidelity (the paper
  preset).

The timed part is one ``Session.step()`` (plan → execute → evaluate → select → summarize); the
baseline is evaluated once per problem beforehand and handed to every arm's cache, so opening a
run evaluates nothing. Besides wall time (which on a shared box mostly measures the other jobs)
each arm reports the CPU time of its evaluation processes and that CPU time divided by the
workers: the iteration's evaluation time on an otherwise idle machine, if the workers never idle. Under ``new-multi`` the beam's
confirmations run in the evaluation stream once no screen waits for a worker. With
``--candidates`` below 144 the 144-candidate time is **extrapolated** (printed as such): the
measured time plus the missing candidates' evaluations (the mean evaluation time of the measured
candidates, spread over the workers); confirmations do not grow with the candidates.

``--trees LABEL=DIR ...`` compares checkouts (say main before a change and after it) in one run:
for each problem, each tree's own ``benchmarks/paper_iteration.py`` runs in turn in a child process
importing that tree (same options), and the table at the end has, per problem and tree, the unit,
the iteration's evaluation CPU and their ratio. ``--fixer-smoke`` adds the fixer arm on a smoke
run: one iteration of matmul at the small shape with the offline FAKE model of ``accelopt
reproduce --smoke`` (one of its rewrites has a wrong accumulation the fixer repairs), the arms
"beam + memory" and "beam + memory + fixer" (``fixer.attempts: 1``) side by side.
"""
from __future__ import annotations

import argparse
import json
import re
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import nkibench  # noqa: E402
from accelopt_nb.fake_model.nki_model import kernel_in, role_of  # noqa: E402
from accelopt_nb.fake_model.server import FakeOpenAIServer, Reply, Slow  # noqa: E402
from accelopt_nb.search.launch import LaunchSpec, open_session  # noqa: E402

ARMS = {"old": dict(pipeline=False, fidelity="full"), "new-full": dict(pipeline=True, fidelity="full"),
        "new-multi": dict(pipeline=True, fidelity="multi")}
PAPER_CANDIDATES = 144


# The tile widths the tile-mix fake cycles through: the baseline's 512 and narrower or wider ones that
# each problem's kernel allows (matmul: at most 512, one PSUM bank and the TensorE moving free size).
TILE_MIX = {"silu": (128, 256, 512, 1024), "matmul": (128, 256, 384, 512)}
_TILE = re.compile(r"^TILE_N = \d+", re.MULTILINE)


class DistinctKernels:
    """FAKE planner/executor: plan n says "variant n"; executor answer = parent + a distinct constant
    (``tiles``: and its ``TILE_N`` set to the n-th width of a tile mix), so no two kernels share a
    syntax tree; with a tile mix, kernels of one width share a trace-only instruction stream."""

    def __init__(self, latency_s: float, tiles: tuple[int, ...] = ()) -> None:
        self.latency_s = latency_s
        self.tiles = tiles
        self.n = 0
        self._lock = threading.Lock()

    def __call__(self, body: dict):
        with self._lock:
            self.n += 1
            n = self.n
        role = role_of(body)
        if role == "planner":
            reply = Reply(f"The kernel is fine as it is.\n\nPlan:\nVariant {n}: tag the module with a constant.")
        elif role == "executor":
            source = kernel_in(body)
            if self.tiles:
                source = _TILE.sub(f"TILE_N = {self.tiles[n % len(self.tiles)]}", source)
            reply = Reply(f"```python\n{source}\n\n_VARIANT = {n}\n```")
        else:
            reply = Reply("No optimization found")
        return Slow(self.latency_s, reply) if self.latency_s else reply


def full_evaluation(problem: str) -> dict:
    """The unit: one full evaluation of the problem's baseline (every seed and adversarial input at
    the paper shape, profiled), as ``accelopt evaluate`` runs it: wall time and the CPU of its process.
    The first one warms the shared input cache (inputs and references, as the search's workers find
    them); the second, timed, evaluates again (no result cache)."""
    from accelopt_nb.evaluation import evaluate
    from accelopt_nb.search.config import SearchConfig
    from accelopt_nb.search.problem import SearchProblem

    ev = SearchConfig.from_preset("paper").evaluation
    target = SearchProblem.from_nkibench(problem, ev.shape_preset)
    run = (lambda: evaluate(target.eval_target, target.baseline_source, backend=ev.backend, hw=ev.hw,
                            preset=target.preset, cache=False))
    run()
    cpu0, t0 = children_cpu_s(), time.perf_counter()
    result = run()
    return {"status": result.status.value, "wall_s": time.perf_counter() - t0, "cpu_s": children_cpu_s() - cpu0}


def seed_baseline(problem: str, root: Path, cache_dir: Path) -> None:
    """Put the problem's baseline result (evaluated once, here) into an arm's empty cache."""
    from accelopt_nb.evaluation import evaluate, make_job
    from accelopt_nb.evaluation.api import open_cache
    from accelopt_nb.search.config import SearchConfig
    from accelopt_nb.search.problem import SearchProblem

    ev = SearchConfig.from_preset("paper").evaluation
    target = SearchProblem.from_nkibench(problem, ev.shape_preset)
    job = make_job(target.eval_target, target.baseline_source, backend=ev.backend, hw=ev.hw, preset=target.preset)
    shared = open_cache(root / f"baseline-{problem}")
    result = shared.get(job)
    if result is None:
        result = evaluate(target.eval_target, target.baseline_source, backend=ev.backend, hw=ev.hw,
                          preset=target.preset, cache=shared)
    open_cache(cache_dir).put(job, result)


def children_cpu_s() -> float:
    """CPU time of the finished child processes (warm workers count once the pool has shut down)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def measure(problem: str, arm: str, candidates: int, workers: int, latency_s: float, root: Path,
            fake: str = "tiles") -> dict:
    settings = ARMS[arm]
    seed_baseline(problem, root, root / f"cache-{arm}")
    cpu0 = children_cpu_s()
    model = DistinctKernels(latency_s, TILE_MIX.get(problem, ()) if fake == "tiles" else ())
    with FakeOpenAIServer(models=["fake-kernels"], responder=model) as srv:
        spec = LaunchSpec(problem, run_dir=root / arm / problem, preset="paper",
                          overrides={"iterations": 2, "plans_per_kernel": candidates // 2, "samples_per_plan": 2,
                                     "evaluation.fidelity": settings["fidelity"]},
                          model={"base_url": srv.url, "model": "fake-kernels", "price": "gpt-oss-120b@self-hosted"},
                          pipeline=settings["pipeline"], eval_workers=workers, eval_cache=root / f"cache-{arm}")
        t_open = time.perf_counter()
        with open_session(spec) as s:
            t0 = time.perf_counter()
            s.step()
            wall = time.perf_counter() - t0
            kernels = s.iteration_kernels(0)
            rows = [r for r in s.store.rows("steps", s.run_id) if r["iteration"] == 0]
            phases = {r["step"]: _seconds(r) for r in rows}
            statuses: dict[str, int] = {}
            for k in kernels:
                statuses[k.status or "none"] = statuses.get(k.status or "none", 0) + 1
            ids = {k.kernel_id for k in kernels}
            evals = [r["result"] for r in s.store.rows("evaluations", s.run_id) if r["kernel_id"] in ids]
            candidate_s = [e["wall_time_s"] or 0.0 for e in evals if e["fidelity"] != "confirm"]
            confirm_s = [e["wall_time_s"] or 0.0 for e in evals if e["fidelity"] == "confirm"]
            out = {"problem": problem, "arm": arm, "candidates": len(kernels), "wall_s": wall,
                   "open_s": t0 - t_open, "phases_s": phases, "statuses": statuses, "confirmed": len(confirm_s),
                   "candidate_eval_s": sum(candidate_s), "confirm_eval_s": sum(confirm_s),
                   # verdicts taken from a kernel with the same program (not evaluated again)
                   "confirm_inherited": sum(1 for e in evals if e["fidelity"] == "confirm" and e.get("inherited_from")),
                   "screen_inherited": sum(1 for e in evals if e["fidelity"] == "screen" and e.get("inherited_from")),
                   "llm_calls": srv.chat_requests, "beam": len(s.beam)}
    out["eval_cpu_s"] = children_cpu_s() - cpu0       # the session closed: its pool is shut down
    out["idle_box_s"] = out["eval_cpu_s"] / workers
    missing = PAPER_CANDIDATES - len(kernels)
    mean = sum(candidate_s) / max(1, len(candidate_s))
    out["extrapolated_144_s"] = None if missing <= 0 else wall + missing * mean / workers
    # evaluation CPU at 144 candidates: the candidates' share of the measured CPU (by their share of
    # the summed evaluation time) grown to 144; confirmations do not grow with the candidates
    share = sum(candidate_s) / max(1e-9, sum(candidate_s) + sum(confirm_s))
    out["eval_cpu_144_s"] = out["eval_cpu_s"] + max(0, missing) * out["eval_cpu_s"] * share / max(1, len(candidate_s))
    return out


def fixer_smoke(root: Path, workers: int) -> list[dict]:
    """The fixer arm on a smoke run (see the module docstring): per arm, wall time, the evaluation
    CPU of its workers, candidates by status, repairs made and correct, kernels confirmed."""
    from accelopt_nb.reproduce.offline import FAKE_MODELS, fake_responder

    rows = []
    for arm, overrides in (("beam + memory", {}), ("beam + memory + fixer", {"fixer.attempts": 1})):
        cpu0 = children_cpu_s()
        with FakeOpenAIServer(models=list(FAKE_MODELS), responder=fake_responder()) as srv:
            spec = LaunchSpec("matmul", run_dir=root / "fixer-smoke" / arm.replace(" ", ""), preset="smoke",
                              overrides={"iterations": 1, "evaluation.shape_preset": "small", **overrides},
                              model={"base_url": srv.url, "model": "fake-gpt-oss-120b",
                                     "price": "gpt-oss-120b@self-hosted"},
                              eval_workers=workers, eval_cache=root / "cache-fixer-smoke" / arm.replace(" ", ""))
            with open_session(spec) as s:
                t0 = time.perf_counter()
                report = s.run()
                wall = time.perf_counter() - t0
                statuses: dict[str, int] = {}
                for k in s.iteration_kernels(0):
                    statuses[k.status or "none"] = statuses.get(k.status or "none", 0) + 1
                rows.append({"arm": arm, "wall_s": wall, "statuses": statuses, "repairs": report.repairs,
                             "repairs_correct": report.repairs_correct, "llm_calls": srv.chat_requests,
                             "confirmed": sum(1 for k in s.iteration_kernels(0) if k.confirmed),
                             "speedup": report.speedup})
        rows[-1]["eval_cpu_s"] = children_cpu_s() - cpu0
    return rows


def compare_trees(trees: list[tuple[str, Path]], args: argparse.Namespace, tmp: Path) -> list[dict]:
    """Each tree's own benchmark, problem by problem (the trees take turns), in child processes."""
    import os
    import subprocess

    rows = []
    for problem in args.problems:
        for label, tree in trees:
            out = tmp / f"{label}-{problem}.json"
            cmd = [sys.executable, str(tree / "benchmarks" / "paper_iteration.py"), "--problems", problem,
                   "--arms", *args.arms, "--candidates", str(args.candidates), "--workers", str(args.workers),
                   "--llm-latency", str(args.llm_latency), "--json", str(out)]
            if args.fake != "tiles":
                cmd += ["--fake", args.fake]
            env = dict(os.environ, PYTHONPATH=str(tree))
            print(f"== {label} ({tree}): {problem}", flush=True)
            cpu0 = children_cpu_s()
            subprocess.run(cmd, cwd=tree, env=env, check=True)
            for r in json.loads(out.read_text()):
                r["tree"], r["tree_cpu_s"] = label, children_cpu_s() - cpu0
                rows.append(r)
    return rows


def _seconds(row: dict) -> float:
    from datetime import datetime
    if not (row.get("started_at") and row.get("finished_at")):
        return 0.0
    return (datetime.fromisoformat(row["finished_at"]) - datetime.fromisoformat(row["started_at"])).total_seconds()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", nargs="+", default=["silu", "matmul"], choices=nkibench.list_problems())
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    ap.add_argument("--candidates", type=int, default=PAPER_CANDIDATES, help="candidates (even; 144 = paper)")
    ap.add_argument("--workers", type=int, default=2, help="parallel evaluations")
    ap.add_argument("--llm-latency", type=float, default=0.0, help="seconds the fake model takes per answer")
    ap.add_argument("--fake", choices=["tiles", "variants"], default="tiles",
                    help="tiles: candidates with a mix of tile widths (TILE_MIX); variants: the baseline's stream")
    ap.add_argument("--no-unit", action="store_true", help="skip the unit (a full evaluation of the baseline)")
    ap.add_argument("--json", type=Path, help="write the measurements here")
    ap.add_argument("--trees", nargs="+", metavar="LABEL=DIR", default=[],
                    help="compare checkouts: each tree's own benchmark in turn, per problem")
    ap.add_argument("--fixer-smoke", action="store_true",
                    help="also the fixer arm on a smoke run (matmul, small shape, the offline fake model)")
    args = ap.parse_args()
    if args.candidates < 2 or args.candidates % 2:
        ap.error("--candidates must be an even number >= 2 (K = 2 samples per plan)")
    if any("=" not in t for t in args.trees):
        ap.error("--trees takes LABEL=DIR pairs")
    if args.trees:
        return main_trees([(t.split("=", 1)[0], Path(t.split("=", 1)[1]).resolve()) for t in args.trees], args)
    results = []
    units = {}
    with tempfile.TemporaryDirectory(prefix="accelopt-paper-iteration-") as tmp:
        if args.fixer_smoke:
            smoke = fixer_smoke(Path(tmp), args.workers)
            _print_fixer_smoke(smoke)
        for problem in args.problems:
            if not args.no_unit:
                units[problem] = unit = full_evaluation(problem)
                print(f"{problem:<8} unit: one full evaluation of the baseline ({unit['status']}): "
                      f"{unit['wall_s']:.1f} s wall, {unit['cpu_s']:.1f} s CPU", flush=True)
            for arm in args.arms:
                r = measure(problem, arm, args.candidates, args.workers, args.llm_latency, Path(tmp), args.fake)
                if problem in units:
                    r["unit"] = units[problem]
                    r["x_unit_wall"] = (r["extrapolated_144_s"] or r["wall_s"]) / units[problem]["wall_s"]
                    r["x_unit_cpu"] = r["eval_cpu_s"] / units[problem]["cpu_s"]
                    # the goal's ratio on an idle machine: the iteration's evaluation CPU (at 144) over the workers
                    # against the unit's CPU (one process, so its wall time when nothing else runs)
                    r["x_unit_idle"] = r["eval_cpu_144_s"] / args.workers / units[problem]["cpu_s"]
                results.append(r)
                ext = r["extrapolated_144_s"]
                print(f"{problem:<8} {arm:<10} {r['candidates']:>4} candidates  {r['wall_s']:8.1f} s measured"
                      + (f"  ~{ext:8.1f} s for 144 (extrapolated)" if ext is not None else "")
                      + f"  evaluation CPU {r['eval_cpu_s']:.1f} s = {r['idle_box_s']:.1f} s on {args.workers} idle"
                      + " workers"
                      + f"  statuses {r['statuses']}  confirmed {r['confirmed']}"
                      + f" ({r['confirm_inherited']} inherited; screens inherited {r['screen_inherited']})"
                      + f"  evaluation s (summed over workers): candidates {r['candidate_eval_s']:.1f},"
                      + f" confirmations {r['confirm_eval_s']:.1f}  phases "
                      + ", ".join(f"{p} {s:.1f}" for p, s in r["phases_s"].items())
                      + (f"  = {r['x_unit_wall']:.1f}x the unit's wall time, evaluation CPU "
                         f"{r['x_unit_cpu']:.1f}x its CPU, {r['x_unit_idle']:.1f}x on an idle machine "
                         f"({args.workers} workers)" if "x_unit_wall" in r else ""), flush=True)
    print("\nratios (same problem, same run; at 144 candidates, extrapolated where fewer were measured):")
    at_144 = (lambda r: r["extrapolated_144_s"] or r["wall_s"])
    for problem in args.problems:
        by_arm = {r["arm"]: r for r in results if r["problem"] == problem}
        base = by_arm.get("old")
        for arm, r in by_arm.items():
            if base is not None and arm != "old":
                print(f"  {problem}: old / {arm} = {base['wall_s'] / r['wall_s']:.2f}x measured, "
                      f"{at_144(base) / at_144(r):.2f}x at 144 candidates")
    if args.json:
        args.json.write_text(json.dumps(results + (smoke if args.fixer_smoke else []), indent=2))
    return 0


def _print_fixer_smoke(rows: list[dict]) -> None:
    print("fixer arm, smoke run (matmul, small shape, offline FAKE model, 1 iteration):")
    for r in rows:
        print(f"  {r['arm']:<24} wall {r['wall_s']:6.1f} s  evaluation CPU {r['eval_cpu_s']:6.1f} s  "
              f"kernels {r['statuses']}  repairs {r['repairs']} ({r['repairs_correct']} correct)  "
              f"confirmed {r['confirmed']}  LLM calls {r['llm_calls']}  speedup {r['speedup']:.3f}x", flush=True)


def main_trees(trees: list[tuple[str, Path]], args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="accelopt-paper-iteration-trees-") as tmp:
        smoke = fixer_smoke(Path(tmp), args.workers) if args.fixer_smoke else []
        rows = compare_trees(trees, args, Path(tmp))
    print("\ntrees side by side (CPU s; the ratio: the iteration's evaluation CPU at 144 over the workers "
          "against the unit's CPU, i.e. on an idle machine):")
    print(f"  {'problem':<8} {'tree':<10} {'arm':<10} {'unit CPU':>9} {'iteration eval CPU':>19} {'wall':>8} "
          f"{'confirmed (inherited)':>21} {'ratio':>6}")
    for r in rows:
        unit = r.get("unit", {}).get("cpu_s")
        print(f"  {r['problem']:<8} {r['tree']:<10} {r['arm']:<10} {unit if unit is None else f'{unit:.1f}':>9} "
              f"{r['eval_cpu_144_s']:>19.1f} {r['wall_s']:>8.1f} "
              f"{str(r['confirmed']) + ' (' + str(r.get('confirm_inherited', '-')) + ')':>21} "
              f"{r.get('x_unit_idle', float('nan')):>5.1f}x")
    if smoke:
        _print_fixer_smoke(smoke)
    if args.json:
        args.json.write_text(json.dumps(rows + smoke, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
