"""Integrity: a kernel cannot change its own verdict.

Two layers, each tested on its own: the static check refuses every way we know to rebind what the
libraries use (assignment to or deletion of attributes, item assignment and mutating calls on
library objects, modules passed around), and the judge runs where the kernel never ran, so even a
tampering kernel that got past the static check is judged by untouched NumPy and ``math``.
"""
from pathlib import Path

import pytest

from accelopt_nb.errors import KernelRejectedError
from accelopt_nb.evaluation import Status, evaluate, make_job
from accelopt_nb.evaluation.engine import evaluate_job
from accelopt_nb.evaluation.static_check import check_kernel_source

SOFTMAX_TASK = Path(__file__).parent / "fixtures" / "hostile" / "softmax_task.py"

HEADER = """import numpy as np
import math
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
"""

# A wrong softmax: it returns its input. {module}, {helper} and {body} are where it tampers.
WRONG_SOFTMAX = HEADER + """{module}

def helper(lib):
    {helper}


@nki.jit
def kernel(x):
    {body}
    M, N = x.shape
    out = nl.ndarray((M, N), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(M // 128):
        t = nl.load(x[i * 128:(i + 1) * 128, :])
        nl.store(out[i * 128:(i + 1) * 128, :], value=t)
    return out
"""
# np.dot is what the relative L2 error of the judge is computed with: returning 0 makes every
# error 0, so an in-process judge would call the wrong kernel correct.
ZERO_DOT = "lambda a, b: 0.0"
TAMPERING = {
    "module level": dict(module=f"np.dot = {ZERO_DOT}", helper="pass", body="pass"),
    "inside the kernel": dict(module="", helper="pass", body=f"np.dot = {ZERO_DOT}"),
    "through a helper": dict(module="", helper=f"lib.dot = {ZERO_DOT}", body="helper(np)"),
    "through an alias": dict(module=f"import numpy as numpy_too\nnumpy_too.dot = {ZERO_DOT}",
                             helper="pass", body="pass"),
    "math at module level": dict(module="math.sqrt = lambda v: 0.0 if v > 1 else 1.0",
                                 helper="pass", body="pass"),
    "deletion": dict(module="", helper="pass", body="del np.isfinite"),
}


def tampering_kernel(kind: str) -> str:
    return WRONG_SOFTMAX.format(**TAMPERING[kind])


@pytest.mark.parametrize("kind", sorted(TAMPERING))
def test_tampering_kernels_are_rejected_by_the_service(kind):
    r = evaluate(SOFTMAX_TASK, tampering_kernel(kind), cache=False)
    assert r.status is Status.REJECTED, r.summary()
    assert r.error["line"] is not None


@pytest.mark.parametrize("kind", ["module level", "inside the kernel", "through a helper",
                                  "through an alias"])
def test_past_the_static_check_the_judge_is_not_fooled(kind, tmp_path):
    """The judge alone (no static check): the tampering happens in the runner, the comparison in
    the judge, so the wrong softmax is incorrect."""
    job = make_job(SOFTMAX_TASK, tampering_kernel(kind))
    r = evaluate_job(job, tmp_path)
    assert r.status is Status.INCORRECT, r.summary()
    assert r.checks[0].rel_errors[0] > 1e-3


def test_the_checks_module_itself_cannot_be_patched_from_the_kernel(tmp_path):
    source = WRONG_SOFTMAX.format(
        module="import accelopt_nb.evaluation.correctness as checks\n"
               "checks.compare_outputs = lambda *a, **k: (True, [0.0], None)",
        helper="pass", body="pass")
    with pytest.raises(KernelRejectedError, match="accelopt_nb"):
        check_kernel_source(source)
    assert evaluate_job(make_job(SOFTMAX_TASK, source), tmp_path).status is Status.INCORRECT


@pytest.mark.parametrize("body, fragment", [
    ("np.allclose = lambda *a, **k: True", "assigning to the attribute 'np.allclose'"),
    ("math.isclose = abs", "assigning to the attribute 'math.isclose'"),
    ("nl.exp = nl.log", "assigning to the attribute 'nl.exp'"),
    ("np.linalg.norm = abs", "assigning to the attribute 'np.linalg.norm'"),
    ("del np.dot", "deleting the attribute 'np.dot'"),
    ("np.dot += 1", "assigning to the attribute 'np.dot'"),
    ("for np.x in range(2):\n    pass", "assigning to the attribute 'np.x'"),
    ("def f(o):\n    o.dot = abs", "assigning to the attribute 'o.dot'"),
    ("class A:\n    def m(self):\n        self.pmax = 1", "assigning to the attribute 'self.pmax'"),
    ("from numpy import linalg\nlinalg.norm = abs", "assigning to the attribute 'linalg.norm'"),
    ("np.sctypeDict['float64'] = 1", "item assignment to 'np.sctypeDict'"),
    ("del np.sctypeDict['float64']", "item assignment to 'np.sctypeDict'"),
    ("d = np.typecodes\nd['All'] = ''", "item assignment to 'd'"),
    ("d = np.typecodes\ne = d\ne['All'] = ''", "item assignment to 'e'"),
    ("getattr(np, 'typecodes')['All'] = ''", "item assignment"),
    ("np.sctypeDict.update({})", "'.update()' on the library object 'np.sctypeDict'"),
    ("d = np.typecodes\nd.clear()", "'.clear()' on the library object 'd'"),
    ("m = math", "the module 'math' may only be used as math.<name>"),
    ("def f():\n    return nl", "the module 'nl' may only be used"),
    ("f = lambda: 0\nf(math)", "the module 'math' may only be used"),
    ("setattr(np, 'dot', abs)", "'setattr'"),
    ("delattr(np, 'dot')", "'delattr'"),
    ("vars(np)['dot'] = abs", "'vars'"),
    ("np.__dict__['dot'] = abs", "np.__dict__"),
    ("globals()['np'] = None", "'globals'"),
])
def test_static_check_refuses_every_rebinding(body, fragment):
    with pytest.raises(KernelRejectedError, match=None) as info:
        check_kernel_source(HEADER + body + "\n")
    assert fragment in info.value.message, info.value.message
    assert info.value.line is not None and info.value.line > HEADER.count("\n")


@pytest.mark.parametrize("body", [
    "t = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.sbuf)\nt[0, 0] = 1.0",
    "x = nl.add(1, 2)\ny = np.zeros(3)\ny[0] = 1\ny.fill(0)",
    "acc = []\nacc.append(1)\nd = {}\nd['k'] = 1\nd.update(k=2)",
    "f = getattr(nl, 'exp')\ng = np.float32\nh = math.sqrt(2.0)",
])
def test_ordinary_kernel_code_still_passes(body):
    check_kernel_source(HEADER + body + "\n")
