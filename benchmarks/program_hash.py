"""The program hash (``sim.program_fingerprint``) with and without loop replay: equal, and what each costs.

For each kernel (our NKIBench baselines at a shape preset, the arange/mask kernel, and ``--tiles`` variants of a
problem's baseline with its ``TILE_N`` set to each width, as ``paper_iteration.py``'s tile mix writes them) it
hashes the program once running every iteration and once with loop replay, alternating ``--rounds`` times in one
process, and prints both hashes (they must be equal: the hash is defined on the records alone), the records each
launch saw and the CPU seconds of each (the best round).

    python benchmarks/program_hash.py [--shapes paper] [--only matmul,silu] [--tiles matmul:128,512] [--rounds 2]
"""
from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from sim_speed import arange_mask_case, our_cases  # noqa: E402

from accelopt_nb.sim import load_kernel, program_fingerprint  # noqa: E402
from nkibench.registry import get_problem  # noqa: E402

_TILE = re.compile(r"^TILE_N = \d+", re.MULTILINE)


def _cases(args: argparse.Namespace) -> list[tuple[str, object, list]]:
    only = {s for s in args.only.split(",") if s}
    out = []
    for case in our_cases(args.shapes, None) + [arange_mask_case(*(int(v) for v in args.arange_shape.split("x")))]:
        short = case.name.split("/")[-1].split(" ")[0]
        if only and short not in only:
            continue
        _, nki_inputs = case.make()
        out.append((case.name, load_kernel(case.kernel_path), nki_inputs))
    for spec in filter(None, args.tiles.split(";")):
        problem, widths = spec.split(":")
        prob = get_problem(problem)
        task = prob.task(args.shapes)
        inputs = task.get_inputs(seed=0)
        nki_inputs = task.to_nki(inputs)
        source = Path(prob.baseline_path).read_text()
        for w in widths.split(","):
            kernel = load_kernel(source=_TILE.sub(f"TILE_N = {int(w)}", source), filename=f"<{problem} TILE_N={w}>")
            out.append((f"{problem} TILE_N={w}", kernel, nki_inputs))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="paper", help="shape preset (paper or small)")
    ap.add_argument("--only", default="", help="comma-separated baselines of ours (matmul, silu, arange_mask, ...)")
    ap.add_argument("--arange-shape", default="4000x3000")
    ap.add_argument("--tiles", default="", help="PROBLEM:W1,W2[;...]: the baseline with TILE_N = each width")
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    print(f"{'kernel':30s} {'equal':5s} {'without replay':>24s} {'with replay':>24s}  hash")
    differ = 0
    for name, kernel, inputs in _cases(args):
        best: dict[bool, float] = {}
        found: dict[bool, tuple] = {}
        for _ in range(args.rounds):
            for replay in (False, True):
                t0 = time.process_time()
                found[replay] = program_fingerprint(kernel, *inputs, hw="trn1", loop_replay=replay)
                best[replay] = min(best.get(replay, float("inf")), time.process_time() - t0)
        (h0, why0), (h1, why1) = found[False], found[True]
        same = h0 == h1 and h0 is not None
        differ += not same
        calls = [w.split(" calls")[0] if h else w for h, w in ((h0, why0), (h1, why1))]
        print(f"{name:30s} {'yes' if same else 'NO':5s} {calls[0]:>9s} rec {best[False]:7.2f} s "
              f"{calls[1]:>9s} rec {best[True]:7.2f} s  {(h1 or '-')[:16]}", flush=True)
    if differ:
        raise SystemExit(f"{differ} kernel(s) hash differently with loop replay")


if __name__ == "__main__":
    main()
