"""Simulator speed on an fp32 matmul kernel versus numpy.matmul, measured side by side in one run.

    python benchmarks/sim_speed.py [--size 4096]
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from accelopt_nb.sim import SimOptions, load_kernel, simulate


def best_of(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    n = args.size
    rng = np.random.default_rng(0)
    lhsT = rng.standard_normal((n, n), dtype=np.float32)
    rhs = rng.standard_normal((n, n), dtype=np.float32)
    kern = load_kernel(Path(__file__).parent / "kernels" / "tiled_matmul.py")

    t_np = best_of(lambda: lhsT.T @ rhs, args.repeat)
    holder = {}
    t_sim = best_of(lambda: holder.setdefault("r", simulate(kern, lhsT, rhs)), 1)
    t_sim_nt = best_of(lambda: simulate(kern, lhsT, rhs, options=SimOptions(record_trace=False)), 1)
    t_trace = best_of(lambda: simulate(kern, lhsT, rhs, options=SimOptions(trace_only=True)), args.repeat)
    res = holder["r"]
    err = float(np.linalg.norm(res.output - lhsT.T @ rhs) / np.linalg.norm(lhsT.T @ rhs))
    print(f"fp32 matmul {n}x{n}x{n}: {len(res.trace)} instructions, L2 rel error vs numpy {err:.2e}")
    print(f"{'mode':32s} {'seconds':>9s} {'x numpy.matmul':>15s}")
    print(f"{'numpy.matmul':32s} {t_np:9.3f} {1.0:15.1f}")
    print(f"{'simulate (values + trace)':32s} {t_sim:9.3f} {t_sim / t_np:15.1f}")
    print(f"{'simulate (values, no trace)':32s} {t_sim_nt:9.3f} {t_sim_nt / t_np:15.1f}")
    print(f"{'simulate (trace only)':32s} {t_trace:9.3f} {t_trace / t_np:15.1f}")


if __name__ == "__main__":
    main()
