"""benchmarks/real_kernels.py on real public kernels, from local checkouts named by environment variables.

ACCELOPT_NKI_LIBRARY (github.com/aws-neuron/nki-library), ACCELOPT_NXDI (aws-neuron/neuronx-distributed-inference)
and ACCELOPT_NKI_SAMPLES (aws-neuron/nki-samples): each test skips without its checkout. Today's-style kernels
are expected to fail until the simulator runs the standalone ``nki`` style (issue 32): they are strict xfails,
one per kernel and mode, so each flips to a failure the moment it starts to pass and its mark must go.
"""
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import real_kernels  # noqa: E402

ROOTS = {"nki-library": os.environ.get("ACCELOPT_NKI_LIBRARY"), "nxdi": os.environ.get("ACCELOPT_NXDI"),
         "nki-samples": os.environ.get("ACCELOPT_NKI_SAMPLES")}
TODAY = [c for c in real_kernels.all_cases() if c.style == "nki"]
OLD = [c for c in real_kernels.all_cases() if c.repo == "nki-samples"]
TORCH = {"maxpooling:max_pooling_2d_stride_1", "interpolate_bilinear_fwd:interpolate_bilinear_2x_fwd"}  # import torch
NOT_YET = "issue 32: the simulator does not run the standalone nki style of these kernels yet"
RUN_TODAY = {   # run and match NumPy in both modes (benchmarks/README.md, "Today's nki style")
    "nki_cross_attention_kernel:cross_attn_kernel", "qwen_qk_norm_rope:qwen_qk_norm_partial_rope_kernel",
    "nki_deltanet:_deltanet_recurrent_step_batched_kernel", "cumsum:cumsum", "rmsnorm_tkg:rmsnorm_tkg",
    "layernorm_tkg:layernorm_tkg", "rope:RoPE (contiguous)", "rope:RoPE (interleaved)", "rope_hf:rope_hf",
    "cross_entropy:cross_entropy_forward", "depthwise_conv1d:depthwise_conv1d_implicit_gemm", "qkv:qkv",
    "output_projection_cte:output_projection_cte"}


def _path(case):
    root = ROOTS[case.repo]
    if not root:
        pytest.skip(f"set the checkout of {case.repo} (ACCELOPT_NKI_LIBRARY / ACCELOPT_NXDI / ACCELOPT_NKI_SAMPLES)")
    path = real_kernels._locate(case, {case.repo: [Path(root)]})
    if path is None:
        pytest.skip(f"{case.path} is not in {root}")
    return path


@pytest.mark.slow
@pytest.mark.parametrize("mode", real_kernels.MODES)
@pytest.mark.parametrize("case", [c if c.title in RUN_TODAY else
                                  pytest.param(c, marks=pytest.mark.xfail(strict=True, reason=NOT_YET))
                                  for c in TODAY], ids=lambda c: c.title)
def test_todays_style_kernel_matches_numpy(case, mode):
    out = real_kernels.run_case(case, _path(case), seed=0, mode=mode)
    assert out.status == ("pass" if mode == "values" else "ok"), out.detail


@pytest.mark.slow
@pytest.mark.parametrize("case", TODAY, ids=lambda c: c.title)
def test_todays_style_kernel_never_crashes_the_simulator(case):
    """Whatever stops a kernel is a simulator error naming the kernel's file, never a Python crash inside it."""
    out = real_kernels.run_case(case, _path(case), seed=0, mode="values")
    assert not out.detail.startswith("(crash)"), out.detail
    if out.status == "ERROR":
        assert case.path.split("/")[-1] in out.detail, out.detail


@pytest.mark.slow
@pytest.mark.parametrize("case", [c for c in OLD if c.title not in TORCH], ids=lambda c: c.title)
def test_old_style_kernel_still_matches_numpy(case):
    out = real_kernels.run_case(case, _path(case), seed=0, mode="values")
    assert out.status == "pass", out.detail


def test_every_case_names_a_style_and_a_known_repository():
    cases = real_kernels.all_cases()
    assert len(TODAY) >= 15 and {c.repo for c in TODAY} == {"nki-library", "nxdi"}
    assert all(c.style in ("nki", "neuronxcc.nki") for c in cases)
    assert len({(c.repo, c.title) for c in cases}) == len(cases)      # titles tell the table's rows apart


def test_without_a_checkout_the_benchmark_skips(capsys):
    assert real_kernels.main([]) == 0
    assert "skipped" in capsys.readouterr().out
