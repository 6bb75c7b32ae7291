"""benchmarks/real_kernels.py on real public kernels, from local checkouts named by environment variables.

ACCELOPT_NKI_LIBRARY (github.com/aws-neuron/nki-library), ACCELOPT_NXDI (aws-neuron/neuronx-distributed-inference)
and ACCELOPT_NKI_SAMPLES (aws-neuron/nki-samples): each test skips without its checkout. Today's-style kernels
are expected to fail until the simulator runs the standalone ``nki`` style (issue 32): they are strict xfails,
one per kernel and mode, so each flips to a failure the moment it starts to pass and its mark must go.
"""
import importlib.util
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
    "output_projection_cte:output_projection_cte", "cascaded_max:cascaded_max", "attention_cte:attention_cte",
    "mla_attention_nki_kernel:mla_attention_tkg", "find_nonzero_indices:find_nonzero_indices",
    "rmsnorm_quant:rmsnorm_quant_kernel"}
RUN_TODAY_ONLY = {("dynamic_elementwise_add:dynamic_elementwise_add", "values")}   # in one mode only, because:
RUN_TODAY_NOT = {("dynamic_elementwise_add:dynamic_elementwise_add", "trace"):
                 "a loop bound loaded into a register from memory has no value trace-only (refused by name)"}
# the NKI library's top-k imports scipy at module level (not a dependency of ours): it runs where scipy is installed
if importlib.util.find_spec("scipy") is not None:
    RUN_TODAY = RUN_TODAY | {"rotational_topk:topk"}
else:
    RUN_TODAY_NOT.update({("rotational_topk:topk", m): "imports scipy, which is not installed (not a dependency)"
                          for m in real_kernels.MODES})


def _path(case):
    root = ROOTS[case.repo]
    if not root:
        pytest.skip(f"set the checkout of {case.repo} (ACCELOPT_NKI_LIBRARY / ACCELOPT_NXDI / ACCELOPT_NKI_SAMPLES)")
    path = real_kernels._locate(case, {case.repo: [Path(root)]})
    if path is None:
        pytest.skip(f"{case.path} is not in {root}")
    return path


def _today(case, mode):
    runs = case.title in RUN_TODAY or (case.title, mode) in RUN_TODAY_ONLY
    reason = RUN_TODAY_NOT.get((case.title, mode), NOT_YET)
    return pytest.param(case, mode, id=f"{mode}-{case.title}",
                        marks=() if runs else pytest.mark.xfail(strict=True, reason=reason))


@pytest.mark.slow
@pytest.mark.parametrize(("case", "mode"), [_today(c, m) for c in TODAY for m in real_kernels.MODES])
def test_todays_style_kernel_matches_numpy(case, mode):
    out = real_kernels.run_case(case, _path(case), seed=0, mode=mode)
    assert out.status == ("pass" if mode == "values" else "ok"), out.detail


@pytest.mark.slow
@pytest.mark.parametrize("case", TODAY, ids=lambda c: c.title)
def test_todays_style_kernel_never_crashes_the_simulator(case):
    """Whatever stops a kernel is a simulator error naming a line of the kernel's files (its own, or a module of
    its package it imports), never a Python crash inside the simulator."""
    out = real_kernels.run_case(case, _path(case), seed=0, mode="values")
    assert not out.detail.startswith("(crash)"), out.detail
    if out.status == "ERROR":
        root = str(Path(ROOTS[case.repo]).resolve())
        assert f"{root}/" in out.detail and ".py:" in out.detail, out.detail


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
