"""No silent wrong answers: the API boundary refuses what the simulator does not model, and the
simulator's own failures are reported as simulator bugs, not as the kernel's fault."""
import textwrap

import numpy as np
import pytest

from accelopt_nb.errors import KernelError, KernelLoadError, SimulatorBugError, UnsupportedAPIError
from accelopt_nb.evaluation import EvalOptions, Status, make_job
from accelopt_nb.evaluation.engine import evaluate_job
from accelopt_nb.sim import load_kernel, simulate
from accelopt_nb.sim.api import ops as sim_ops

HEADER_01 = """\
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa
"""
HEADER_02 = """\
import numpy as np
import nki
import nki.language as nl
import nki.isa as nisa
"""


def kernel_with(body: str, header: str = HEADER_01) -> str:
    """A (128, 64) fp32 kernel whose compute line is ``body`` (reads ``t``, assigns ``r``)."""
    return header + textwrap.dedent("""
        @nki.jit
        def kernel(x):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            t = nl.load(x)
        """) + textwrap.indent(textwrap.dedent(body), "    ") + "    nl.store(out, value=r)\n    return out\n"


def run(source: str):
    x = np.linspace(-1, 1, 128 * 64, dtype=np.float32).reshape(128, 64)
    return simulate(load_kernel(source=source, filename="k.py"), x)


def line_of(source: str, text: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if text in line)


@pytest.mark.parametrize("body, api, arg", [
    ("r = nl.exp(t, fast=True)\n", "neuronxcc.nki.language.exp", "fast"),
    ("r = nl.add(t, 1.0, dtyp=nl.float32)\n", "neuronxcc.nki.language.add", "dtyp"),
    ("r = nisa.tensor_copy(t, engin=nisa.vector_engine)\n", "neuronxcc.nki.isa.tensor_copy", "engin"),
])
def test_unknown_keyword_is_refused_naming_api_and_argument(body, api, arg):
    src = kernel_with(body)
    with pytest.raises(UnsupportedAPIError) as e:
        run(src)
    err = e.value
    assert err.api == api and f"'{arg}'" in err.message and "unknown keyword" in err.message
    assert (err.file, err.line) == ("k.py", line_of(src, body.strip()))


@pytest.mark.parametrize("body, arg, why", [
    # a documented argument whose effect the simulator does not model
    ("s = nisa.bn_aggr(nisa.bn_stats(t), mask=(nl.arange(128)[:, None] < 64))\nr = nl.copy(t)\n", "mask",
     "ignores this argument"),
    ("r = nl.softmax(t, axis=1, compute_dtype=nl.bfloat16)\n", "compute_dtype", "not implemented"),
    # a value the simulator does not know
    ("r = nl.exp(t, dtype='float64x')\n", "dtype", "unknown dtype"),
    ("r = nl.copy(t, dtype=np.complex64)\n", "dtype", "unknown dtype"),
    ("r = nisa.tensor_copy(t, engine=42)\n", "engine", "unknown engine"),
])
def test_unmodelled_argument_or_value_is_refused(body, arg, why):
    with pytest.raises(UnsupportedAPIError) as e:
        run(kernel_with(body))
    assert f"argument '{arg}'" in e.value.message and why in e.value.message
    assert e.value.line is not None


def test_loop_reduce_over_named_loops_is_right_or_refused():
    """No silent wrong answer: a reduction the simulator cannot do as named is refused, never approximated."""
    body = ("for i in nl.affine_range(2):\n"
            "    for j in nl.affine_range(3):\n"
            "        acc = nl.loop_reduce(t, op=np.add, loop_indices=[LOOPS], dtype=nl.float32)\n"
            "r = nl.copy(acc)\n")
    x = np.linspace(-1, 1, 128 * 64, dtype=np.float32).reshape(128, 64)
    for loops, factor in (("j", 3), ("i", 2), ("i, j", 6)):
        try:
            out = run(kernel_with(body.replace("LOOPS", loops))).output
        except UnsupportedAPIError as e:
            assert loops != "j" and "argument 'loop_indices'" in e.message
            continue
        np.testing.assert_allclose(out, factor * x, rtol=1e-6, err_msg=f"loop_indices=[{loops}]")


def test_unknown_dtype_outside_the_api_functions_is_the_kernels_error():
    src = kernel_with("r = t.astype(np.complex64)\n")
    with pytest.raises(UnsupportedAPIError) as e:
        run(src)
    assert not isinstance(e.value, SimulatorBugError) and "unknown dtype" in e.value.message
    assert e.value.line == line_of(src, "astype")


def test_documented_defaults_and_no_effect_arguments_still_run():
    body = ("a = nisa.activation(op=nl.exp, data=t, reduce_cmd=nisa.reduce_cmd.idle, name='act')\n"
            "s = nl.ndarray((128, 1), dtype=nl.float32)\n"
            "for i in nl.affine_range(1, precise_schedule=True):\n"
            "    e = nisa.activation(op=nl.exp, data=t, reduce_op=np.add, reduce_res=s,\n"
            "                        reduce_cmd=nisa.reduce_cmd.reset_reduce)\n"
            "b = nl.copy(a, mask=None)\n"
            "r = nisa.tensor_scalar(b, np.add, s, engine=nisa.unknown_engine, dtype=nl.float32)\n")
    res = run(kernel_with(body))
    x = np.linspace(-1, 1, 128 * 64, dtype=np.float32).reshape(128, 64)
    np.testing.assert_allclose(res.output, np.exp(x) + np.exp(x).sum(axis=1, keepdims=True), rtol=1e-5)


def test_documented_but_missing_api_is_refused_where_it_is_used():
    src = kernel_with("nl.atomic_rmw(out, value=t, op=np.add)\nr = t\n")
    with pytest.raises(UnsupportedAPIError) as e:
        run(src)
    assert e.value.api == "neuronxcc.nki.language.atomic_rmw" and "does not implement" in e.value.message
    assert e.value.line == line_of(src, "atomic_rmw")
    # imported by name at load time: the import line is blamed
    src = HEADER_01 + "from neuronxcc.nki.language import all_reduce\n" + kernel_with("r = t\n")
    with pytest.raises(UnsupportedAPIError) as e:
        load_kernel(source=src, filename="k.py")
    assert e.value.api == "neuronxcc.nki.language.all_reduce"
    assert e.value.line == line_of(src, "import all_reduce")


def test_wrong_arity_is_the_kernels_error_not_a_simulator_bug():
    with pytest.raises(UnsupportedAPIError) as e:
        run(kernel_with("r = nl.exp()\n"))
    assert "bad arguments" in e.value.message
    src = HEADER_02 + textwrap.dedent("""
        @nki.jit
        def kernel(x):
            t = nl.ndarray(x.shape, nl.float32, nl.sbuf)
            nisa.tensor_copy(t)
            return x
        """)
    with pytest.raises(UnsupportedAPIError) as e:
        simulate(load_kernel(source=src), np.zeros((128, 4), np.float32))
    assert "bad arguments" in e.value.message and "src" in e.value.message


def test_standalone_front_end_binds_by_its_own_docs():
    # nki (beta 2): nl.ndarray(shape, dtype, buffer, name, address) is positional in the docs
    ok = HEADER_02 + textwrap.dedent("""
        @nki.jit
        def kernel(x):
            out = nl.ndarray(x.shape, x.dtype, nl.shared_hbm)
            t = nl.ndarray(x.shape, nl.float32, nl.sbuf, 'tile', (0, 0))   # address=(partition, byte offset)
            nisa.dma_copy(t, x)
            r = nl.ndarray(x.shape, nl.float32, nl.sbuf)
            nisa.tensor_copy(r, t, engine=nisa.vector_engine, name='cp')
            nisa.dma_copy(dst=out, src=r, dge_mode=nisa.dge_mode.none)
            return out
        """)
    x = np.arange(128 * 64, dtype=np.float32).reshape(128, 64)
    np.testing.assert_array_equal(simulate(load_kernel(source=ok), x).output, x)
    for bad, arg in [("nisa.dma_copy(t, x, oob_mode=nisa.oob_mode.skip, bogus=2)", "bogus"),
                     ("nisa.tensor_copy(r, t, mask=None, bogus=1)", "bogus")]:
        anchor = bad.split("(")[0] + "(" + bad.split("(")[1].split(",")[0]
        lines = ok.splitlines()
        i = next(j for j, line in enumerate(lines) if line.strip().startswith(anchor))
        lines[i] = lines[i][:len(lines[i]) - len(lines[i].lstrip())] + bad
        with pytest.raises(UnsupportedAPIError) as e:
            simulate(load_kernel(source="\n".join(lines)), x)
        assert f"'{arg}'" in e.value.message


def test_standalone_nc_matmul_refuses_keywords_it_does_not_know():
    src = HEADER_02 + textwrap.dedent("""
        @nki.jit
        def kernel(a, b):
            out = nl.ndarray((64, 32), nl.float32, nl.shared_hbm)
            sa = nl.ndarray(a.shape, nl.float32, nl.sbuf)
            sb = nl.ndarray(b.shape, nl.float32, nl.sbuf)
            nisa.dma_copy(sa, a)
            nisa.dma_copy(sb, b)
            acc = nl.ndarray((64, 32), nl.float32, nl.psum)
            nisa.nc_matmul(acc, sa, sb, EXTRA)
            r = nl.ndarray((64, 32), nl.float32, nl.sbuf)
            nisa.tensor_copy(r, acc)
            nisa.dma_copy(out, r)
            return out
        """)
    a, b = np.ones((128, 64), np.float32), np.ones((128, 32), np.float32)
    np.testing.assert_array_equal(simulate(load_kernel(source=src.replace(", EXTRA", "")), a, b).output, 128.0)
    for extra, arg in [("mask=None", "mask"), ("tile_size=(), bogus=1", "bogus")]:
        with pytest.raises(UnsupportedAPIError) as e:
            simulate(load_kernel(source=src.replace("EXTRA", extra)), a, b)
        assert f"'{arg}'" in e.value.message


def test_facades_expose_no_simulator_internals():
    src = kernel_with("r = nl.read\n")
    with pytest.raises(KernelError) as e:
        run(src)
    assert "read" in str(e.value) and not isinstance(e.value, SimulatorBugError)


# ---- simulator bugs ----------------------------------------------------------------------------------
def _break_elementwise(monkeypatch):
    """Make the simulator's own element-wise path fail the way an internal bug would."""
    def broken(*args, **kwargs):
        return np.empty((2, 3))[5]
    monkeypatch.setattr(sim_ops, "elementwise", broken)


def test_exception_inside_the_simulator_is_reported_as_a_simulator_bug(monkeypatch):
    _break_elementwise(monkeypatch)
    src = kernel_with("r = nl.exp(t)\n")
    with pytest.raises(SimulatorBugError) as e:
        run(src)
    err = e.value
    assert (err.file, err.line) == ("k.py", line_of(src, "nl.exp(t)"))
    assert err.internal.startswith("IndexError") and "accelopt_nb/sim/api/language.py" in err.internal
    assert str(err).startswith("simulator bug:") and "not in the kernel" in str(err)
    assert err.to_dict()["type"] == "SimulatorBugError"


def test_the_kernels_own_python_errors_stay_the_kernels():
    src = kernel_with("r = t\nn = [1, 2][5]\n")
    with pytest.raises(KernelError) as e:
        run(src)
    assert not isinstance(e.value, SimulatorBugError) and "IndexError" in e.value.message
    assert e.value.line == line_of(src, "[1, 2][5]")
    # a kernel object that fails when the simulator uses it is still the kernel's error
    src = kernel_with("class Bad:\n    def __index__(self):\n        raise ValueError('bad size')\n"
                      "r = t\nz = nl.zeros((128, Bad()), dtype=nl.float32)\n")
    with pytest.raises(KernelError) as e:
        run(src)
    assert not isinstance(e.value, SimulatorBugError)


def test_evaluation_reports_a_simulator_bug_as_crashed_with_a_distinct_message(monkeypatch, tmp_path):
    from pathlib import Path
    hostile = Path(__file__).parent / "fixtures" / "hostile"
    _break_elementwise(monkeypatch)
    job = make_job(hostile / "scale_task.py", (hostile / "good_scale.py").read_text(),
                   options=EvalOptions(seeds=(0,), adversarial=False, profile=False))
    result = evaluate_job(job, tmp_path)
    assert result.status is Status.CRASHED
    assert result.message.startswith("simulator bug (not the kernel's fault)")
    assert result.error["type"] == "SimulatorBugError" and result.error["line"] == 15


def test_unsupported_use_at_load_time_is_located():
    with pytest.raises(KernelLoadError) as e:
        load_kernel(source="import numpy as np\nimport neuronxcc.nki.bogus\n", filename="k.py")
    assert (e.value.file, e.value.line) == ("k.py", 2)
    src = HEADER_01 + "ENGINE = nisa.tensor_copy(None, engine=99)\n"
    with pytest.raises(UnsupportedAPIError) as e:
        load_kernel(source=src, filename="k.py")
    assert (e.value.file, e.value.line) == ("k.py", line_of(src, "ENGINE")) and "unknown engine" in e.value.message
