"""no_reorder blocks in the performance model (issue 32): the compiler puts a dependency edge between every two
instructions of the block, so they run one after another; instructions outside the block are not held by it."""
import numpy as np
import pytest

from accelopt_nb.perf.hardware import load_hw
from accelopt_nb.perf.schedule import schedule
from accelopt_nb.sim import SimOptions, load_kernel, simulate

NKI = "import nki\nimport nki.isa as nisa\nimport nki.language as nl\nimport numpy as np\n\n"
OLD = ("import numpy as np\nimport neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\n"
       "import neuronxcc.nki.isa as nisa\nimport neuronxcc.nki.compiler as ncc\n\n")

# two independent instructions on two engines (ScalarE, VectorE), then one on GpSimdE after the block
BODY = '''
@nki.jit
def kernel(x):
    out = nl.ndarray((3, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    a = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    b = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    c = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
BLOCK
        nisa.activation(dst=a, op=nl.exp, data=t)
        nisa.tensor_scalar(dst=b, data=t, op0=nl.add, operand0=1.0, engine=nisa.vector_engine)
    nisa.memset(dst=c, value=2.0, engine=nisa.gpsimd_engine)
    nisa.dma_copy(dst=out[0], src=a)
    nisa.dma_copy(dst=out[1], src=b)
    nisa.dma_copy(dst=out[2], src=c)
    return out
'''


def timed(source, *inputs):
    trace = simulate(load_kernel(source=source), *inputs, options=SimOptions(trace_only=True)).trace
    sched = schedule(trace, load_hw("trn2"))   # trn2: VectorE and GpSimdE do not share an SBUF port
    by_op = {ins.op: ins.index for ins in trace.instructions if ins.engine != "dma"}
    return trace, sched, by_op


def test_a_no_reorder_block_runs_its_instructions_one_after_another():
    x = np.zeros((128, 512), np.float32)
    free = BODY.replace("BLOCK\n", "    if True:\n")
    _, s0, op0 = timed(NKI + free, x)
    trace, s1, op1 = timed(NKI + BODY.replace("BLOCK", "    with nl.no_reorder():"), x)
    act, add, fill = op1["activation"], op1["tensor_scalar"], op1["memset"]
    assert trace.instructions[act].attrs["no_reorder"] == trace.instructions[add].attrs["no_reorder"]
    assert "no_reorder" not in trace.instructions[fill].attrs
    # without the block the two engines overlap; with it VectorE waits for ScalarE to finish
    assert s0.start[op0["tensor_scalar"]] < s0.end[op0["activation"]]
    assert s1.start[add] >= s1.end[act]
    # the instruction after the block is not held by it
    assert s1.start[fill] < s1.end[add]
    assert s1.total_time > s0.total_time


LOOP = '''
@nki.jit
def kernel(x):
    out = nl.ndarray((2, 2, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
OUTER
        a = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        b = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
INNER
            nisa.activation(dst=a, op=nl.exp, data=t)
            nisa.tensor_scalar(dst=b, data=t, op0=nl.add, operand0=1.0, engine=nisa.vector_engine)
        nisa.dma_copy(dst=out[i, 0], src=a)
        nisa.dma_copy(dst=out[i, 1], src=b)
    return out
'''


@pytest.mark.parametrize("outside", [True, False])
def test_a_block_around_a_loop_chains_its_iterations_and_one_inside_does_not(outside):
    x = np.zeros((128, 512), np.float32)
    if outside:
        src = LOOP.replace("OUTER", "    with nl.no_reorder():\n     for i in nl.affine_range(2):")
    else:
        src = LOOP.replace("OUTER", "    if True:\n     for i in nl.affine_range(2):")
    src = src.replace("INNER", "        with nl.no_reorder():" if not outside else "        if True:")
    trace = simulate(load_kernel(source=NKI + src), x, options=SimOptions(trace_only=True)).trace
    sched = schedule(trace, load_hw("trn1"))
    acts = [i.index for i in trace.instructions if i.op == "activation"]
    adds = [i.index for i in trace.instructions if i.op == "tensor_scalar"]
    assert sched.start[adds[0]] >= sched.end[acts[0]]
    # the second iteration's ScalarE work waits for the first iteration's VectorE work only in one block
    assert (sched.start[acts[1]] >= sched.end[adds[0]]) == outside


def test_the_nki_0_1_loop_directive_makes_the_loop_one_block():
    body = '''
@nki.jit
def kernel(x):
    out = nl.ndarray((2, 2, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    for i in nl.sequential_range(2, directives=ncc.no_reorder()):
        a = nisa.activation(op=nl.exp, data=t)
        b = nisa.tensor_scalar(t, np.add, 1.0, engine=nisa.vector_engine)
        nl.store(out[i, 0], value=a)
        nl.store(out[i, 1], value=b)
    return out
'''
    x = np.random.default_rng(0).standard_normal((128, 512)).astype(np.float32)
    res = simulate(load_kernel(source=OLD + body), x)
    np.testing.assert_allclose(res.output[1, 0], np.exp(x), rtol=1e-5)
    np.testing.assert_allclose(res.output[0, 1], x + 1, rtol=1e-6)
    inside = [i for i in res.trace.instructions if i.loops]
    assert inside and len({i.attrs.get("no_reorder") for i in inside}) == 1
    assert None not in {i.attrs.get("no_reorder") for i in inside}
    sched = schedule(res.trace, load_hw("trn1"))
    order = sorted(inside, key=lambda i: i.index)
    assert all(sched.start[b.index] >= sched.end[a.index] for a, b in zip(order, order[1:]))
