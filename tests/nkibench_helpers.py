"""Shared helpers for the NKIBench tests: a tiny user-defined problem folder."""
from __future__ import annotations

from pathlib import Path

YAML = """\
name: {name}
description: Doubles a matrix.
shapes:
  M: {{paper: 1024, small: 128}}
  N: {{paper: 2048, small: 256}}
tolerance: 1.0e-6
constraints: ["M % 128 == 0"]
peak:
  vec_flops: "M*N"
  mm_flops: "0"
  hbm_bytes: "8*M*N"
"""

TASK = """\
import numpy as np

M = 1024
N = 2048


def get_inputs():
    return [np.random.normal(0, 1, (M, N)).astype(np.float32)]


def forward(x):
    return 2.0 * x.astype(np.float64)


def transform_to_nki_inputs(inputs):
    return inputs


def transform_nki_outputs(k_res, ref):
    return (np.asarray(k_res).reshape(ref.shape),)
"""

KERNEL = """\
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def kernel(x):
    M, N = x.shape
    out = nl.ndarray((M, N), dtype=x.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // 128):
        t = nl.load(x[nl.ds(m * 128, 128), :])
        nl.store(out[nl.ds(m * 128, 128), :], value=nl.multiply(t, 2.0))
    return out
"""


def make_problem(root: Path, name: str = "double", yaml_text: str | None = None) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "problem.yaml").write_text(yaml_text if yaml_text is not None else YAML.format(name=name))
    (folder / "task.py").write_text(TASK)
    (folder / "kernel.py").write_text(KERNEL)
    return folder
