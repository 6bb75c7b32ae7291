"""Simulator speed versus NumPy computing the same result, measured side by side in one run.

For every kernel: the NumPy fp32 time of the same math, the simulator with values (and trace), the
simulator in trace-only mode, and the two ratios. Rows:

* ``ours/<problem>``: our 14 NKIBench baselines (``nkibench/problems/*/kernel.py``) at a preset
  (default: the paper's shapes). The task's reference computes in float64; the NumPy column runs the
  same reference with float64 replaced by float32.
* ``arange_mask``: ``benchmarks/kernels/arange_mask.py``, a compiler-style kernel of ours (every access an
  ``nl.arange`` expression, ragged tiles masked on both axes).
* ``paper/<case>``: with ``--accelopt-repo DIR`` (a checkout of github.com/zhang677/AccelOpt), the
  paper's 14 baselines ``NKIBench/kernels/*.py`` unchanged against their references
  ``NKIBench/reference/<case>_numpy_*.py`` (which compute in float32).

Times are CPU seconds of the measuring process (``time.process_time``: user + system, so page faults count);
``--wall`` reports wall-clock seconds instead. Each kernel runs ``--repeat`` rounds (default 2), every round
NumPy, then trace-only, then with values, each after a ``gc.collect()``; a column is the best of its
rounds. Interleaving keeps both sides in the same heap and page state (a process's first large NumPy
call pays for fresh pages the later ones reuse: a single run measured ours/adamw's NumPy side at 1.8 s
one time and 0.2 s the next), and the best of several rounds drops the slow outliers of a shared box.
The simulator keeps on-chip memory between launches (``accelopt_nb/sim/core/onchip.py``), as a search loop
that simulates the same shapes again and again uses it: a kernel's first round also pays for the fresh pages
of its buffers, and the best of the rounds is the steady state (``--repeat 1`` shows the first launch).
Each row runs in a fresh process of its own (``--in-process``: all in this one), so what earlier rows
left behind cannot move its numbers. NumPy's large temporaries are fresh pages from the OS, or not,
depending on what ran before (see :func:`pin_heap`): ``--heap reuse`` keeps freed memory for every size, so
neither side pays page faults and the ratio compares computation alone (the stricter ratio). CPU time keeps
the ratios meaningful on a shared, overloaded machine, where wall time mostly measures other people's jobs.
Both sides run on one core: BLAS is held to one thread for the whole run (lifting a limit between
measurements wakes OpenBLAS's workers, which spin for a while, and their CPU time landed in the next
measurement: a trace-only arange_mask run of 17 ms wall read as 37 ms of CPU after a values run). The L2
column is the simulator's relative error against the reference. Kernels that raise are reported with their
error and the table goes on. The closing lines give the geometric means of the ratios and how many rows meet
the speed goal (:data:`GOAL_VALUES`, :data:`GOAL_TRACE`), naming the rows over it.

    python benchmarks/sim_speed.py [--shapes paper|small] [--only adamw,silu] [--repeat 3]
                                   [--accelopt-repo DIR] [--no-ours] [--no-values] [--wall]
                                   [--heap as-is|reuse] [--in-process] [--against-tree DIR [--rounds 2]]

``--against-tree DIR`` compares two simulators instead (this tree's and another checkout's, e.g. one from before a
refactoring): each row in both, in fresh processes, alternating, and the ratio of their times.
"""
from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import gc
import json
import os
import re
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
from threadpoolctl import threadpool_limits

from accelopt_nb.sim import SimOptions, load_kernel, simulate
from accelopt_nb.taskfile import load_task
from nkibench.registry import get_problem, list_problems
from nkibench.taskgen import load_task_source

HERE = Path(__file__).parent


@dataclass
class Case:
    """One kernel to time: how to build its inputs, its NumPy fp32 math, and how to check the result."""

    name: str
    kernel_path: Path
    make: Callable[[], tuple[list[np.ndarray], list[np.ndarray]]]   # (host inputs, kernel inputs)
    numpy_fp32: Callable[..., Any]                                   # the same math on the host inputs
    error: Callable[[Any, list[np.ndarray]], float]                  # rel. L2 of kernel outputs


@dataclass
class Row:
    name: str
    instructions: int | None = None
    t_numpy: float | None = None
    t_values: float | None = None
    t_trace: float | None = None
    l2: float | None = None
    failure: str = ""


CLOCK = time.process_time
# the simulator's speed goal on compiler-style kernels: with values at most 3x NumPy's fp32 time, trace-only 0.5x
GOAL_VALUES = 3.0
GOAL_TRACE = 0.5


def measure_all(cases: list["Case"], measure: Callable[["Case"], Any], show: Callable[[Any], None]) -> list[Any]:
    """``measure(case)`` for every case, each row shown as it comes, with BLAS held to one thread for the
    whole run (the module docstring says why not per measurement)."""
    rows = []
    with threadpool_limits(limits=1, user_api="blas"):
        for case in cases:
            rows.append(measure(case))
            show(rows[-1])
    return rows


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    gc.collect()
    t0 = CLOCK()
    out = fn()
    return CLOCK() - t0, out


def best_of(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """The best of ``repeat`` back-to-back runs of one function (``benchmarks/trace_replay.py`` uses it)."""
    best, out = float("inf"), None
    for _ in range(max(1, repeat)):
        out = None
        t, out = timed(fn)
        best = min(best, t)
    return best, out


def rel_l2(actual: Any, expected: Any) -> float:
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    return float(np.linalg.norm(a - e) / max(np.linalg.norm(e), 1e-30))


# ---- cases -------------------------------------------------------------------------------------------
def our_cases(preset: str, only: set[str] | None) -> list[Case]:
    cases = []
    for name in list_problems():
        if only and name not in only:
            continue
        problem = get_problem(name)
        task = problem.task(preset)
        # the reference upcasts to float64 for accuracy; the same code in float32 is the speed yardstick
        source32 = problem.task_source(preset).replace("np.float64", "np.float32")
        task32 = load_task_source(source32, module_name=f"sim_speed_{name}_fp32", filename=f"<{name} fp32>")

        def make(task=task):
            inputs = task.get_inputs(seed=0)
            return inputs, task.to_nki(inputs)

        def error(outputs, inputs, task=task):
            ref = task.forward(*inputs)
            got = task.from_nki(outputs[0] if len(outputs) == 1 else outputs, ref)
            refs = ref if isinstance(ref, tuple) else (ref,)
            return max(rel_l2(g, r) for g, r in zip(got, refs))
        cases.append(Case(f"ours/{name}", problem.baseline_path, make, task32.forward, error))
    return cases


def arange_mask_reference(x: np.ndarray, g: np.ndarray, r: np.ndarray) -> np.ndarray:
    """What ``kernels/arange_mask.py`` computes: x * sigmoid(g) + r, in NumPy fp32."""
    return x / (np.float32(1) + np.exp(-g)) + r


def arange_mask_case(rows: int, cols: int) -> Case:
    def make():
        rng = np.random.default_rng(0)
        xs = [rng.standard_normal((rows, cols), dtype=np.float32) for _ in range(3)]
        return xs, xs

    def error(outputs, inputs):
        return rel_l2(outputs[0], arange_mask_reference(*inputs))
    return Case(f"arange_mask {rows}x{cols}", HERE / "kernels" / "arange_mask.py", make, arange_mask_reference, error)


def paper_cases(repo: Path, only: set[str] | None) -> list[Case]:
    kernels = sorted((repo / "NKIBench" / "kernels").glob("*.py"))
    if not kernels:
        raise SystemExit(f"no NKIBench/kernels/*.py under {repo} (pass a checkout of zhang677/AccelOpt)")
    cases = []
    for kpath in kernels:
        case = re.sub(r"_\d+$", "", kpath.stem)
        refs = sorted((repo / "NKIBench" / "reference").glob(f"{case}_numpy_*.py"))
        problem = re.sub(r"(_[A-Z]+\d+)+$", "", case)
        if (only and problem not in only) or not refs:
            continue
        task = load_task(refs[0])

        def make(task=task):
            inputs = task.get_inputs(seed=0)
            return inputs, task.to_nki(inputs)

        def error(outputs, inputs, task=task):
            ref = task.forward(*inputs)
            got = task.from_nki(outputs[0] if len(outputs) == 1 else tuple(outputs), ref)
            refs_ = ref if isinstance(ref, tuple) else (ref,)
            return max(rel_l2(g, r) for g, r in zip(got, refs_))
        cases.append(Case(f"paper/{problem}", kpath, make, task.forward, error))
    return cases


# ---- measuring ---------------------------------------------------------------------------------------
def measure(case: Case, repeat: int, values: bool) -> Row:
    """Best of ``repeat`` interleaved rounds of NumPy, trace-only and values (see the module docstring)."""
    row = Row(case.name)
    try:
        host, nki_inputs = case.make()
        kernel = load_kernel(case.kernel_path)
        best: dict[str, float] = {}
        for _ in range(max(1, repeat)):
            t, _ = timed(lambda: case.numpy_fp32(*host))
            best["numpy"] = min(t, best.get("numpy", t))
            t, res = timed(lambda: simulate(kernel, *nki_inputs, options=SimOptions(trace_only=True)))
            best["trace"] = min(t, best.get("trace", t))
            row.instructions = len(res.trace)
            del res
            if values:
                t, res = timed(lambda: simulate(kernel, *nki_inputs))
                best["values"] = min(t, best.get("values", t))
                row.l2 = case.error(list(res.outputs), host)
                del res
        row.t_numpy, row.t_trace, row.t_values = best["numpy"], best["trace"], best.get("values")
    except Exception as exc:  # report and go on: one failing kernel must not hide the others
        row.failure = failure_text(exc)
    gc.collect()
    return row


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def print_header() -> None:
    print(f"| {'kernel':34s} | {'instr':>6s} | {'numpy s':>8s} | {'values s':>8s} | {'trace s':>8s} "
          f"| {'values/np':>9s} | {'trace/np':>8s} | {'rel L2':>8s} |")
    print(f"|{'-' * 36}|{'-' * 8}|{'-' * 10}|{'-' * 10}|{'-' * 10}|{'-' * 11}|{'-' * 10}|{'-' * 10}|")


def print_row(r: Row) -> None:
    ratio_v = r.t_values / r.t_numpy if r.t_values is not None and r.t_numpy else None
    ratio_t = r.t_trace / r.t_numpy if r.t_trace is not None and r.t_numpy else None
    print(f"| {r.name:34s} | {_fmt(r.instructions, '6d')} | {_fmt(r.t_numpy, '8.3f')} | {_fmt(r.t_values, '8.2f')} "
          f"| {_fmt(r.t_trace, '8.2f')} | {_fmt(ratio_v, '9.1f')} | {_fmt(ratio_t, '8.2f')} | {_fmt(r.l2, '8.1e')} |"
          + (f"  {r.failure}" if r.failure else ""), flush=True)


# ---- the heap ------------------------------------------------------------------------------------------
# glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
HEAPS = {
    # freed memory stays in the heap and serves the next large array: no page faults on either side
    "reuse": {M_MMAP_THRESHOLD: 1 << 30, M_TRIM_THRESHOLD: 1 << 30},
}


def pin_heap(mode: str) -> str:
    """How large arrays get their memory, for the table's title; ``reuse`` pins it for the whole run.

    As glibc leaves it (``as-is``), an array over its moving mmap threshold (at most 32 MiB) is fresh
    pages from the OS and NumPy pays a page fault per page of each temporary, unless earlier work left the
    heap holding enough free memory: x / (1 + exp(-g)) + r at 4000x3000 took 24-26 ms in a fresh process and
    13-15 ms late in a full table, and arange_mask's ratio swung with it (2.9x alone, 4.9x at the end of a
    table). ``reuse`` keeps freed memory in the heap for every size, so neither side pays faults once the
    heap has grown: the ratio of computation alone (the stricter one; a run's first rounds still grow the
    heap, so give it ``--repeat 3`` or more). The simulator's on-chip memory is kept between launches
    either way (``accelopt_nb/sim/core/onchip.py``)."""
    if mode == "as-is":
        return "heap as glibc leaves it"
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return "heap as-is (no glibc mallopt here)"
    for param, value in HEAPS[mode].items():
        mallopt(param, value)
    return "freed memory reused (--heap reuse)"


# ---- the command line (shared by trace_replay.py and value_replay.py) ---------------------------------
def case_parser(doc: str, repeat: int) -> argparse.ArgumentParser:
    """The options that choose the kernels (and the rounds) of a side-by-side benchmark."""
    from accelopt_nb.renamed import add_renamed   # here: sim_fingerprint.py imports this file to record older checkouts
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="paper", help="shape preset of our problems (paper or small)")
    add_renamed(ap, "--preset", "--shapes", dest="shapes")
    ap.add_argument("--only", default="", help="comma-separated problem names (e.g. adamw,silu,arange_mask)")
    ap.add_argument("--repeat", type=int, default=repeat, help="interleaved rounds per kernel; each column is its best")
    ap.add_argument("--accelopt-repo", type=Path, default=None,
                    help="checkout of github.com/zhang677/AccelOpt: adds the paper's 14 NKIBench baselines")
    ap.add_argument("--no-ours", action="store_true", help="skip our 14 baselines and the arange/mask kernel")
    ap.add_argument("--arange-shape", default="4000x3000", help="rows x cols of the arange/mask kernel")
    ap.add_argument("--heap", choices=["as-is", *HEAPS], default="as-is",
                    help="how large arrays get memory (see pin_heap): as-is (default, as glibc leaves it) or reuse "
                         "(freed memory kept for every size: no page faults on either side, the stricter ratio)")
    ap.add_argument("-v", action="store_true", help="print the traceback of kernels that raise")
    return ap


def chosen_cases(args: argparse.Namespace) -> list[Case]:
    """The kernels ``case_parser``'s options name, ours first."""
    only = {s.strip() for s in args.only.split(",") if s.strip()} or None
    cases: list[Case] = []
    if not args.no_ours:
        cases += our_cases(args.shapes, only)
        if not only or "arange_mask" in only:
            rows_, cols_ = (int(v) for v in args.arange_shape.lower().split("x"))
            cases.append(arange_mask_case(rows_, cols_))
    if args.accelopt_repo is not None:
        cases += paper_cases(args.accelopt_repo, only)
    else:
        print("(the paper's baselines are skipped: pass --accelopt-repo DIR, a checkout of zhang677/AccelOpt)")
    return cases


def failure_text(exc: BaseException) -> str:
    """A kernel's error as one table cell (the traceback too with ``-v``)."""
    if "-v" in sys.argv:
        traceback.print_exc()
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {first}"[:160]


def goal_line(rows: list[Row]) -> str:
    """How many rows that ran meet both goals (:data:`GOAL_VALUES`, :data:`GOAL_TRACE`), and which miss, by how much."""
    ran = [r for r in rows if r.t_numpy and r.t_trace is not None]
    misses = []
    for r in ran:
        over = []
        if r.t_values is not None and r.t_values / r.t_numpy > GOAL_VALUES:
            over.append(f"values {r.t_values / r.t_numpy:.1f}x")
        if r.t_trace / r.t_numpy > GOAL_TRACE:
            over.append(f"trace-only {r.t_trace / r.t_numpy:.2f}x")
        if over:
            misses.append(f"{r.name} ({', '.join(over)})")
    return (f"goal (values <= {GOAL_VALUES:g}x, trace-only <= {GOAL_TRACE:g}x NumPy): {len(ran) - len(misses)} of "
            f"{len(ran)} rows meet it" + (f"; over: {'; '.join(misses)}" if misses else ""))


def geomean(xs: list[float]) -> float:
    return float(np.exp(np.mean(np.log(xs)))) if xs else float("nan")


def replay_table(doc: str, title: str, measure: Callable[["Case", int], dict], columns: list[tuple[str, str]],
                 cells: Callable[[dict], list[str]], summary: Callable[[list[dict]], str]) -> None:
    """A loop replay benchmark's run (``trace_replay.py``, ``value_replay.py``): per kernel NumPy, every iteration
    run (``full``) and replayed, side by side, then its own ``columns`` (title, markdown alignment) and ``cells``;
    the closing line's geometric means, then its own ``summary`` of the rows that ran."""
    args = case_parser(doc, repeat=1).parse_args()
    heap = pin_heap(args.heap)
    cases = chosen_cases(args)
    print(f"# {title}, CPU seconds, best of {args.repeat}, {heap}")
    print("| kernel | instr | replayed | numpy s | full s | replay s | full/np | replay/np | "
          + " | ".join(t for t, _ in columns) + " |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|" + "".join(f"{a}|" for _, a in columns))

    def show(r: dict) -> None:
        if "failure" in r:
            print(f"| {r['name']} | {r['failure']} |", flush=True)
            return
        print(f"| {r['name']} | {r['instructions']} | {100 * r['replayed']:.0f}% | {r['numpy']:.3f} | {r['full']:.2f} "
              f"| {r['replay']:.2f} | {r['full'] / r['numpy']:.2f} | {r['replay'] / r['numpy']:.2f} | "
              + " | ".join(cells(r)) + " |", flush=True)

    rows = measure_all(cases, lambda case: measure(case, args.repeat), show)
    ok = [r for r in rows if "failure" not in r]
    if ok:
        print(f"geometric mean: full/np {geomean([r['full'] / r['numpy'] for r in ok]):.2f}, "
              f"replay/np {geomean([r['replay'] / r['numpy'] for r in ok]):.2f}, {summary(ok)}")


_ROW = "sim_speed row: "   # how a row measured in a process of its own comes back (one JSON line)


def measure_isolated(case: Case, tree: Path | None = None) -> Row:
    """``measure`` in a fresh Python process running only this kernel, so what earlier rows left behind (heap
    holes, the simulator's kept on-chip memory and caches, cold CPU caches) cannot move its numbers. ``tree``:
    another checkout, whose own copy of this script measures the row with its simulator."""
    argv = _without_against(sys.argv[1:])
    # the row imports the simulator of the tree whose script runs it (not whatever the venv's editable install
    # points at, which the script's own folder on sys.path would not override)
    tree = tree or HERE.parent
    script = str(tree / "benchmarks" / "sim_speed.py")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), *filter(None, [os.environ.get("PYTHONPATH")])]))
    done = subprocess.run([sys.executable, script, *argv, "--case", case.name], capture_output=True, text=True,
                          env=env)
    if "-v" in sys.argv:   # the row's tracebacks
        print(done.stderr, end="", file=sys.stderr)
    for line in done.stdout.splitlines():
        if line.startswith(_ROW):
            return Row(**json.loads(line[len(_ROW):]))
    tail = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
    return Row(case.name, failure=f"the row's process failed: {tail}"[:160])


def _without_against(argv: list[str]) -> list[str]:
    """The arguments without ``--against-tree DIR`` and ``--rounds N`` (a row's own process measures one tree)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in ("--against-tree", "--rounds"):
            skip = True
        elif not a.startswith(("--against-tree=", "--rounds=")):
            out.append(a)
    return out


def against(cases: list[Case], tree: Path, rounds: int) -> None:
    """Each row measured in this tree and in ``tree``, in fresh processes, alternating which goes first round by
    round (so a drift of the machine's load hits both); each column the best of its rounds, and the ratio."""
    print(f"| {'kernel':34s} | {'values s':>8s} | {'other s':>8s} | {'ratio':>6s} | {'trace s':>8s} | {'other s':>8s} "
          f"| {'ratio':>6s} |")
    print(f"|{'-' * 36}|{'-' * 10}|{'-' * 10}|{'-' * 8}|{'-' * 10}|{'-' * 10}|{'-' * 8}|")
    ratios: dict[str, list[float]] = {"values": [], "trace": []}
    for case in cases:
        best: dict[str, dict[str, float]] = {"this": {}, "other": {}}
        failure = ""
        for r in range(max(1, rounds)):
            for side in (("this", "other") if r % 2 == 0 else ("other", "this")):
                row = measure_isolated(case, None if side == "this" else tree)
                failure = failure or row.failure
                for col, t in (("values", row.t_values), ("trace", row.t_trace)):
                    if t is not None:
                        best[side][col] = min(t, best[side].get(col, t))
        cells = []
        for col in ("values", "trace"):
            a, b = best["this"].get(col), best["other"].get(col)
            ratio = a / b if a and b else None
            if ratio is not None:
                ratios[col].append(ratio)
            cells += [_fmt(a, "8.3f"), _fmt(b, "8.3f"), _fmt(ratio, "6.3f")]
        print(f"| {case.name:34s} | " + " | ".join(cells) + " |" + (f"  {failure}" if failure else ""), flush=True)
    print(f"geometric mean this/other: values {geomean(ratios['values']):.3f}, trace {geomean(ratios['trace']):.3f}")


def main() -> None:
    ap = case_parser(__doc__, repeat=2)
    ap.add_argument("--no-values", action="store_true", help="time trace-only runs alone")
    ap.add_argument("--wall", action="store_true", help="wall-clock seconds instead of CPU seconds")
    ap.add_argument("--in-process", action="store_true",
                    help="measure every row in this one process (default: each in a fresh process of its own)")
    ap.add_argument("--case", default="", help=argparse.SUPPRESS)   # the one row a row's own process measures
    ap.add_argument("--against-tree", type=Path, default=None,
                    help="another checkout (e.g. an unpacked git archive of an older commit): every row is measured in "
                         "both trees, in fresh processes, alternating, and the table gives the ratio this/other")
    ap.add_argument("--rounds", type=int, default=2, help="with --against-tree: alternating rounds per row")
    args = ap.parse_args()
    global CLOCK
    if args.wall:
        CLOCK = time.perf_counter
    heap = pin_heap(args.heap)
    if args.case:
        case = next(c for c in chosen_cases(args) if c.name == args.case)
        with threadpool_limits(limits=1, user_api="blas"):
            print(_ROW + json.dumps(asdict(measure(case, args.repeat, not args.no_values))), flush=True)
        return
    cases = chosen_cases(args)
    if args.against_tree is not None:
        print(f"# this tree against {args.against_tree}, preset {args.shapes!r}, {'wall' if args.wall else 'CPU'} "
              f"seconds, best of {args.rounds} alternating rounds of fresh processes (each best of {args.repeat}), "
              f"{heap}")
        against(cases, args.against_tree.resolve(), args.rounds)
        return
    print(f"# simulator vs NumPy fp32, preset {args.shapes!r}, {'wall' if args.wall else 'CPU'} seconds, "
          f"best of {args.repeat} interleaved rounds, {heap}, "
          f"{'all rows in one process' if args.in_process else 'each row in a fresh process'}")
    print_header()
    def here(case: Case) -> Row:
        return measure(case, args.repeat, not args.no_values)

    rows = measure_all(cases, here if args.in_process else measure_isolated, print_row)
    values = [r.t_values / r.t_numpy for r in rows if r.t_values and r.t_numpy]
    traces = [r.t_trace / r.t_numpy for r in rows if r.t_trace and r.t_numpy]
    if values or traces:
        print(f"geometric mean: values/np {geomean(values):.1f}, trace/np {geomean(traces):.2f} "
              f"({len(rows) - sum(1 for r in rows if r.failure)} of {len(rows)} kernels ran)")
        print(goal_line(rows))


if __name__ == "__main__":
    main()
