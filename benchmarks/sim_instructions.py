"""Instructions the simulator executes per run of a kernel, counted by callgrind: a speed measure that a busy box
does not move.

On a shared machine wall-clock ratios drift by 10-20% from one hour to the next, which hides changes of a few
percent. Callgrind counts the instructions a process executes: with hashing seeded and BLAS on one thread, two
processes of the same tree agree to a few thousand instructions in billions. One process under callgrind counts
every chosen kernel: instrumentation is off while it imports, loads a kernel's inputs and warms up (``--warmup``
runs), switched on (``callgrind_control -i on``) for ``--runs`` runs, then off, and the counters are dumped and
zeroed (``callgrind_control -d``) before the next kernel; a dump's count divided by ``--runs`` is one run's
instructions. (Counting only the runs gives the same number as the difference of two fully instrumented
processes, to ~20 thousand instructions, at a fraction of the cost: instrumented, the imports alone took
~165 s of CPU.) ``--against REV`` counts a git revision the same way (from a temporary worktree) and
``--against-tree DIR`` another checkout; the table gives the ratio this tree / other, both counted in this one
invocation.

Kernels: by default ``benchmarks/kernels/arange_mask.py`` at ``--shape``; ``--only NAMES`` picks the rows of
``benchmarks/sim_speed.py`` instead (our 14 NKIBench baselines at ``--shapes``, default the paper's;
``arange_mask``; with ``--accelopt-repo DIR`` the paper's 14), ``--all`` every one of them. The rows' inputs are
built once, outside valgrind, by this tree's ``sim_speed.py`` (drawing a paper-shape kernel's inputs under valgrind
took longer than its runs: 85 M normals for ``paper/lora`` did not finish in 20 minutes) and pickled to a temporary
folder; both trees simulate the same arrays with their own simulator. Modes: ``trace`` (trace-only), ``values``,
and the same without loop replay (``trace-full``, ``values-full``: what ``trace_replay.py`` and ``value_replay.py``
time as "full"). A mode named again counts the kernel's next launches: ``--mode trace,trace --warmup 0 --runs 1``
gives its first launch in the process (what screening a new candidate pays) and its second ("trace #2").

Instructions track Python-bound work (trace-only runs) well. With values, NumPy's loops dominate, and under
valgrind NumPy takes its generic code paths instead of AVX-512, so large value runs are better compared by CPU
time (``sim_speed.py --against-tree``).

    python benchmarks/sim_instructions.py [--mode trace,values,trace-full,values-full] [--runs 10]
        [--shapes paper|small] [--only mamba,silu [--accelopt-repo DIR] [--no-ours] | --all]
        [--against 852534e | --against-tree DIR]

Needs valgrind (Debian: ``apt install valgrind``).
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODES = ("trace", "values", "trace-full", "values-full")
HERE = Path(__file__).resolve().parent

# the child: per row (inputs pickled by the parent) simulate it warmup times and runs times between two handshakes
# on stdin/stdout, while the parent has callgrind's instrumentation on
CHILD = """
import json, pickle, sys
spec = json.loads(sys.argv[1])
from accelopt_nb.sim import SimOptions, load_kernel, simulate
for row in spec["rows"]:
    with open(row, "rb") as f:
        name, kernel_path, inputs = pickle.load(f)
    try:
        kernel = load_kernel(kernel_path)
    except Exception as exc:
        print("failed " + json.dumps([f"{name}|every mode", f"{type(exc).__name__}: {exc}"[:160]]), flush=True)
        continue
    for i, mode in enumerate(spec["modes"]):
        again = spec["modes"][:i].count(mode)
        label = f"{mode} #{again + 1}" if again else mode
        options = SimOptions(trace_only=mode.startswith("trace"), loop_replay=not mode.endswith("-full"))
        try:
            for _ in range(spec["warmup"]):
                simulate(kernel, *inputs, options=options)
        except Exception as exc:
            print("failed " + json.dumps([f"{name}|{label}", f"{type(exc).__name__}: {exc}"[:160]]), flush=True)
            continue
        print(f"ready {name}|{label}", flush=True)
        sys.stdin.readline()
        for _ in range(spec["runs"]):
            simulate(kernel, *inputs, options=options)
        print("done", flush=True)
        sys.stdin.readline()
    del inputs
print("end", flush=True)
"""


def build_rows(spec: dict, folder: Path) -> tuple[list[str], dict[str, str]]:
    """Builds the chosen rows' inputs with this tree's ``sim_speed.py`` and pickles each row to ``folder``: the
    row files, in order, and the errors of rows whose inputs could not be built."""
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(HERE))
    from sim_speed import arange_mask_case, our_cases, paper_cases
    only = set(spec["only"]) or None
    cases = []
    if spec["ours"]:
        cases += our_cases(spec["shapes"], only)
        if spec["arange"]:
            cases.append(arange_mask_case(*spec["shape"]))
    if spec["repo"]:
        cases += paper_cases(Path(spec["repo"]), only)
    rows, failed = [], {}
    for i, case in enumerate(cases):
        try:
            inputs = case.make()[1]
        except Exception as exc:
            failed[f"{case.name}|every mode"] = f"{type(exc).__name__}: {exc}"[:160]
            continue
        path = folder / f"row{i:03d}.pickle"
        with open(path, "wb") as f:
            pickle.dump((case.name, str(case.kernel_path), inputs), f, protocol=5)
        rows.append(str(path))
    return rows, failed


def _dumped(path: Path) -> int:
    """The instruction count of one callgrind dump file: its ``totals:`` line (its ``summary:`` line reads 0 when
    instrumentation was switched off before the dump)."""
    for line in reversed(path.read_text().splitlines()):
        if line.startswith("totals:"):
            return int(line.split()[1])
    raise RuntimeError(f"callgrind dump {path.name} has no totals line")


def instructions(tree: Path, spec: dict, keep: Path | None = None, label: str = "") -> dict[str, int | str]:
    """Per chosen row: instructions callgrind counts in ``spec['runs']`` simulations (after ``spec['warmup']``
    uncounted ones) with ``tree``'s simulator, or the row's error text. ``keep``: a folder the dumps are copied
    to, ``LABEL.ROW.MODE.callgrind``, for ``callgrind_annotate``."""
    # one BLAS thread: idle pool threads spin, which moved counts by millions from one process to the next
    env = dict(os.environ, PYTHONHASHSEED="0", PYTHONPATH=str(tree), OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               MKL_NUM_THREADS="1")
    out: dict[str, int | str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        prefix = Path(tmp) / "cg.out"
        child = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={prefix}",
                                  "--instr-atstart=no", "--dump-instr=no", "--compress-strings=no",
                                  sys.executable, "-c", CHILD, json.dumps(spec)],
                                 env=env, cwd=tree, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)

        def control(*flags: str) -> None:
            subprocess.run(["callgrind_control", *flags, str(child.pid)], check=True, capture_output=True)

        def expect(prefix_: str) -> str:
            line = child.stdout.readline().strip()
            if not line.startswith(prefix_):   # the child failed: its traceback is on stderr
                child.kill()
                raise RuntimeError(f"the simulation under callgrind stopped before {prefix_!r} (got {line!r}):\n"
                                   f"{child.communicate()[1][-2000:]}")
            return line[len(prefix_):].strip()

        def go_on() -> None:
            child.stdin.write("\n")
            child.stdin.flush()

        dumps = 0
        while True:
            line = child.stdout.readline().strip()
            if line == "end":
                break
            if line.startswith("failed "):
                name, why = json.loads(line[len("failed "):])
                out[name] = why
                continue
            if not line.startswith("ready "):
                child.kill()
                raise RuntimeError(f"the simulation under callgrind stopped (got {line!r}):\n"
                                   f"{child.communicate()[1][-2000:]}")
            name = line[len("ready "):]
            control("-i", "on")
            go_on()
            expect("done")
            control("-i", "off")
            control("-d")   # dump and zero the counters: the next row counts from zero
            dumps += 1
            out[name] = _dumped(Path(f"{prefix}.{dumps}"))
            if keep is not None:
                row = "".join(c if c.isalnum() or c in "-_" else "." for c in name.replace("|", "."))
                shutil.copy(f"{prefix}.{dumps}", keep / f"{label}.{row}.callgrind")
            go_on()
        child.communicate()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", default="trace",
                    help=f"comma-separated modes, each a column: {', '.join(MODES)} (the kernels load once per tree)")
    ap.add_argument("--shapes", default="paper", help="shape preset of our problems (paper or small)")
    ap.add_argument("--shape", default="4000x3000", help="M x N of the arange/mask kernel's inputs")
    ap.add_argument("--only", default="", help="comma-separated rows of sim_speed.py (problem names, arange_mask)")
    ap.add_argument("--all", action="store_true", help="every row of sim_speed.py")
    ap.add_argument("--accelopt-repo", type=Path, default=None, help="adds the paper's 14 baselines")
    ap.add_argument("--no-ours", action="store_true", help="skip our 14 baselines and the arange/mask kernel")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--keep", metavar="DIR", type=Path,
                    help="copy each row's callgrind dump here (this.ROW.MODE.callgrind, other.ROW.MODE.callgrind)")
    ap.add_argument("--against", metavar="REV", help="a git revision to count the same way, for the ratio")
    ap.add_argument("--against-tree", metavar="DIR", type=Path, help="another checkout to count the same way")
    args = ap.parse_args(argv)
    modes = [m.strip() for m in args.mode.split(",") if m.strip()]
    if not modes or set(modes) - set(MODES):
        ap.error(f"--mode: choose from {', '.join(MODES)}")
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (Debian: apt install valgrind)", file=sys.stderr)
        return 2
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    chosen = bool(only) or args.all
    spec = {"modes": modes, "shapes": args.shapes, "runs": args.runs, "warmup": args.warmup, "only": only,
            "shape": [int(v) for v in args.shape.lower().split("x")],
            "ours": not args.no_ours, "arange": not chosen or args.all or "arange_mask" in only,
            "repo": str(args.accelopt_repo.resolve()) if args.accelopt_repo and chosen else ""}
    if not chosen:   # the default: arange_mask alone
        spec["only"] = ["arange_mask"]
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as rows_dir:
        spec["rows"], failed = build_rows(spec, Path(rows_dir))
        counts = [("this tree", {**failed, **instructions(ROOT, spec, args.keep, "this")})]
        if args.against_tree:
            counts.append((str(args.against_tree),
                           {**failed, **instructions(args.against_tree.resolve(), spec, args.keep, "other")}))
        elif args.against:
            with tempfile.TemporaryDirectory() as tmp:
                other = Path(tmp) / "tree"
                subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(other),
                                args.against], check=True)
                try:
                    counts.append((args.against, {**failed, **instructions(other, spec, args.keep, "other")}))
                finally:
                    subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(other)],
                                   check=False)
    print(f"# {args.mode}, instructions per run (callgrind, {args.runs} runs after {args.warmup} uncounted), "
          f"millions")
    print("| kernel | mode | " + " | ".join(f"{name} M" for name, _ in counts) + (" | ratio |" if len(counts) == 2 else " |"))
    print("|---|---|" + "---:|" * (len(counts) + (len(counts) == 2)))
    for name in counts[0][1]:
        cells = [c.get(name) for _, c in counts]
        text = [f"{c / args.runs / 1e6:.2f}" if isinstance(c, int) else (c or "-") for c in cells]
        if len(cells) == 2:
            a, b = cells
            text.append(f"{a / b:.3f}" if isinstance(a, int) and isinstance(b, int) and b else "-")
        print(f"| {' | '.join(name.split('|'))} | " + " | ".join(text) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
