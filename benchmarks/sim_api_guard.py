"""Cost of the simulator's API boundary (sim/api/guard.py): the NKIBench baselines simulated with the
facade functions guarded (as shipped) and unguarded, side by side in one run.

    python benchmarks/sim_api_guard.py                      # small shapes, values
    python benchmarks/sim_api_guard.py --trace-only --problems silu adamw

Prints per problem: instructions, API calls through the boundary, seconds guarded / unguarded and
their ratio (best of --repeat, runs interleaved so machine load hits both alike).
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import time

import nkibench
from accelopt_nb.renamed import add_renamed
from accelopt_nb.sim import SimOptions, load_kernel, simulate
from accelopt_nb.sim.api.coverage import facade_modules


@contextlib.contextmanager
def unguarded():
    """Put the simulator's own functions back into the facade modules for the duration."""
    saved = []
    for module in facade_modules().values():
        for name, obj in list(module.__dict__.items()):
            if hasattr(obj, "__nki_spec__"):
                saved.append((module, name, obj))
                setattr(module, name, obj.__wrapped__)
    try:
        yield
    finally:
        for module, name, obj in saved:
            setattr(module, name, obj)


@contextlib.contextmanager
def counting(counter: list[int]):
    """Count calls through the boundary (the guarded wrappers)."""
    saved = []
    for module in facade_modules().values():
        for name, obj in list(module.__dict__.items()):
            if hasattr(obj, "__nki_spec__"):
                @functools.wraps(obj)  # keeps _nki_name: ops are passed as functions (op=nl.exp)
                def counted(*a, _f=obj, **k):
                    counter[0] += 1
                    return _f(*a, **k)
                saved.append((module, name, obj))
                setattr(module, name, counted)
    try:
        yield
    finally:
        for module, name, obj in saved:
            setattr(module, name, obj)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="small")
    add_renamed(ap, "--preset", "--shapes", dest="shapes")
    ap.add_argument("--problems", nargs="+", default=None)
    ap.add_argument("--trace-only", action="store_true")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    options = SimOptions(trace_only=args.trace_only)
    names = args.problems or nkibench.list_problems()
    print(f"{'problem':26s} {'instr':>7s} {'API calls':>9s} {'guarded s':>10s} {'unguarded s':>12s} {'ratio':>6s}")
    total_g = total_u = 0.0
    for name in names:
        problem = nkibench.get_problem(name)
        task = problem.task(args.shapes)
        inputs = task.to_nki(task.get_inputs(42))
        kern = load_kernel(problem.baseline_path)
        calls = [0]
        with counting(calls):
            n_instr = len(simulate(kern, *inputs, options=options).trace)
        tg, tu = [], []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            simulate(kern, *inputs, options=options)
            tg.append(time.perf_counter() - t0)
            with unguarded():
                t0 = time.perf_counter()
                simulate(kern, *inputs, options=options)
                tu.append(time.perf_counter() - t0)
        g, u = min(tg), min(tu)
        total_g, total_u = total_g + g, total_u + u
        print(f"{name:26s} {n_instr:7d} {calls[0]:9d} {g:10.3f} {u:12.3f} {g / u:6.3f}")
    print(f"{'total':26s} {'':7s} {'':9s} {total_g:10.3f} {total_u:12.3f} {total_g / total_u:6.3f}")
    per_call()


def per_call(n: int = 200_000) -> None:
    """The boundary's own cost per call, on nl.ds (a pure function: no simulator work to hide it)."""
    ds = facade_modules()[("neuronxcc", "language")].ds
    raw = ds.__wrapped__
    cases = [("positional", lambda f: f(0, 128)), ("keywords", lambda f: f(start=0, size=128))]
    print(f"\nper call on nl.ds ({n} calls): {'case':12s} {'guarded us':>11s} {'unguarded us':>13s} {'extra us':>9s}")
    for label, call in cases:
        g = min(_loop(call, ds, n) for _ in range(3))
        u = min(_loop(call, raw, n) for _ in range(3))
        print(f"{'':36s}{label:12s} {g * 1e6 / n:11.2f} {u * 1e6 / n:13.2f} {(g - u) * 1e6 / n:9.2f}")


def _loop(call, fn, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        call(fn)
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
