"""Cost of one calibration fit: re-estimating every trace vs the analysed-once, parameter-keyed cache.

Fits the free parameters on the fit half of the paper's NKIBench baselines (as
``perf_fidelity.py --refit`` does) twice in one run, each from a fresh cache:

* ``estimate``: every new parameter vector re-runs ``estimate`` on every kernel (the fit before
  ``calibrate.LatencyCache`` analysed traces once and keyed latencies by the parameters a trace
  depends on);
* ``cache``: ``calibrate.LatencyCache``.

Both must find the same parameters. Times are CPU seconds of this process (``time.process_time``),
which stay meaningful on a shared machine. Then, optionally, the leave-one-out over all 14 with
the cache (``--loo``).

    python benchmarks/calibrate_speed.py --accelopt-repo DIR [--loo]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from accelopt_nb.perf import estimate, load_hw
from accelopt_nb.perf.calibrate import LatencyCache, documented_overrides, fit
from accelopt_nb.perf.hardware import HWConfig
from accelopt_nb.sim.trace import Trace

sys.path.insert(0, str(Path(__file__).resolve().parent))
from perf_fidelity import FIT_GRID, measured_table, nkibench_traces, run_loo, split  # noqa: E402


class EstimateEveryTime(LatencyCache):
    """The reference: a full ``estimate`` for every new (trace, all parameter values)."""

    def latency(self, trace: Trace, hw: HWConfig) -> float:
        key = (id(trace), tuple(getattr(hw, p.key) for p in self._params))
        t = self._seen.get(key)
        if t is None:
            t = self._seen[key] = estimate(trace, hw).total_time
        return t


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--accelopt-repo", type=Path, required=True, help="checkout of github.com/zhang677/AccelOpt")
    ap.add_argument("--loo", action="store_true", help="also time the leave-one-out over all 14 kernels")
    args = ap.parse_args(argv)
    meas = measured_table()
    traces = nkibench_traces(args.accelopt_repo, list(meas))
    fit_half, _ = split(traces)
    base = load_hw("trn1", documented_overrides())
    results = {}
    for name, cache in (("estimate", EstimateEveryTime()), ("cache", LatencyCache())):
        t0 = time.process_time()
        cal = fit([traces[p] for p in fit_half], [meas[p]["latency_ms"] / 1e3 for p in fit_half], base=base,
                  cache=cache, **FIT_GRID)
        results[name] = (time.process_time() - t0, cal.overrides, len(cache._seen))
        print(f"  {name:8s} {results[name][0]:7.1f} s CPU, {results[name][2]:4d} schedules, "
              f"RMS log error {cal.error_after:.4f}", flush=True)
    same = results["estimate"][1] == results["cache"][1]
    print(f"fit half ({len(fit_half)} kernels, {FIT_GRID}): estimate / cache = "
          f"{results['estimate'][0] / results['cache'][0]:.2f}x CPU; same parameters: {same}")
    if args.loo:
        t0 = time.process_time()
        held = run_loo(traces, "trn1")
        print(held.format())
        print(f"leave-one-out over {len(traces)}: {time.process_time() - t0:.0f} s CPU")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
