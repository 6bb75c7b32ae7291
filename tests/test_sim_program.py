"""The program hash (``sim.program_fingerprint``): equal only for kernels that compute the same thing.

Each differing pair below has the same instruction boxes (the trace fingerprint, which only shares profiles, is
equal where the test says so) but computes something else: its program hashes must differ, and the pair's
outputs with values do differ, so the test could fail. Kernels that differ only in comments, names or how a
constant is written must share a hash. What the hash cannot write down exactly refuses it (None)."""
from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

from accelopt_nb.evaluation.backends.simulator import trace_fingerprint
from accelopt_nb.sim import SimOptions, load_kernel, program_fingerprint, simulate

HEADER = ("import numpy as np\nimport neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\n"
          "import neuronxcc.nki.isa as nisa\n\n")

BASE = """
@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    ix, iy = nl.mgrid[0:128, 0:128]
    t = nl.load(x[ix, iy])
    y = nl.multiply(t, 2.0)
    z = nl.exp(y)
    nl.store(out[ix, iy], value=z)
    return out
"""


def _kernel(source: str):
    return load_kernel(source=HEADER + textwrap.dedent(source))


def _inputs():
    return [np.random.default_rng(0).standard_normal((128, 128)).astype(np.float32)]


def _facts(source: str):
    kernel, inputs = _kernel(source), _inputs()
    program, why = program_fingerprint(kernel, *inputs, hw="trn1")
    trace = trace_fingerprint(simulate(kernel, *inputs, options=SimOptions(trace_only=True, hw="trn1")).trace)
    outputs = simulate(kernel, *inputs, options=SimOptions(hw="trn1")).outputs
    return program, why, trace, outputs


DIFFERENT = {   # (edit of BASE, whether the trace fingerprint stays equal: boxes and attrs cannot tell)
    "transposed access": (("x[ix, iy]", "x[iy, ix]"), True),
    "reversed access": (("x[ix, iy]", "x[ix, 127 - iy]"), True),
    "scalar immediate": (("nl.multiply(t, 2.0)", "nl.multiply(t, 3.0)"), True),
    "activation function": (("nl.exp(y)", "nl.tanh(y)"), False),
    "operand order": (("nl.multiply(t, 2.0)", "nl.subtract(2.0, t)"), False),
    "store mask": (("nl.store(out[ix, iy], value=z)",
                    "nl.store(out[ix, iy], value=nisa.affine_select(ix - iy >= 0, z, 0.0))"), None),
}


@pytest.mark.parametrize("name", sorted(DIFFERENT))
def test_kernels_that_compute_something_else_never_share_a_program(name):
    (old, new), same_trace = DIFFERENT[name]
    assert old in BASE
    p0, why0, t0, out0 = _facts(BASE)
    p1, why1, t1, out1 = _facts(BASE.replace(old, new))
    assert p0 is not None and p1 is not None, (why0, why1)
    assert not np.array_equal(out0[0], out1[0])          # the pair really computes something else
    if same_trace is not None:
        assert (t0 == t1) is same_trace                  # the box-level stream cannot tell them apart
    assert p0 != p1


def test_masks_with_the_same_box_differ():
    causal = BASE.replace("nl.store(out[ix, iy], value=z)",
                          "nl.store(out[ix, iy], value=nisa.affine_select(ix - iy >= 0, z, 0.0))")
    strict = causal.replace("ix - iy >= 0", "ix - iy > 0")
    p0, _, t0, out0 = _facts(causal)
    p1, _, t1, out1 = _facts(strict)
    assert not np.array_equal(out0[0], out1[0]) and t0 == t1
    assert p0 is not None and p0 != p1


def test_loop_kinds_and_counts_differ():
    looped = """
    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        ix, iy = nl.mgrid[0:128, 0:64]
        for j in nl.affine_range(2):
            t = nl.load(x[ix, j * 64 + iy])
            nl.store(out[ix, j * 64 + iy], value=nl.exp(t))
        return out
    """
    p0, why, _, _ = _facts(looped)
    p1, _, _, _ = _facts(looped.replace("nl.affine_range(2)", "nl.sequential_range(2)"))
    assert p0 is not None, why
    assert p0 != p1


SCHEDULES = {   # the same values, another schedule: the performance model groups instructions by statement
    "one statement instead of two": ("    y = nl.multiply(t, 2.0)\n    z = nl.exp(y)\n",
                                     "    z = nl.exp(nl.multiply(t, 2.0))\n"),
    "a no_reorder block around the load and the multiply": (
        "    t = nl.load(x[ix, iy])\n    y = nl.multiply(t, 2.0)\n",
        "    with nki.compiler.no_reorder():\n        t = nl.load(x[ix, iy])\n        y = nl.multiply(t, 2.0)\n"),
}


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_kernels_scheduled_otherwise_never_share_a_program(name):
    old, new = SCHEDULES[name]
    assert old in BASE
    p0, why0, t0, out0 = _facts(BASE)
    p1, why1, t1, out1 = _facts(BASE.replace(old, new))
    np.testing.assert_array_equal(out0[0], out1[0])
    assert t0 != t1                                      # the latency may differ: the verdict cannot be shared
    assert p0 is not None and p1 is not None and p0 != p1, (why0, why1)


SAME = """
# a comment, another name for everything, constants written otherwise, an unused constant
SCALE = 1.0 + 1.0
_VARIANT = 7


@nki.jit
def kernel(inp):
    \"\"\"A docstring.\"\"\"
    result = nl.ndarray(inp.shape, dtype=inp.dtype, buffer=nl.shared_hbm)
    p, f = nl.mgrid[0:64 * 2, 0:128]
    tile = nl.load(inp[p, f])        # load
    scaled = nl.multiply(tile, SCALE)
    activated = nl.exp(scaled)
    nl.store(result[p, f], value=activated)
    return result
"""


def test_comments_names_and_constants_share_a_program():
    p0, why, t0, out0 = _facts(BASE)
    p1, _, t1, out1 = _facts(SAME)
    assert p0 is not None, why
    assert p0 == p1 and t0 == t1
    # the same, but the activation in the store's statement: the same values, statements grouped otherwise
    p2, _, t2, _ = _facts(SAME.replace("    activated = nl.exp(scaled)\n    nl.store(result[p, f], value=activated)",
                                       "    nl.store(result[p, f], value=nl.exp(scaled))"))
    assert t2 != t0 and p2 != p0
    np.testing.assert_array_equal(out0[0], out1[0])


def test_value_dependent_addressing_has_no_program():
    gather = """
    @nki.jit
    def kernel(data, idx):
        rows = nl.ndarray((idx.shape[0], data.shape[1]), dtype=data.dtype, buffer=nl.shared_hbm)
        ids = nl.load(idx)
        g = nl.load(data[ids, nl.arange(data.shape[1])[None, :]])
        nl.store(rows, value=g)
        return rows
    """
    data = np.arange(100 * 8, dtype=np.float32).reshape(100, 8)
    idx = np.arange(64, dtype=np.int32).reshape(64, 1)
    program, why = program_fingerprint(_kernel(gather), data, idx, hw="trn1")
    assert program is None and "indirect" in why


@pytest.mark.parametrize("snippet, reason", [
    ("    try:\n        pass\n    except Exception:\n        pass\n", "exception handler"),
    ("    _ = {1, 2}\n", "a set"),
    ("    _ = np.random.rand()\n", "random"),
])
def test_code_that_may_take_another_path_has_no_program(snippet, reason):
    source = BASE.replace("    return out\n", snippet + "    return out\n")
    program, why = program_fingerprint(_kernel(source), *_inputs(), hw="trn1")
    assert program is None and reason in why


def test_a_kernel_function_argument_has_no_program():
    source = BASE.replace("z = nl.exp(y)", "z = nisa.activation(op=lambda v: v, data=y)")
    program, why = program_fingerprint(_kernel(source), *_inputs(), hw="trn1")
    assert program is None and ("outside NKI" in why or "failed" in why)


def test_only_the_fingerprint_launch_is_recorded(monkeypatch):
    from accelopt_nb.sim.core import program
    seen = []
    monkeypatch.setattr(program.Recorder, "call", lambda self, api, args, kwargs: seen.append(api))
    kernel = _kernel(BASE)
    simulate(kernel, *_inputs(), options=SimOptions(trace_only=True))
    assert seen == []
    program_fingerprint(kernel, *_inputs(), hw="trn1")
    assert "nl.exp" in seen or any(api.endswith(".exp") for api in seen)
    n = len(seen)
    simulate(kernel, *_inputs(), options=SimOptions(trace_only=True))
    assert len(seen) == n


# ---- loop replay: the hash is defined on the records alone, so extrapolated iterations hash as if they ran ----
LOOPED = """
@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    ip, jf = nl.mgrid[0:128, 0:64]
    for j in nl.affine_range(x.shape[1] // 64):
        t = nl.load(x[ip, j * 64 + jf])
        nl.store(out[ip, j * 64 + jf], value=nl.exp(t))
    return out
"""

LOOP_VARIANTS = {
    "affine": LOOPED,
    "a scalar from the loop variable": LOOPED.replace("nl.exp(t)", "nl.multiply(t, j)"),
    "ragged tail with a mask": """
@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    ip, jf = nl.mgrid[0:128, 0:64]
    for j in nl.affine_range((x.shape[1] + 63) // 64):
        t = nl.load(x[ip, j * 64 + jf], mask=(j * 64 + jf < x.shape[1]))
        nl.store(out[ip, j * 64 + jf], value=nl.exp(t), mask=(j * 64 + jf < x.shape[1]))
    return out
""",
    "nested, sequential accumulation": """
@nki.jit
def kernel(x):
    out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    ip, jf = nl.mgrid[0:128, 0:64]
    for r in nl.affine_range(2):
        acc = nl.zeros((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        for j in nl.sequential_range(x.shape[1] // 128):
            t = nl.load(x[ip, j * 128 + r * 64 + jf])
            acc += nl.exp(t)
        nl.store(out[ip, jf], value=acc)
    return out
""",
    "Python control flow on the loop variable (runs every iteration)": LOOPED.replace(
        "nl.store(out[ip, j * 64 + jf], value=nl.exp(t))",
        "nl.store(out[ip, j * 64 + jf], value=nl.exp(t) if j != 11 else nl.tanh(t))"),
}


def _wide(cols: int = 64 * 16 + 24):
    return [np.random.default_rng(0).standard_normal((128, cols)).astype(np.float32)]


def _records(why: str) -> int:
    return int(why.split(" calls")[0])


@pytest.mark.parametrize("name", sorted(LOOP_VARIANTS))
def test_loop_replay_hashes_as_running_every_iteration(name):
    kernel = _kernel(LOOP_VARIANTS[name])
    full, why_full = program_fingerprint(kernel, *_wide(), hw="trn1", loop_replay=False)
    replayed, why = program_fingerprint(kernel, *_wide(), hw="trn1")
    assert full is not None and replayed == full, (why_full, why)
    extrapolated = _records(why) < _records(why_full)
    assert extrapolated is ("runs every iteration" not in name), (why, why_full)


def test_a_change_past_the_probes_is_seen_with_replay():
    late = LOOP_VARIANTS["Python control flow on the loop variable (runs every iteration)"]
    p0, _ = program_fingerprint(_kernel(LOOPED), *_wide(), hw="trn1")
    p1, _ = program_fingerprint(_kernel(late), *_wide(), hw="trn1")
    out0 = simulate(_kernel(LOOPED), *_wide(), options=SimOptions(hw="trn1")).outputs[0]
    out1 = simulate(_kernel(late), *_wide(), options=SimOptions(hw="trn1")).outputs[0]
    assert not np.array_equal(out0, out1)
    assert p0 is not None and p1 is not None and p0 != p1
    # the same loop over another count, and another step of an index, differ too
    p2, _ = program_fingerprint(_kernel(LOOPED), *_wide(64 * 15 + 24), hw="trn1")
    p3, _ = program_fingerprint(_kernel(LOOPED.replace("j * 64 + jf]", "j * 64 + jf + 0]")), *_wide(), hw="trn1")
    assert p2 != p0 and p3 == p0


def _baselines():
    from nkibench.registry import get_problem, list_problems
    for name in list_problems():
        problem = get_problem(name)
        task = problem.task("small")
        yield name, load_kernel(problem.baseline_path), task.to_nki(task.get_inputs(seed=0))
    arange = Path(__file__).resolve().parents[1] / "benchmarks" / "kernels" / "arange_mask.py"
    rng = np.random.default_rng(0)
    yield "arange_mask 1600x600", load_kernel(arange), [rng.standard_normal((1600, 600), dtype=np.float32)
                                                        for _ in range(3)]


def test_our_baselines_hash_the_same_with_loop_replay():
    seen, extrapolated = 0, 0
    for name, kernel, inputs in _baselines():
        full, why_full = program_fingerprint(kernel, *inputs, hw="trn1", loop_replay=False)
        replayed, why = program_fingerprint(kernel, *inputs, hw="trn1")
        assert full is not None and replayed == full, (name, why_full, why)
        seen += 1
        extrapolated += _records(why) < _records(why_full)
    assert seen == 15 and extrapolated >= 3
