"""Wall time of the NKIBench benchmark on this machine, per problem and in total.

    python benchmarks/nkibench_wall_time.py                   # small preset (5 seeds + adversarial)
    python benchmarks/nkibench_wall_time.py --shapes paper    # paper shapes, seed 42 (minutes)
    python benchmarks/nkibench_wall_time.py --shapes paper --trace-only

Prints the benchmark table, then each problem's evaluation time (simulation, float64 reference
and comparison together) sorted from slowest, and the peak resident memory of the process.
"""
from __future__ import annotations

import argparse
import resource
import sys
import time

from accelopt_nb.bench import format_table, run_bench
from accelopt_nb.perf.hardware import presets as hardware_names
from accelopt_nb.renamed import add_renamed
from nkibench.problem import PRESETS


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="small", choices=PRESETS)
    add_renamed(ap, "--preset", "--shapes", dest="shapes", choices=PRESETS)
    ap.add_argument("--hw", default="trn1", choices=hardware_names())
    ap.add_argument("--trace-only", action="store_true")
    ap.add_argument("--problems", nargs="+")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    df = run_bench(args.problems, preset=args.shapes, hw=args.hw, trace_only=args.trace_only, progress=False)
    total = time.monotonic() - t0
    print(format_table(df))
    print("\nper-problem wall time (s):")
    for r in df.sort_values("wall_s", ascending=False).to_dict("records"):
        print(f"  {r['problem']:24s} {r['wall_s']:8.2f}   {r['instructions']} instructions")
    rss_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20   # ru_maxrss is KiB on Linux
    print(f"total {total:.1f} s, peak RSS {rss_gb:.2f} GB, preset={args.shapes}, hw={args.hw}, "
          f"trace_only={args.trace_only}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
