"""NKIBench benchmark: correctness and profile of kernels, scored as a percentage of peak.

>>> from accelopt_nb.bench import run_bench
>>> df = run_bench(preset="small", hw="trn1")            # the 14 baselines on the simulator
>>> df[["problem", "latency_ms", "pct_peak", "bound"]]   # doctest: +SKIP

Every kernel is evaluated by the evaluation service (:mod:`accelopt_nb.evaluation.service`) with
the same judge as ``accelopt evaluate`` and the search, so one kernel gets one verdict everywhere;
:mod:`.suite` builds the jobs and the rows, :mod:`.table` prints, plots and writes them.

Seeds and presets: on the ``small`` preset every kernel is checked on the paper's five seeds
[0, 21, 42, 63, 84] (plus the problem's adversarial inputs, unless ``adversarial=False``). On the
``paper`` preset one seed (42, the seed the paper profiles) is checked by default;
``trace_only=True`` skips correctness and arithmetic entirely and only records the instruction
stream for the profile (status ``profiled``).
"""
from accelopt_nb.bench.suite import (COLUMNS, ENGINE_FIELDS, BenchCase, bench_service, make_cases, row, run_bench,
                                     summarize)
from accelopt_nb.bench.table import format_table, plot_pct_peak, write_outputs

__all__ = ["COLUMNS", "ENGINE_FIELDS", "BenchCase", "bench_service", "format_table", "make_cases", "plot_pct_peak",
           "row", "run_bench", "summarize", "write_outputs"]
