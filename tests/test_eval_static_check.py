"""The static check refuses kernels that reach beyond NumPy, math and NKI, naming the line."""
import pytest

from accelopt_nb.errors import KernelLoadError, KernelRejectedError
from accelopt_nb.evaluation.static_check import check_kernel_source

HEADER = """import numpy as np
import math
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.typing as nt
from neuronxcc.nki import trace
from neuronxcc.nki.language import par_dim
"""
N_HEADER = HEADER.count("\n")

GOOD = HEADER + """
@nki.jit
def kernel(input, w):
    out = nl.ndarray(input.shape, dtype=input.dtype, buffer=nl.shared_hbm)
    t = nl.load(input)
    nl.store(out, value=nl.exp(t) * math.sqrt(2.0) + np.float32(1))
    print(getattr(nl, "float32"), "{0}".format(1), input)
    return out
"""


def test_a_normal_kernel_passes():
    check_kernel_source(GOOD)


def test_standalone_nki_package_and_future_imports_pass():
    check_kernel_source("from __future__ import annotations\nimport nki\nimport nki.language as nl\n"
                        "from nki import isa\n")


@pytest.mark.parametrize("body, fragment", [
    ("import os", "import of 'os'"),
    ("import subprocess as sp", "import of 'subprocess'"),
    ("from socket import socket", "import of 'socket'"),
    ("import ctypes", "import of 'ctypes'"),
    ("import importlib", "import of 'importlib'"),
    ("import builtins", "import of 'builtins'"),
    ("from neuronxcc import driver", "from neuronxcc import driver"),
    ("import neuronxcc.starfish", "import of 'neuronxcc.starfish'"),
    ("import numpy.ctypeslib", "import of 'numpy.ctypeslib'"),
    ("from numpy import load", "numpy.load"),
    ("from numpy import *", "import *"),
    ("from . import x", "relative imports"),
    ("x = open('/etc/passwd').read()", "'open'"),
    ("exec('1')", "'exec'"),
    ("eval('1')", "'eval'"),
    ("c = compile('1', 'f', 'eval')", "'compile'"),
    ("m = __import__('os')", "'__import__'"),
    ("g = globals()", "'globals'"),
    ("os.system('ls')", "module 'os'"),
    ("sys.exit(0)", "module 'sys'"),
    ("a = np.load('x.npy')", "'.load'"),
    ("np.save('x.npy', 1)", "'.save'"),
    ("m = np.memmap('f')", "'.memmap'"),
    ("x = nl.float32.__class__", "'.__class__'"),
    ("x = nl._private", "'._private'"),
    ("x = np.ma.core.os", "'.os'"),
    ("y = getattr(nl, '__dict__')", "underscore attribute"),
    ("name = 'exp'\ny = getattr(nl, name)", "computed attribute name"),
    ("setattr(nl, 'x', 1)", "'setattr'"),
    ("b = __builtins__", "'__builtins__'"),
    ("a = np.zeros(3)\na.tofile('x')", "'.tofile'"),
    ("m = np", "only be used as np.<function>"),
    ("x = nl.np.load('x.npy')", "'.np'"),
    ("x = nl.ctypeslib", "'.ctypeslib'"),
    ("s = '{0.__class__}'.format(nl)", "format strings"),
])
def test_forbidden_constructs_are_rejected_with_the_line(body, fragment):
    source = HEADER + "\n" + body + "\n"
    with pytest.raises(KernelRejectedError) as info:
        check_kernel_source(source, filename="cand.py")
    err = info.value
    assert fragment in err.message
    assert err.file == "cand.py"
    # the offending statement is the last line of the body
    assert err.line == N_HEADER + 1 + body.count("\n") + 1
    assert err.to_dict()["rule"].startswith("kernels may use only NumPy")


def test_nl_load_is_not_confused_with_numpy_load():
    check_kernel_source(HEADER + "def kernel(a):\n    return nl.load(a)\n")


def test_syntax_error_is_a_load_error_with_its_line():
    with pytest.raises(KernelLoadError) as info:
        check_kernel_source(HEADER + "def kernel(a):\n    return a +\n")
    assert info.value.line == N_HEADER + 2
    assert "syntax error" in info.value.message


def test_oversized_source_is_rejected():
    with pytest.raises(KernelRejectedError, match="limit"):
        check_kernel_source("#" * 500_000)
