"""Loop replay gives the trace (and, with values, the outputs) that running every iteration gives, or is not used.

Every test simulates a kernel with loop replay (the default) and with ``SimOptions(loop_replay=False)``,
in trace-only mode and with values, and compares the traces field by field, the outputs bit for bit
(and, where it raises, the errors). The adversarial kernels each break one premise of replay (control flow on the loop
variable, Python state carried between iterations or out of the loop, a ragged or out-of-bounds last
tile, non-affine index arithmetic, a helper with hidden state); the plain ones check that replay does
extrapolate, so the comparison is not vacuous.
"""
from __future__ import annotations

import re
import textwrap

import numpy as np
import pytest

import nkibench
from accelopt_nb.errors import KernelError
from accelopt_nb.perf import estimate
from accelopt_nb.sim import SimOptions, load_kernel, simulate
from accelopt_nb.sim.trace import trace_fields

REPLAY = SimOptions(trace_only=True)
FULL = SimOptions(trace_only=True, loop_replay=False)
HEADER = "import numpy as np\nimport neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\n\n"


VALUES = SimOptions()
VALUES_FULL = SimOptions(loop_replay=False)


def run_both(source: str, *inputs):
    """(replayed trace or error, full trace or error) in trace-only mode: equal errors or equal traces are
    asserted, and with values equal errors, or equal traces and bit-equal outputs."""
    kernel = load_kernel(source=HEADER + textwrap.dedent(source))
    for replay, full_options in ((VALUES, VALUES_FULL), (REPLAY, FULL)):
        out = []
        for options in (replay, full_options):
            try:
                out.append(simulate(kernel, *inputs, options=options))
            except KernelError as exc:
                out.append(exc)
        fast, full = out
        if isinstance(full, Exception) or isinstance(fast, Exception):
            assert type(fast) is type(full) and str(fast) == str(full), (fast, full)
            assert (fast.line, fast.rule) == (full.line, full.rule)
            fast = full = fast if isinstance(fast, Exception) else full
        else:
            assert trace_fields(fast.trace) == trace_fields(full.trace)
            assert full.trace.replayed == 0
            assert len(fast.outputs) == len(full.outputs)
            for a, b in zip(fast.outputs, full.outputs):
                assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True)
            fast, full = fast.trace, full.trace
    return fast, full


def rows(n: int, cols: int = 64) -> np.ndarray:
    return np.arange(n * cols, dtype=np.float32).reshape(n, cols)


def rowwise_kernel(body: str, *, out_shape: str = "a.shape", helpers: str = "") -> str:
    """A kernel over 128-row tiles of ``a``: ``out`` (of ``out_shape``), ``ip`` and ``jf`` are defined, then
    ``body`` (written at the function's indentation) runs; ``helpers`` is module-level code before it."""
    return (textwrap.dedent(helpers) + "\n@nki.jit\ndef kernel(a):\n"
            f"    out = nl.ndarray({out_shape}, dtype=a.dtype, buffer=nl.shared_hbm)\n"
            "    ip = nl.arange(128)[:, None]\n    jf = nl.arange(64)[None, :]\n"
            + textwrap.indent(textwrap.dedent(body), "    "))


PLAIN = rowwise_kernel("""
for i in nl.affine_range(a.shape[0] // 128):
    t = nl.load(a[i * 128 + ip, jf])
    u = nl.exp(t)
    nl.store(out[i * 128 + ip, jf], value=u)
return out
""")


def test_plain_loop_is_replayed_and_equal():
    fast, full = run_both(PLAIN, rows(128 * 10))
    assert len(fast) == 30 and fast.replayed == 21   # 3 probe iterations run, 7 extrapolated


def test_switch_turns_replay_off():
    kernel = load_kernel(source=HEADER + textwrap.dedent(PLAIN))
    assert simulate(kernel, rows(1280), options=FULL).trace.replayed == 0
    assert simulate(kernel, rows(1280), options=REPLAY).trace.replayed > 0
    assert simulate(kernel, rows(128 * 16)).trace.replayed > 0   # with values too (from 3 probes + 8 iterations)
    assert simulate(kernel, rows(128 * 16), options=VALUES_FULL).trace.replayed == 0


@pytest.mark.parametrize("options", [VALUES, REPLAY], ids=["values", "trace-only"])
def test_a_finished_launch_is_freed_without_the_cyclic_collector(monkeypatch, options):
    """The runtime and every tile of a launch die with its last reference, not at some later collection: a
    reference cycle through the replay wing once kept a whole paper-size launch (7 GB) alive into the next one."""
    import gc
    import weakref

    from accelopt_nb.sim.core.runtime import Runtime

    runtimes: list[weakref.ref] = []
    init = Runtime.__init__

    def watched_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        runtimes.append(weakref.ref(self))

    monkeypatch.setattr(Runtime, "__init__", watched_init)
    kernel = load_kernel(source=HEADER + textwrap.dedent(PLAIN))
    gc.collect()
    gc.disable()
    try:
        result = simulate(kernel, rows(128 * 16), options=options)
        assert result.trace.replayed > 0 and runtimes
        del result
        assert [r() for r in runtimes] == [None] * len(runtimes)
    finally:
        gc.enable()


def test_control_flow_on_the_loop_variable():
    fast, _ = run_both(PLAIN.replace("u = nl.exp(t)", "u = nl.exp(t)\n        if i == 6:\n            u = nl.exp(u)"),
                       rows(1280))
    assert fast.replayed == 0


@pytest.mark.parametrize("expr", ["(i // 4) * 128", "(i % 3) * 128", "min(i, 5) * 128", "int(np.int64(i)) * 128",
                                  "[0, 1, 2, 3, 5, 4, 6, 7, 8, 9][i] * 128", "{4: 640}.get(i, i * 128)",
                                  "(i.real // 4) * 128", "int(str(i)[-1]) * 128"])
def test_non_affine_use_of_the_loop_variable(expr):
    src = PLAIN.replace("t = nl.load(a[i * 128 + ip, jf])", f"t = nl.load(a[{expr} + ip, jf])")
    fast, _ = run_both(src, rows(1280))
    assert fast.replayed == 0


def test_loop_variable_times_itself_is_not_affine():
    src = PLAIN.replace("t = nl.load(a[i * 128 + ip, jf])", "t = nl.load(a[(i * i) % 10 * 128 + ip, jf])")
    run_both(src, rows(1280))


def test_python_int_carried_between_iterations():
    # k goes 0, 1, 2, 3, 0, 1, ...: the first three iterations look affine
    src = PLAIN.replace("    for i in", "    k = 0\n    for i in").replace(
        "t = nl.load(a[i * 128 + ip, jf])", "t = nl.load(a[k * 128 + ip, jf])\n        k = (k + 1) % 4")
    fast, _ = run_both(src, rows(1280))
    assert fast.replayed == 0


def test_tile_handle_carried_and_read_after_the_loop():
    src = rowwise_kernel("""
        acc = nl.zeros((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        for i in nl.affine_range(a.shape[0] // 128):
            acc = nl.add(acc, nl.load(a[i * 128 + ip, jf]))
        nl.store(out, value=acc)
        return out
    """, out_shape="(128, 64)")
    fast, _ = run_both(src, rows(1280))
    assert fast.replayed == 0


def test_name_bound_in_the_loop_read_after_it():
    src = PLAIN.replace("    return out", "    nl.store(out[ip, jf], value=u)\n    return out")
    fast, _ = run_both(src, rows(1280))
    assert fast.replayed == 0


def test_list_appended_in_the_loop():
    src = rowwise_kernel("""
        tiles = []
        for i in nl.affine_range(a.shape[0] // 128):
            tiles.append(nl.exp(nl.load(a[i * 128 + ip, jf])))
        for k, u in enumerate(tiles):
            nl.store(out[k * 128 + ip, jf], value=u)
        return out
    """)
    fast, _ = run_both(src, rows(1280))
    assert fast.replayed == 0


def test_helper_with_hidden_state():
    helpers = """
    SEEN = []

    def note(x):
        SEEN.append(x)
        return x
    """
    src = rowwise_kernel("""
        for i in nl.affine_range(a.shape[0] // 128):
            nl.store(out[i * 128 + ip, jf], value=note(nl.load(a[i * 128 + ip, jf])))
        for _ in SEEN[3:]:
            nl.store(out[ip, jf], value=nl.load(a[ip, jf]))
        SEEN.clear()
        return out
    """, helpers=helpers)
    fast, _ = run_both(src, rows(1280))
    assert fast.replayed == 0


def test_pure_helper_is_replayed():
    helpers = """
    def double(x):
        return nl.add(x, x)
    """
    src = rowwise_kernel("""
        for i in nl.affine_range(a.shape[0] // 128):
            nl.store(out[i * 128 + ip, jf], value=double(nl.load(a[i * 128 + ip, jf])))
        return out
    """, helpers=helpers)
    fast, _ = run_both(src, rows(1280))
    assert fast.replayed > 0


def test_masked_ragged_tail_is_replayed_up_to_the_tail():
    mask = "mask=(i * 128 + ip < a.shape[0])"
    src = PLAIN.replace("a.shape[0] // 128", "(a.shape[0] + 127) // 128").replace(
        "t = nl.load(a[i * 128 + ip, jf])", f"t = nl.load(a[i * 128 + ip, jf], {mask})").replace(
        "u = nl.exp(t)", f"u = nl.exp(t, {mask})").replace(
        "nl.store(out[i * 128 + ip, jf], value=u)", f"nl.store(out[i * 128 + ip, jf], value=u, {mask})")
    fast, full = run_both(src, rows(128 * 9 + 40))
    assert 0 < fast.replayed < len(fast)
    assert fast.instructions[-1].writes[0].elements == 40 * 64   # the ragged tile ran for real


def test_tail_special_cased_with_min():
    src = PLAIN.replace("a.shape[0] // 128", "(a.shape[0] + 127) // 128").replace(
        "t = nl.load(a[i * 128 + ip, jf])",
        "n = min(128, a.shape[0] - i * 128)\n        t = nl.load(a[i * 128:i * 128 + n, 0:64])").replace(
        "nl.store(out[i * 128 + ip, jf], value=u)", "nl.store(out[i * 128:i * 128 + n, 0:64], value=u)")
    fast, _ = run_both(src, rows(128 * 9 + 40))
    assert fast.replayed == 0


def test_index_expression_leaves_the_tensor_only_in_the_last_iteration():
    # trace-only mode does not check index values (the values path does); the last region is clamped
    src = PLAIN.replace("a.shape[0] // 128", "(a.shape[0] + 127) // 128")
    fast, full = run_both(src, rows(128 * 9 + 40))
    loads = [i for i in fast if i.op == "dma_load"]
    assert 0 < fast.replayed < len(fast) and loads[-1].reads[0].hi == (128 * 9 + 40, 64)


def test_out_of_bounds_slice_only_in_the_last_iteration():
    src = PLAIN.replace("a.shape[0] // 128", "10").replace(
        "t = nl.load(a[i * 128 + ip, jf])", "t = nl.load(a[i * 128:(i + 1) * 128, :])")
    fast, _ = run_both(src, rows(128 * 9 + 40))
    assert isinstance(fast, KernelError)


def test_masked_rows_leave_the_tensor_in_a_late_iteration():
    # the mask keeps rows 0..63 of each tile; the masked-off rows run past the end in the last iteration,
    # where the recorded region is clamped to the tensor
    src = PLAIN.replace("a.shape[0] // 128", "10").replace(
        "t = nl.load(a[i * 128 + ip, jf])", "t = nl.load(a[i * 128 + ip, jf], mask=(ip < 64))").replace(
        "u = nl.exp(t)", "u = nl.exp(t, mask=(ip < 64))").replace(
        "nl.store(out[i * 128 + ip, jf], value=u)", "nl.store(out[i * 128 + ip, jf], value=u, mask=(ip < 64))")
    fast, _ = run_both(src, rows(128 * 9 + 64))
    assert 0 < fast.replayed < len(fast)


def test_nested_loops_with_loop_reduce():
    src = rowwise_kernel("""
        for i in nl.affine_range(a.shape[0] // 128):
            acc = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
            for j in nl.affine_range(a.shape[1] // 64):
                part = nl.sum(nl.load(a[i * 128 + ip, j * 64 + jf]), axis=1, keepdims=True)
                acc[ip, 0] = nl.loop_reduce(part, op=np.add, loop_indices=[j], dtype=nl.float32)
            nl.store(out[i * 128 + ip, 0], value=acc[ip, 0])
        return out
    """, out_shape="(a.shape[0], 1)")
    fast, full = run_both(src, rows(128 * 8, 64 * 6))
    assert fast.replayed > len(fast) / 2


def test_tiles_computed_into_their_destinations_and_one_read_again():
    """Result tiles assigned into buffers leave the trace; one read again comes back (out of allocation order until
    the end): replayed iterations give the same tensors, in the same order, as running every iteration."""
    src = rowwise_kernel("""
        for i in nl.affine_range(a.shape[0] // 128):
            buf = nl.ndarray((2, nl.par_dim(128), 64), dtype=nl.float32, buffer=nl.sbuf)
            buf[0, ip, jf] = nl.load(a[i * 128 + ip, jf])
            e = nl.exp(buf[0, ip, jf])
            buf[1, ip, jf] = e
            later = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
            later[ip, jf] = nl.add(e, buf[1, ip, jf])
            nl.store(out[i * 128 + ip, jf], value=later)
        return out
    """)
    fast, full = run_both(src, rows(128 * 12) / 1e3)
    assert fast.replayed > len(fast) / 2
    assert list(fast.tensors) == sorted(fast.tensors)
    reads = {r.tensor for ins in fast for r in ins.reads}
    exps = [t for t in fast.tensors.values() if t.kind == "result"]
    assert len(exps) == 12 and all(t.id in reads for t in exps)   # the e of every iteration, and no other result


def test_later_instances_of_a_loop_are_extrapolated_from_two_probes():
    """An inner loop's first instance probes 3 iterations; the later ones, whose first two probes show the step
    it found, 2 (trace-only). The outer loop here is too short to be replayed, and in the second kernel it is
    replayed: either way the trace is the one of running every iteration."""
    src = rowwise_kernel("""
        for i in nl.affine_range(a.shape[0] // 128):
            buf = nl.ndarray((a.shape[1] // 64, nl.par_dim(128), 64), dtype=a.dtype, buffer=nl.sbuf)
            for j in nl.affine_range(a.shape[1] // 64):
                buf[j, ip, jf] = nl.load(a[i * 128 + ip, j * 64 + jf], mask=(j * 64 + jf < a.shape[1]))
                nl.store(out[i * 128 + ip, j * 64 + jf], value=nl.exp(buf[j, ip, jf]), mask=(i * 128 + ip < a.shape[0]))
        return out
    """)
    fast, full = run_both(src, rows(128 * 3, 64 * 10) / 1e3)
    # 3 loads, exps and stores per inner iteration: 10 - 3 iterations replayed, then 10 - 2 twice
    assert fast.replayed == 3 * ((10 - 3) + 2 * (10 - 2))
    # replayed outer loop: its 3 probes see the same whether their inner loop probed 3 iterations or 2 (the inner
    # loop hands its enclosing probe the first probe's and the far corner's mask outcomes and bounds either way)
    fast, full = run_both(src, rows(128 * 16, 64 * 10) / 1e3)
    assert fast.replayed == 3 * ((10 - 3) + 2 * (10 - 2)) + (16 - 3) * 3 * 10


def test_accumulating_into_a_psum_tile_in_place():
    src = """
    @nki.jit
    def kernel(a, b):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        res = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
        for k in nl.affine_range(a.shape[0] // 128):
            res += nl.matmul(nl.load(a[k * 128:(k + 1) * 128, 0:128]), nl.load(b[k * 128:(k + 1) * 128, :]),
                             transpose_x=True)
        nl.store(out, value=nl.copy(res, dtype=nl.float32))
        return out
    """
    fast, _ = run_both(src, rows(128 * 8, 128), rows(128 * 8, 512))
    assert fast.replayed > 0


@pytest.mark.parametrize("name", nkibench.list_problems())
def test_nkibench_baselines_replay_to_the_same_trace_and_profile(name):
    problem = nkibench.get_problem(name)
    task = problem.task("small")
    inputs = task.to_nki(task.get_inputs(seed=0))
    kernel = load_kernel(problem.baseline_path)
    fast = simulate(kernel, *inputs, options=REPLAY).trace
    full = simulate(kernel, *inputs, options=FULL).trace
    assert trace_fields(fast) == trace_fields(full)
    assert estimate(fast).to_dict() == estimate(full).to_dict()


def test_unused_view_out_of_bounds_only_in_a_late_iteration():
    src = PLAIN.replace("u = nl.exp(t)", "u = nl.exp(t)\n        unused = a[i * 128 + 100:i * 128 + 228, 0:64]")
    fast, _ = run_both(src, rows(1280))
    assert isinstance(fast, KernelError) and "out of bounds" in str(fast)


def test_view_reindexed_out_of_its_bounds_only_in_a_late_iteration():
    src = PLAIN.replace("u = nl.exp(t)", "u = nl.exp(t)\n        v = a[i * 128:(i + 1) * 128, :]\n"
                        "        w = v[i * 14:i * 14 + 20, :]")
    fast, _ = run_both(src, rows(1280))
    assert isinstance(fast, KernelError) and "view axis" in str(fast)


def test_random_numbers_are_not_replayed():
    src = PLAIN.replace("t = nl.load(a[i * 128 + ip, jf])",
                        "t = nl.load(a[int(np.random.randint(0, 10)) * 128 + ip, jf])").replace(
        "    for i in", "    np.random.seed(0)\n    for i in")
    fast, _ = run_both(src, rows(1280))
    assert fast.replayed == 0


def test_ragged_tiles_on_both_axes_of_a_nested_loop_are_replayed():
    # regions of the ragged tiles are clamped to the tensor: exact while each bound stays on its side
    src = """
    @nki.jit
    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        ip, jf = nl.arange(128)[:, None], nl.arange(64)[None, :]
        for i in nl.affine_range((a.shape[0] + 127) // 128):
            for j in nl.affine_range((a.shape[1] + 63) // 64):
                inside = (128 * i + ip < a.shape[0]) & (64 * j + jf < a.shape[1])
                t = nl.load(a[128 * i + ip, 64 * j + jf], mask=inside)
                nl.store(out[128 * i + ip, 64 * j + jf], value=nl.exp(t, mask=inside), mask=inside)
        return out
    """
    fast, _ = run_both(src, rows(128 * 9 + 40, 64 * 7 + 10))
    assert fast.replayed > len(fast) / 2
    assert fast.instructions[-1].writes[0].hi == (128 * 9 + 40, 64 * 7 + 10)


def test_region_clamped_only_in_the_first_iterations():
    # rows (i - 6) * 16 + 0..127 start below the tensor until i = 6: the region's lo stays 0 (clamped) in the
    # probes, and extrapolating that would be wrong from i = 6 on
    src = PLAIN.replace("t = nl.load(a[i * 128 + ip, jf])", "t = nl.load(a[(i - 6) * 16 + ip, jf])")
    fast, full = run_both(src, rows(1280))
    loads = [i for i in full if i.op == "dma_load"]
    assert [r.reads[0].lo[0] for r in loads] == [0] * 7 + [16, 32, 48]
    assert 0 < fast.replayed < len(fast)


def test_plain_python_range_loop_is_replayed():
    # a plain `range` in a kernel is a sequential loop (NKI semantics): replayed like nl.sequential_range
    fast, full = run_both(PLAIN.replace("nl.affine_range(a.shape[0] // 128)", "range(0, a.shape[0], 128)").replace(
        "i * 128", "i"), rows(1280))
    assert fast.replayed == 21
    assert {lp[1] for ins in full for lp in ins.loops} == {"sequential"}


def test_plain_python_range_loop_carrying_python_state():
    # k advances by 1, 2, 3, ...: the three probes cannot show it, the liveness check must
    src = PLAIN.replace("    for i in nl.affine_range(a.shape[0] // 128):", "    k = 0\n    for i in range(9):").replace(
        "t = nl.load(a[i * 128 + ip, jf])", "k = k + i\n        t = nl.load(a[k * 16 + ip, jf])")
    fast, _ = run_both(src, rows(1280))
    assert fast.replayed == 0


def test_plain_python_range_loop_over_a_python_list():
    # the loop variable indexes a Python list of offsets that is not affine after the probes
    src = PLAIN.replace("    for i in nl.affine_range(a.shape[0] // 128):",
                        "    starts = [0, 128, 256, 384, 896, 640, 768]\n    for i in range(7):").replace(
        "i * 128 + ip", "starts[i] + ip")
    fast, _ = run_both(src, rows(1280))
    assert fast.replayed == 0


@pytest.mark.parametrize("expr", ["(ip + 32 * i) // 128 * 128 + ip", "(ip * 0 + 30 * i) % 100 + ip",
                                  "np.minimum(ip + 128 * i, 1100) + ip * 0", "(ip + i) * i + ip",
                                  "(ip + 1000) % (i + 5) + ip * 0"])
def test_non_affine_index_expression_of_the_loop_variable(expr):
    # the arithmetic happens on index expressions (inside the simulator), not on the tainted int itself;
    # the first two look affine (or constant) over the three probes and change later
    src = PLAIN.replace("t = nl.load(a[i * 128 + ip, jf])", f"t = nl.load(a[{expr}, jf])")
    fast, _ = run_both(src, rows(2560))
    assert fast.replayed == 0


def test_index_expressions_of_two_loops_multiplied_are_replayed():
    # bilinear in (i, j): affine in each loop variable, like i * j on plain ints
    src = rowwise_kernel("""
        for i in nl.affine_range(4):
            for j in nl.affine_range(5):
                t = nl.load(a[(ip * 0 + i) * (ip * 0 + j) * 8 + ip, jf])
                nl.store(out[(i * 5 + j) * 128 + ip, jf], value=t)
        return out
    """)
    fast, _ = run_both(src, rows(2560))
    assert fast.replayed > 0


@pytest.mark.parametrize("order", ["pure first", "impure first"])
def test_runtime_check_is_redone_when_a_call_reaches_another_function(order):
    # one inner loop, two instances: its call `op(...)` reaches nl.negative in one (replayable) and
    # operator.neg in the other (not an NKI API: refused). The runtime check is kept per loop and per the
    # functions its calls reach: the refusing instance must not reuse the other's answer, nor the reverse
    ops = "(nl.negative, operator.neg)" if order == "pure first" else "(operator.neg, nl.negative)"
    src = rowwise_kernel("""
        for k in range(2):
            op = OPS[k]
            for i in nl.affine_range(a.shape[0] // 128):
                nl.store(out[i * 128 + ip, jf], value=op(nl.load(a[i * 128 + ip, jf])))
        return out
    """, helpers=f"import operator\nOPS = {ops}\n")
    once = rowwise_kernel("""
        for i in nl.affine_range(a.shape[0] // 128):
            nl.store(out[i * 128 + ip, jf], value=nl.negative(nl.load(a[i * 128 + ip, jf])))
        return out
    """)
    fast, _ = run_both(src, rows(1280))
    one, _ = run_both(once, rows(1280))
    assert one.replayed > 0 and fast.replayed == one.replayed   # the nl.negative instance alone replays


def test_loop_that_never_replays_is_no_longer_probed(caplog):
    # the inner loop fails the runtime check in every instance; after two it runs without probing
    src = rowwise_kernel("""
        starts = [0, 64, 128, 192, 256, 320]
        for i in nl.affine_range(a.shape[0] // 128):
            for j in nl.affine_range(6):
                t = nl.load(a[i * 128 + ip, jf])
                nl.store(out[i * 128 + ip, jf], value=nl.add(t, starts[j]))
        return out
    """)
    with caplog.at_level("DEBUG", logger="accelopt_nb.sim.replay"):
        fast, _ = run_both(src, rows(1280))
    assert fast.replayed == 0
    assert sum("nothing was extrapolated in the last 2 instances" in r.getMessage() for r in caplog.records) == 8


def test_loop_changing_runtime_state_every_iteration_stops_probing_after_two(monkeypatch):
    # every iteration prints (nl.device_print appends to the runtime's log): the runtime's state grows in every
    # iteration, so no window of probes can agree; probing stops at the second probe, not the fourth
    from accelopt_nb.sim.replay import values as effects
    probes = []

    class CountedLog(effects.Log):
        def __init__(self) -> None:
            super().__init__()
            probes.append(self)

    monkeypatch.setattr(effects, "Log", CountedLog)
    src = rowwise_kernel("""
        for i in nl.affine_range(a.shape[0] // 128):
            t = nl.load(a[i * 128 + ip, jf])
            nl.device_print("tile", t)
            nl.store(out[i * 128 + ip, jf], value=t)
        return out
    """)
    fast, _ = run_both(src, rows(128 * 16))   # equal outputs, traces and printed logs
    assert fast.replayed == 0
    assert len(probes) == 2   # the one run with values and replay: its loop's first two iterations


def test_loop_reduce_accumulators_of_an_outer_loop_are_replayed_with_values():
    # each i has its own reduction over j (i is not named): the accumulators live in one array of slots, the
    # same for every i (the reduction restarts at j == 0), so the loop over i replays with values too
    src = rowwise_kernel("""
        for i in nl.affine_range(a.shape[0] // 128):
            acc = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
            for j in nl.affine_range(2):
                part = nl.sum(nl.load(a[i * 128 + ip, j * 32 + nl.arange(32)[None, :]]), axis=1, keepdims=True)
                acc[ip, 0] = nl.loop_reduce(part, op=np.add, loop_indices=[j], dtype=nl.float32)
            nl.store(out[i * 128 + ip, 0], value=acc[ip, 0])
        return out
    """, out_shape="(a.shape[0], 1)")
    kernel = load_kernel(source=HEADER + textwrap.dedent(src))
    fast, _ = run_both(src, rows(128 * 16))
    with_values = simulate(kernel, rows(128 * 16), options=VALUES)
    # the first iteration creates the accumulators, so the probes start one iteration later than in trace-only mode
    assert with_values.trace.replayed >= fast.replayed - 7 > 0
    np.testing.assert_allclose(with_values.outputs[0][:, 0], rows(128 * 16).sum(axis=1), rtol=1e-6)


def test_rebound_loop_reduce_slots_are_kept_by_a_replayed_inner_loop():
    # the named loop k is outside; the replayed loop i keeps one accumulator slot per iteration, read back at the
    # next k: replayed iterations must have updated their slots (the rebound form reads them, not a destination)
    src = rowwise_kernel("""
        for k in nl.sequential_range(3):
            for i in nl.affine_range(a.shape[0] // 128):
                part = nl.sum(nl.load(a[i * 128 + ip, k * 16 + nl.arange(16)[None, :]]), axis=1, keepdims=True)
                r = nl.loop_reduce(part, op=np.maximum, loop_indices=[k], dtype=nl.float32)
                nl.store(out[i * 128 + ip, 0], value=r)
        return out
    """, out_shape="(a.shape[0], 1)")
    a = np.random.default_rng(0).standard_normal((128 * 16, 64)).astype(np.float32)
    kernel = load_kernel(source=HEADER + textwrap.dedent(src))
    run_both(src, a)   # bit-equal to running every iteration
    with_values = simulate(kernel, a, options=VALUES)
    assert with_values.trace.replayed > 0
    expected = a[:, :48].reshape(-1, 3, 16).sum(axis=2).max(axis=1)
    np.testing.assert_allclose(with_values.outputs[0][:, 0], expected, rtol=1e-5)


def test_masked_accumulation_into_psum_is_replayed_with_values():
    # `acc += matmul(..., mask=...)`: the accumulation keeps the masked-off rows (never written: they read as 0
    # at the end); recorded as one call, so the loop replays with values like an unmasked accumulation
    src = rowwise_kernel("""
        acc = nl.zeros((64, 64), dtype=nl.float32, buffer=nl.psum)
        pm = nl.arange(64)[:, None]
        for i in nl.sequential_range(a.shape[0] // 128):
            t = nl.load(a[i * 128 + ip, jf])
            acc[pm, jf] += nisa.nc_matmul(t, t, mask=(pm < 50))
        nl.store(out[pm, jf], value=acc[pm, jf])
        return out
    """, out_shape="(64, 64)", helpers="import neuronxcc.nki.isa as nisa")
    a = np.random.default_rng(0).standard_normal((128 * 16, 64)).astype(np.float32)
    run_both(src, a)   # bit-equal to running every iteration
    with_values = simulate(load_kernel(source=HEADER + textwrap.dedent(src)), a, options=VALUES)
    assert with_values.trace.replayed > 0
    expected = sum(a[k * 128:(k + 1) * 128].T @ a[k * 128:(k + 1) * 128] for k in range(16))
    np.testing.assert_allclose(with_values.outputs[0][:50], expected[:50], rtol=1e-4, atol=1e-3)
    assert not with_values.outputs[0][50:].any()


def test_instances_of_a_loop_share_one_compiled_program(monkeypatch):
    # the outer loop (3 iterations) runs every iteration; each instance of the inner loop records the same
    # calls at other numbers, so its replay program is compiled once per launch, not once per instance
    from accelopt_nb.sim.replay import values as effects
    compiled = []
    real = effects.Program._compile
    monkeypatch.setattr(effects.Program, "_compile", staticmethod(lambda log: compiled.append(1) or real(log)))
    src = rowwise_kernel("""
        for i in nl.affine_range(3):
            for j in nl.affine_range(16):
                t = nl.load(a[i * 128 + ip, j * 4 + nl.arange(4)[None, :]])
                nl.store(out[i * 128 + ip, j * 4 + nl.arange(4)[None, :]], value=nl.exp(t))
        return out
    """)
    run_both(src, rows(384))   # bit-equal to running every iteration (and the launches without replay)
    compiled.clear()
    result = simulate(load_kernel(source=HEADER + textwrap.dedent(src)), rows(384), options=VALUES)
    assert result.trace.replayed > 0 and len(compiled) == 1


def test_bfloat16_tiles_are_replayed_with_values():
    # a bf16 SBUF buffer loaded and read in every iteration (AWS's SD attention kernel keeps V this way): value
    # replay rebuilds views of it with their dtype, not as two-byte voids (ml_dtypes' dtype.str is '<V2'), and
    # the fp32 copy an engine computes from is a recorded call, not a new array each iteration
    src = rowwise_kernel("""
        buf = nl.ndarray((nl.par_dim(128), a.shape[0] // 128, 64), dtype=nl.bfloat16, buffer=nl.sbuf)
        for i in nl.affine_range(a.shape[0] // 128):
            buf[ip, i, jf] = nl.load(a[i * 128 + ip, jf], dtype=nl.bfloat16)
            nl.store(out[i * 128 + ip, jf], value=nl.multiply(buf[ip, i, jf], 2.0, dtype=nl.float32))
        return out
    """)
    a = np.random.default_rng(0).standard_normal((128 * 16, 64)).astype(np.float32)
    run_both(src, a)   # bit-equal to running every iteration
    with_values = simulate(load_kernel(source=HEADER + textwrap.dedent(src)), a, options=VALUES)
    assert with_values.trace.replayed > 0
    import ml_dtypes
    np.testing.assert_array_equal(with_values.outputs[0], a.astype(ml_dtypes.bfloat16).astype(np.float32) * 2)


NESTED = rowwise_kernel("""
    for i in nl.affine_range(a.shape[0] // 128):
        for j in nl.affine_range(INNER):
            t = nl.load(a[i * 128 + ip, j * 4 + nl.arange(4)[None, :]])
            nl.store(out[i * 128 + ip, j * 4 + nl.arange(4)[None, :]], value=nl.exp(t))
    return out
""")


@pytest.mark.parametrize("inner, cap_python, outer_replayed", [
    (4, 4096, True),      # iterations past MAX_CALLS, all run in Python: recorded, the outer loop replays
    (4, 20, False),       # ... past MAX_CALLS_PYTHON: not recorded
    (30, 4096, False),    # past MAX_CALLS, most calls the inner loop's replays: not recorded, the inner loop replays
])
def test_large_iterations_are_recorded_when_their_calls_ran_in_python(monkeypatch, caplog, inner, cap_python,
                                                                      outer_replayed):
    from accelopt_nb.sim.replay import values as effects
    monkeypatch.setattr(effects, "MAX_CALLS", 16)
    monkeypatch.setattr(effects, "MAX_CALLS_PYTHON", cap_python)
    src = NESTED.replace("INNER", str(inner))
    with caplog.at_level("DEBUG", logger="accelopt_nb.sim.replay"):
        run_both(src, rows(128 * 16, 4 * inner))
    over = [r.getMessage() for r in caplog.records if "calls in one iteration" in r.getMessage()]
    assert bool(over) != outer_replayed
    replayed = simulate(load_kernel(source=HEADER + src), rows(128 * 16, 4 * inner), options=VALUES).trace.replayed
    if inner == 4:   # too short to replay by itself with values: whatever replays is the outer loop
        assert (replayed > 0) == outer_replayed
    else:
        assert "most of them nested loops' replays" in over[0] and replayed > 0


def test_later_instances_of_a_loop_are_extrapolated_from_two_probes_with_values():
    """With values too, a later instance of an inner loop whose first two probes record the calls and the step
    its first instance's three established replays from two; a buffer allocated in each outer iteration is
    other memory each time, so its instances record other calls and probe three again. Outputs and traces are
    bit-equal to running every iteration (run_both)."""
    shared = rowwise_kernel("""
        buf = nl.ndarray((a.shape[0] // 128, 10, nl.par_dim(128), 64), dtype=a.dtype, buffer=nl.sbuf)
        for i in nl.affine_range(a.shape[0] // 128):
            for j in nl.affine_range(10):
                buf[i, j, ip, jf] = nl.load(a[i * 128 + ip, j * 64 + jf])
                nl.store(out[i * 128 + ip, j * 64 + jf], value=nl.exp(buf[i, j, ip, jf]))
        return out
    """)
    a = rows(128 * 3, 64 * 10) / 1e3   # the outer loop (3 iterations) is too short to replay
    # load, exp and store per inner iteration: 10 - 3 replayed in the first instance, 10 - 2 in the two others
    assert values_replayed(shared, a) == 3 * ((10 - 3) + 2 * (10 - 2))
    per_iteration = shared.replace(
        "buf = nl.ndarray((a.shape[0] // 128, 10, nl.par_dim(128), 64), dtype=a.dtype, buffer=nl.sbuf)\n"
        "    for i in nl.affine_range(a.shape[0] // 128):\n",
        "for i in nl.affine_range(a.shape[0] // 128):\n"
        "        buf = nl.ndarray((1, 10, nl.par_dim(128), 64), dtype=a.dtype, buffer=nl.sbuf)\n")
    per_iteration = per_iteration.replace("buf[i, j,", "buf[0, j,")
    assert "buf[0, j, ip, jf] = nl.load" in per_iteration
    assert values_replayed(per_iteration, a) == 3 * 3 * (10 - 3)


def test_short_loops_inside_a_loop_probing_with_values_run_in_python(monkeypatch, caplog):
    """Inside an outer loop probing with values, an 8-iteration inner loop runs its iterations in Python: had
    it replayed, most of the outer iteration's calls would be replays, and past MAX_CALLS that refuses the
    outer loop, which then replays less (its 13 later iterations are 13 * 8 inner ones)."""
    from accelopt_nb.sim.replay import loops as replay
    from accelopt_nb.sim.replay import values as effects
    monkeypatch.setattr(effects, "MAX_CALLS", 16)
    src = NESTED.replace("INNER", "8")
    a = rows(128 * 16, 4 * 8)
    with caplog.at_level("DEBUG", logger="accelopt_nb.sim.replay"):
        assert values_replayed(src, a) == (16 - 3) * 8 * 3   # load, exp, store
    assert not [r for r in caplog.records if "calls in one iteration" in r.getMessage()]
    monkeypatch.setattr(replay, "MIN_SKIPPED_PROBING", replay.MIN_SKIPPED_VALUES)
    caplog.clear()
    with caplog.at_level("DEBUG", logger="accelopt_nb.sim.replay"):
        fewer = values_replayed(src, a)
    assert [r for r in caplog.records if "most of them nested loops' replays" in r.getMessage()]
    assert 0 < fewer < (16 - 3) * 8 * 3


def test_trace_only_run_leaves_the_collector_as_it_found_it():
    import gc
    kernel = load_kernel(source=HEADER + textwrap.dedent(PLAIN))
    assert gc.isenabled() and gc.get_freeze_count() == 0
    simulate(kernel, rows(1280), options=REPLAY)
    assert gc.isenabled() and gc.get_freeze_count() == 0
    gc.freeze()   # someone else's frozen objects stay frozen
    try:
        frozen = gc.get_freeze_count()
        simulate(kernel, rows(1280), options=REPLAY)
        assert gc.isenabled() and gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()


def test_tile_growing_on_two_axes_is_not_extrapolated_linearly():
    # (i + 1) x (i + 1) tiles: element counts grow quadratically, which the taint does not see (the product
    # is computed inside the simulator); two probes would extrapolate it linearly (measured: a different
    # trace), three see the second step change
    src = rowwise_kernel("""
        for i in nl.affine_range(10):
            t = nl.load(a[0:128, 0:64])
            nl.store(out[0:i + 1, 0:i + 1], value=t[0:i + 1, 0:i + 1])
        return out
    """)
    fast, full = run_both(src, rows(1280))
    assert [ins.writes[0].elements for ins in full if ins.op == "dma_store"][:4] == [1, 4, 9, 16]
    assert fast.replayed == 0


# ---- with values (accelopt_nb.sim.replay.values) -------------------------------------------------------------
def values_replayed(source: str, *inputs) -> int:
    """Instructions replayed with values (``run_both`` has checked outputs and traces against the full run)."""
    run_both(source, *inputs)
    return simulate(load_kernel(source=HEADER + textwrap.dedent(source)), *inputs).trace.replayed


def errors_with_values(source: str, *inputs) -> tuple[KernelError, KernelError]:
    """The errors a kernel raises with values, with loop replay and running every iteration (run_both's
    trace-only half does not check loop-carried writes)."""
    kernel = load_kernel(source=HEADER + textwrap.dedent(source))
    errors = []
    for options in (VALUES, VALUES_FULL):
        with pytest.raises(KernelError) as exc:
            simulate(kernel, *inputs, options=options)
        errors.append(exc.value)
    return errors[0], errors[1]


COMPILER_STYLE = """
@nki.jit
def kernel(a, b):
    M, N = a.shape
    out = nl.ndarray((M, N), dtype=a.dtype, buffer=nl.shared_hbm)
    xs = nl.ndarray(((M + 127) // 128, nl.par_dim(128), 64), dtype=nl.float32, buffer=nl.sbuf)
    ys = nl.ndarray(((M + 127) // 128, nl.par_dim(128), 64), dtype=nl.float32, buffer=nl.sbuf)
    ip, jf = nl.arange(128)[:, None], nl.arange(64)[None, :]
    for i in nl.affine_range((M + 127) // 128):
        inside = 128 * i + ip < M
        xs[i, ip, jf] = nl.load(a[128 * i + ip, jf], mask=inside)
        ys[i, ip, jf] = nl.multiply(nl.exp(xs[i, ip, jf], mask=inside), nl.load(b[128 * i + ip, jf], mask=inside),
                                    mask=inside)
        nl.store(out[128 * i + ip, jf], value=nl.sum(ys[i, ip, jf], axis=1, keepdims=True) + ys[i, ip, jf],
                 mask=inside)
    return out
"""


def test_values_of_a_compiler_style_kernel_with_a_ragged_tail_are_replayed():
    assert values_replayed(COMPILER_STYLE, rows(128 * 12 + 50) / 1e5, rows(128 * 12 + 50)) > 0


def test_matmul_accumulation_in_psum_is_replayed_with_values():
    src = """
    @nki.jit
    def kernel(a, b):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)
        res = nl.ndarray((nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.sbuf)
        for k in nl.affine_range(a.shape[0] // 128):
            acc[...] += nl.matmul(nl.load(a[k * 128:(k + 1) * 128, :]), nl.load(b[k * 128:(k + 1) * 128, :]),
                                  transpose_x=True)
        res[...] = nl.copy(acc)
        nl.store(out, value=res)
        return out
    """
    a = np.random.default_rng(0).standard_normal((128 * 16, 128), dtype=np.float32)
    b = np.random.default_rng(1).standard_normal((128 * 16, 512), dtype=np.float32)
    assert values_replayed(src, a, b) > 0


def test_reading_memory_no_iteration_wrote_stops_value_replay_there():
    # the first loop writes blocks 0..13; the second reads blocks 0..19: replay's guard sees block 14 unwritten
    # and runs it, which reports the read as running every iteration does
    src = rowwise_kernel("""
        buf = nl.ndarray((20, nl.par_dim(128), 64), dtype=nl.float32, buffer=nl.sbuf)
        for i in nl.affine_range(14):
            buf[i, ip, jf] = nl.load(a[i * 128 + ip, jf])
        for i in nl.affine_range(20):
            nl.store(out[i * 128 + ip, jf], value=nl.exp(buf[i, ip, jf]))
        return out
    """)
    replayed, full = errors_with_values(src, rows(128 * 20))
    assert str(replayed) == str(full) and "never written" in str(full)


GUARDS = rowwise_kernel("""
        buf = nl.ndarray((20, nl.par_dim(128), 64), dtype=nl.float32, buffer=nl.sbuf)
        bias = nl.ndarray((2, nl.par_dim(128), 1), dtype=nl.float32, buffer=nl.sbuf)
        left, right, one = nl.arange(32)[None, :], 32 + nl.arange(32)[None, :], nl.arange(1)[None, :]
        bias[1, ip, one] = nl.load(a[ip, one])
        for i in nl.affine_range(WRITTEN):
            buf[i, ip, right] = nl.load(a[i * 128 + ip, right])
        for i in nl.affine_range(20):
            buf[i, ip, left] = nl.load(a[i * 128 + ip, left])
            half = nl.exp(buf[i, ip, left])        # inside this iteration's own write: holds at every iteration
            whole = nl.add(buf[i, ip, jf], half[ip, one])   # its right half: from the first loop
            whole = nl.add(whole, bias[1, ip, one])   # written before the loop, the same box each time: holds
            nl.store(out[i * 128 + ip, jf], value=whole)
        return out
    """)


def test_a_guard_implied_by_its_own_iteration_goes_unchecked_and_the_others_still_stop_replay():
    assert values_replayed(GUARDS.replace("WRITTEN", "20"), rows(128 * 20) / 1e4) > 0
    # the right half written in the iteration too: the whole tile is read after two writes that cover it
    in_parts = re.sub(r"\n( +)half = ", r"\n\1buf[i, ip, right] = nl.load(a[i * 128 + ip, right])\g<0>", GUARDS)
    assert in_parts.count("buf[i, ip, right] = nl.load") == 2
    assert values_replayed(in_parts.replace("WRITTEN", "0"), rows(128 * 20) / 1e4) > 0
    replayed, full = errors_with_values(GUARDS.replace("WRITTEN", "14"), rows(128 * 20) / 1e4)
    assert str(replayed) == str(full) and "never written" in str(full)


@pytest.mark.parametrize("first, second", [
    # iteration i writes blocks 19 - i and i: iteration 10 meets block 10, which iteration 9 wrote
    ("19 - i", "i"),
    # the replayed iterations' writes never meet each other, but iteration 3 writes block 23, which probe
    # iteration 2 wrote: the log check keeps the per-write checks, which report it
    ("20 + i", "25 - i"),
    # no probe iteration's write meets a replayed one, but iteration 16 writes block 116, which iteration 14
    # wrote: the ranges the two writes sweep meet, so every write is checked
    ("100 + i", "130 - i"),
], ids=["meets-itself", "meets-a-probe-write", "between-replayed-iterations"])
def test_loop_carried_write_found_in_a_replayed_iteration_names_its_line(first, second):
    src = rowwise_kernel(f"""
        buf = nl.ndarray((131, nl.par_dim(128), 64), dtype=nl.float32, buffer=nl.sbuf)
        for i in nl.affine_range(20):
            buf[{first}, ip, jf] = nl.load(a[i * 128 + ip, jf])
            buf[{second}, ip, jf] = nl.load(a[i * 128 + ip, jf])
        nl.store(out[ip, jf], value=buf[0, ip, jf])
        return out
    """)
    replayed, full = errors_with_values(src, rows(128 * 20))
    assert str(replayed) == str(full) and "affine_range" in str(full)
    assert (replayed.line, replayed.rule) == (full.line, full.rule)


def test_loop_carried_write_checks_proven_once_per_replay(monkeypatch):
    # blocks i and 40 + i: every replayed write lands on a block no other write touches, so the checks are
    # proven once (each write only logged) and the outputs are those of running every iteration
    import dataclasses

    from accelopt_nb.sim.core import memory
    from accelopt_nb.sim.core.prims import PRIMS
    check = PRIMS[memory._box_conflict_replayed]
    logged, clear = check.provable
    only_logged = []

    def spy(*a, **k):
        only_logged.append(a[1])
        logged(*a, **k)
    monkeypatch.setitem(PRIMS, spy, PRIMS[logged])
    monkeypatch.setitem(PRIMS, check.fn, dataclasses.replace(check, provable=(spy, clear)))
    src = rowwise_kernel("""
        buf = nl.ndarray((60, nl.par_dim(128), 64), dtype=nl.float32, buffer=nl.sbuf)
        for i in nl.affine_range(20):
            buf[i, ip, jf] = nl.load(a[i * 128 + ip, jf])
            buf[40 + i, ip, jf] = nl.exp(buf[i, ip, jf])
            nl.store(out[i * 128 + ip, jf], value=buf[40 + i, ip, jf])
        return out
    """)
    assert values_replayed(src, rows(128 * 20) / 1e4) > 0
    assert len(only_logged) == 3 * 17 * 2   # 17 replayed iterations, 3 writes each (the store too), two runs replay


def test_tiles_allocated_in_the_loop_body_are_replayed_with_values():
    # the NKI idiom: a PSUM accumulator and an SBUF tile allocated in every iteration (a new tensor each)
    src = """
    @nki.jit
    def kernel(a, b):
        out = nl.ndarray((a.shape[0] // 128 * 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        for m in nl.affine_range(a.shape[0] // 128):
            acc = nl.zeros((nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)
            tile = nl.ndarray((nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.sbuf)
            acc += nl.matmul(nl.load(a[m * 128:(m + 1) * 128, :]), nl.load(b), transpose_x=True)
            tile[...] = nl.exp(acc)
            nl.store(out[m * 128:(m + 1) * 128, :], value=tile)
        return out
    """
    a = np.random.default_rng(0).standard_normal((128 * 16, 128), dtype=np.float32) / 8
    b = np.random.default_rng(1).standard_normal((128, 512), dtype=np.float32) / 8
    assert values_replayed(src, a, b) > 0


def test_an_instruction_flattens_as_the_generic_record_walk_does():
    """Flat.instruction (the fast path) gives the signature and integers of Flat.fields, on real traces and on
    an instruction whose fields have unusual types (NumPy ints, a float attribute, no line)."""
    from accelopt_nb.sim.core.runtime import Runtime
    from accelopt_nb.sim.replay import records as replay_records
    from accelopt_nb.sim.replay.state import attach
    from accelopt_nb.sim.trace import Instruction, Region

    rt = Runtime(SimOptions(trace_only=True), "k", set())
    attach(rt)   # the replay wing's state, where Flat keeps what it flattened
    instructions = []
    for name in ("adamw", "lora", "gqa_full", "mamba"):
        problem = nkibench.get_problem(name)
        task = problem.task("small")
        res = simulate(load_kernel(problem.baseline_path), *task.to_nki(task.get_inputs(seed=0)), options=REPLAY)
        instructions += res.trace.instructions
    odd = Instruction(index=np.int64(3), engine="vector", op="tensor_scalar", api="nl.add",
                      reads=(Region(1, "sbuf", (0, 0), (128, 4), 512, 4, 0), "not a region"), writes=(),
                      partitions=np.int32(128), free_elems=4, in_dtypes=("float32",), out_dtype="float32",
                      accumulate=np.bool_(False), attrs={"value": 1.5, "n": 2}, loops=((1, "affine", 2),),
                      file=None, line=None)
    for ins in instructions + [odd]:
        fast, generic = replay_records.Flat(rt), replay_records.Flat(rt)
        assert fast.instruction(ins) == generic.fields(ins)
        assert fast.ints == generic.ints
        assert (fast.lo, fast.hi, fast.size, fast.free, fast.unchecked) == \
               (generic.lo, generic.hi, generic.size, generic.free, generic.unchecked)
    assert len(instructions) > 500


# ---- exactness by construction: a primitive replays only as its declared rules allow ----------------------------
SHUFFLED_ROWS = """
import neuronxcc.nki.isa as nisa


@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    spread = [(5 * k) % 32 for k in range(32)]
    s = nl.ndarray((a.shape[0] // 32, nl.par_dim(32), 64), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(a.shape[0] // 32):
        t = nl.load(a[i * 32:(i + 1) * 32, :])
        nisa.nc_stream_shuffle(src=t, dst=s[i], shuffle_mask=spread)
        nl.store(out[i * 32:(i + 1) * 32, :], value=s[i])
    return out
"""


@pytest.mark.parametrize("rules", ["undeclared", "no rules", "replay", "replay and lanes"])
def test_a_primitive_without_a_replay_rule_is_not_replayed(monkeypatch, rules):
    """A new primitive (here standing in for the one nc_stream_shuffle computes with) replays with values only as
    far as it declares: undeclared or declared without a replay rule, its loop runs every iteration; with a replay
    rule but no lane form, the loop replays one iteration at a time; with both, as lanes. Outputs and traces
    equal running every iteration in every case (run_both)."""
    from accelopt_nb.sim.api import isa
    from accelopt_nb.sim.core.prims import REBUILD, Lane, primitive
    from accelopt_nb.sim.replay import lanes

    def take_rows(data, *, rows):   # a new function of its own: the primitive under test
        return np.take(data, rows, axis=0)

    def take_rows_lanes(data, *, rows):
        return np.take(data, rows, axis=1)

    if rules == "no rules":
        take_rows = primitive()(take_rows)
    elif rules == "replay":
        take_rows = primitive(replay=REBUILD)(take_rows)
    elif rules == "replay and lanes":
        primitive(replay=REBUILD)(take_rows_lanes)
        take_rows = primitive(replay=REBUILD, lane=Lane(impl=take_rows_lanes))(take_rows)
    monkeypatch.setattr(isa, "_rows_taken", take_rows)
    plans = []
    real_plan = lanes.plan_of
    monkeypatch.setattr(lanes, "plan_of", lambda program: plans.append(real_plan(program)) or plans[-1])
    a = rows(32 * 24)
    replayed = values_replayed(SHUFFLED_ROWS, a)
    expected = np.concatenate([blk[[(5 * k) % 32 for k in range(32)]] for blk in a.reshape(24, 32, 64)])
    np.testing.assert_array_equal(simulate(load_kernel(source=HEADER + SHUFFLED_ROWS), a).output, expected)
    if rules in ("undeclared", "no rules"):
        assert replayed == 0 and plans == []
    elif rules == "replay":
        assert replayed > 0
        assert plans and all(isinstance(p, str) and "no lane form for" in p and "take_rows" in p for p in plans)
    else:
        assert replayed > 0 and plans and not any(isinstance(p, str) for p in plans)
