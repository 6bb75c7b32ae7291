"""Instructions the simulator executes per run of a kernel, counted by callgrind: a speed measure that a busy box
does not move.

On a shared machine wall-clock ratios drift by 10-20% from one hour to the next, which hides changes of a few
percent. Callgrind counts the instructions a process executes: with hashing seeded and BLAS on one thread, two
processes of the same tree agree to a few thousand instructions in billions. Each count is one process under
callgrind with instrumentation off while it imports, loads the kernel and warms up (``--warmup`` runs), switched
on (``callgrind_control -i on``) for ``--runs`` runs and off again; the count divided by ``--runs`` is one run's
instructions. (Counting only the runs gives the same number as the difference of two fully instrumented
processes, to ~20 thousand instructions, at a fraction of the cost: instrumented, the imports alone took
~165 s of CPU.) ``--against REV`` counts a git revision the same way (from a temporary worktree) and prints the
ratio, both measured in this one invocation.

Instructions track Python-bound work (trace-only runs) well. With values, NumPy's loops dominate, and under
valgrind NumPy takes its generic code paths instead of AVX-512, so value runs are better compared by wall clock.

    python benchmarks/sim_instructions.py [--mode trace|values] [--runs 10] [--against 852534e | --against-tree DIR]

``--against-tree DIR`` counts another checkout (e.g. an unpacked ``git archive``) instead of a revision.

Needs valgrind (Debian: ``apt install valgrind``).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KERNEL = "benchmarks/kernels/arange_mask.py"

# the child: simulate the kernel on fixed inputs (their values do not change the work), warmup times, then
# runs times between two handshakes on stdin/stdout, while the parent has callgrind's instrumentation on
CHILD = """
import sys, numpy as np
from accelopt_nb.sim import SimOptions, load_kernel, simulate
mode, shape = sys.argv[1], tuple(int(s) for s in sys.argv[2].split("x"))
warmup, runs = int(sys.argv[3]), int(sys.argv[4])
kernel = load_kernel(sys.argv[5])
inputs = [np.full(shape, 0.5 + 0.25 * i, dtype=np.float32) for i in range(3)]
options = SimOptions(trace_only=mode == "trace")
for _ in range(warmup):
    simulate(kernel, *inputs, options=options)
print("ready", flush=True)
sys.stdin.readline()
for _ in range(runs):
    simulate(kernel, *inputs, options=options)
print("done", flush=True)
sys.stdin.readline()
"""


def instructions(tree: Path, mode: str, shape: str, warmup: int, runs: int) -> int:
    """Instructions callgrind counts in ``runs`` simulations of the kernel, after ``warmup`` uncounted ones."""
    # one BLAS thread: idle pool threads spin, which moved counts by millions from one process to the next
    env = dict(os.environ, PYTHONHASHSEED="0", PYTHONPATH=str(tree), OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               MKL_NUM_THREADS="1")
    child = subprocess.Popen(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", "--instr-atstart=no",
                              sys.executable, "-c", CHILD, mode, shape, str(warmup), str(runs), str(tree / KERNEL)],
                             env=env, cwd=tree, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)

    def step(expected: str, instrument: str) -> None:
        line = child.stdout.readline().strip()
        if line != expected:   # the child failed: its traceback is on stderr
            child.kill()
            raise RuntimeError(f"the simulation under callgrind stopped before {expected!r}:\n"
                               f"{child.communicate()[1][-2000:]}")
        subprocess.run(["callgrind_control", "-i", instrument, str(child.pid)], check=True, capture_output=True)
        child.stdin.write("\n")
        child.stdin.flush()

    step("ready", "on")
    step("done", "off")
    err = child.communicate()[1]
    for line in err.splitlines():
        if "Collected" in line:
            return int(line.split()[-1])
    raise RuntimeError(f"callgrind gave no count (exit {child.returncode}):\n{err[-2000:]}")


def per_run(tree: Path, args: argparse.Namespace) -> float:
    """One run's instructions."""
    return instructions(tree, args.mode, args.shape, args.warmup, args.runs) / args.runs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=("trace", "values"), default="trace")
    ap.add_argument("--shape", default="4000x3000", help="M x N of the arange/mask kernel's inputs")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--against", metavar="REV", help="a git revision to count the same way, for the ratio")
    ap.add_argument("--against-tree", metavar="DIR", type=Path, help="another checkout to count the same way")
    args = ap.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (Debian: apt install valgrind)", file=sys.stderr)
        return 2
    rows = [("this tree", per_run(ROOT, args))]
    if args.against_tree:
        args.against = str(args.against_tree)
        rows.append((args.against, per_run(args.against_tree.resolve(), args)))
    elif args.against:
        with tempfile.TemporaryDirectory() as tmp:
            other = Path(tmp) / "tree"
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(other), args.against],
                           check=True)
            try:
                rows.append((args.against, per_run(other, args)))
            finally:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(other)], check=False)
    print(f"# arange_mask {args.shape}, {args.mode}, instructions per run (callgrind, {args.runs} runs after "
          f"{args.warmup})")
    for name, count in rows:
        print(f"{name:>12s}  {count / 1e6:9.2f} M")
    if len(rows) == 2:
        print(f"ratio this tree / {args.against}: {rows[0][1] / rows[1][1]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
