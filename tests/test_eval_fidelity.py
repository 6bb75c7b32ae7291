"""Fidelity levels, the shared input cache, in-batch deduplication, validated runner outputs."""
from concurrent.futures import Future
from pathlib import Path

import numpy as np
import pytest

import nkibench
from accelopt_nb.errors import ConfigError
from accelopt_nb.evaluation import (EvalOptions, EvalResult, LocalPoolEvaluator, Status, evaluate,
                                    evaluate_many, make_job)
from accelopt_nb.evaluation.backends import register_backend
from accelopt_nb.evaluation.backends.base import RunOutput
from accelopt_nb.evaluation.datacache import InputCache
from accelopt_nb.evaluation.engine import evaluate_job
from accelopt_nb.evaluation.service import normalized_source_key

HOSTILE = Path(__file__).parent / "fixtures" / "hostile"
SCALE_TASK = HOSTILE / "scale_task.py"
GOOD = (HOSTILE / "good_scale.py").read_text()
SILU_DIR = Path(nkibench.get_problem("silu").baseline_path).parent
SILU = nkibench.get_problem("silu").baseline_source()
ONE_SEED = EvalOptions(seeds=(0,))
# silu with a "paper" shape small enough for a unit test (the judge runs in this process, so a
# problem registered here is visible to it)
TINY_SHAPES = "  M: {paper: 512, small: 256}\n  N: {paper: 1536, small: 640}\n"


@pytest.fixture(scope="module")
def tiny_silu(tmp_path_factory):
    import re
    root = tmp_path_factory.mktemp("problems")
    d = root / "tiny_silu"
    d.mkdir()
    yml = (SILU_DIR / "problem.yaml").read_text().replace("name: silu", "name: tiny_silu")
    yml = re.sub(r"shapes:\n(  \w+: \{.*\}\n)+", "shapes:\n" + TINY_SHAPES, yml)
    (d / "problem.yaml").write_text(yml)
    for f in ("task.py", "kernel.py"):
        (d / f).write_text((SILU_DIR / f).read_text())
    nkibench.register_problem_dir(root)
    yield "tiny_silu"
    nkibench.unregister_problem_dir(root)


def silu_job(problem, source=SILU, fidelity="screen"):
    return make_job(problem, source, preset="paper", options=ONE_SEED, fidelity=fidelity)


def test_fidelity_is_validated_recorded_and_part_of_the_cache_key():
    keys = {make_job(SCALE_TASK, GOOD, fidelity=f).cache_key() for f in ("full", "screen", "confirm")}
    assert len(keys) == 3
    with pytest.raises(ConfigError, match="unknown fidelity 'fast'"):
        make_job(SCALE_TASK, GOOD, fidelity="fast")
    r = evaluate(SCALE_TASK, GOOD, fidelity="confirm", cache=False)
    assert r.status is Status.CORRECT and r.fidelity == "confirm" and len(r.seed_checks()) == 5
    assert EvalResult.from_dict(r.to_dict()).fidelity == "confirm"


def test_screen_checks_at_the_small_shape_and_profiles_at_the_target(tmp_path, tiny_silu):
    from accelopt_nb.perf import estimate
    from accelopt_nb.sim import SimOptions, load_kernel, simulate

    r = evaluate_job(silu_job(tiny_silu), tmp_path / "job", input_cache=tmp_path / "inputs")
    assert r.status is Status.CORRECT, r.summary()
    assert (r.fidelity, r.preset, r.checked_preset) == ("screen", "paper", "small")
    task = nkibench.get_problem(tiny_silu).task("paper")
    kernel_file = tmp_path / "silu.py"
    kernel_file.write_text(SILU)
    trace = simulate(load_kernel(str(kernel_file)), *task.to_nki(task.get_inputs(42)),
                     options=SimOptions(trace_only=True)).trace
    assert r.latency_ms == pytest.approx(estimate(trace, hw="trn1").latency)
    assert r.profile["latency_ms"] == r.latency_ms and "latency" not in r.profile


def test_screen_of_a_kernel_hard_coding_the_target_shape_runs_at_the_target(tmp_path, tiny_silu):
    hard = SILU.replace("    P, J, N = x.shape\n",
                        "    P, J, N = x.shape\n    assert N == 1536, 'written for the paper shape'\n")
    r = evaluate_job(silu_job(tiny_silu, hard), tmp_path / "job", input_cache=tmp_path / "inputs")
    assert r.status is Status.CORRECT, r.summary()
    assert r.checked_preset == "paper"
    assert [(c.kind, c.index) for c in r.checks] == [("seed", 0), ("adversarial", 0)]
    assert any("cannot run at the small shape" in line for line in r.log)


def test_screen_of_a_wrong_kernel_is_incorrect_at_the_small_shape(tmp_path, tiny_silu):
    wrong = SILU.replace("value=nl.divide(t, nl.add(e, 1.0))", "value=t")
    r = evaluate_job(silu_job(tiny_silu, wrong), tmp_path / "job", input_cache=tmp_path / "inputs")
    assert r.status is Status.INCORRECT and r.checked_preset == "small", r.summary()


def test_a_screen_reuses_the_profile_of_an_earlier_kernel_with_the_same_instruction_stream(tmp_path, tiny_silu):
    """The same stream gets the same profile, so the performance model runs once per stream; a
    kernel with another stream is estimated; correctness is checked for each kernel all the same."""
    from accelopt_nb.evaluation.datacache import ProfileCache

    ProfileCache.forget()   # this process's copies: the test reads what the judges share on disk
    same = SILU + "\n_VARIANT = 3   # another program text, the same instruction stream\n"
    narrow = SILU.replace("TILE_N = 512", "TILE_N = 256")
    wrong = same.replace("value=nl.divide(t, nl.add(e, 1.0))", "value=nl.divide(t, nl.add(e, 2.0))")
    runs = {name: evaluate_job(silu_job(tiny_silu, src), tmp_path / name, input_cache=tmp_path / "inputs")
            for name, src in (("first", SILU), ("same", same), ("narrow", narrow), ("wrong", wrong))}
    reused = {name: any("not re-estimated" in line for line in r.log) for name, r in runs.items()}
    assert reused == {"first": False, "same": True, "narrow": False, "wrong": False}
    assert runs["same"].profile == runs["first"].profile and runs["same"].status is Status.CORRECT
    assert runs["narrow"].latency_ms != runs["first"].latency_ms
    # the same stream with another constant: its verdict is its own (an incorrect kernel is not profiled)
    assert runs["wrong"].status is Status.INCORRECT and runs["wrong"].latency_ms is None
    assert len(list((tmp_path / "profiles").rglob("*.json"))) == 2


def test_trace_fidelity_profiles_without_checking(tmp_path, tiny_silu):
    wrong = SILU.replace("value=nl.divide(t, nl.add(e, 1.0))", "value=t")
    r = evaluate_job(silu_job(tiny_silu, wrong, fidelity="trace"), tmp_path / "job", input_cache=tmp_path / "in")
    assert r.status is Status.PROFILED and not r.checks and r.latency_ms > 0 and r.checked_preset is None
    assert not list((tmp_path / "in").rglob("ref_*.npy"))   # a trace-only run needs no reference


def test_inputs_and_references_are_computed_once_and_memory_mapped(tmp_path):
    counter = tmp_path / "calls.txt"
    task = tmp_path / "counting_task.py"
    task.write_text(SCALE_TASK.read_text() + f"\n\n_real = get_inputs\n\ndef get_inputs():\n"
                    f"    with open({str(counter)!r}, 'a') as f:\n        f.write('x')\n"
                    f"    return _real()\n")
    opts = EvalOptions(seeds=(0, 1))
    first = evaluate_job(make_job(task, GOOD, options=opts), tmp_path / "a", input_cache=tmp_path / "c")
    assert first.status is Status.CORRECT and counter.read_text() == "xx"
    second = evaluate_job(make_job(task, GOOD + "\n# another kernel\n", options=opts),
                          tmp_path / "b", input_cache=tmp_path / "c")
    assert second.status is Status.CORRECT and counter.read_text() == "xx"   # no recomputation
    assert second.checks[0].rel_errors == first.checks[0].rel_errors
    entry = InputCache(tmp_path / "c").get(None, "k", "seed", 0, tmp_path,
                                           lambda: ([np.ones(3, np.float32)], np.zeros(3)))
    assert isinstance(entry.reference, np.memmap) and entry.input_dtypes == ["float32"]


class _CountingExecutor:
    def __init__(self):
        self.pool, self.submitted = LocalPoolEvaluator(workers=1), []

    def submit(self, job) -> Future:
        self.submitted.append(job.label)
        return self.pool.submit(job)

    def shutdown(self, wait=True):
        self.pool.shutdown(wait)


def test_batch_evaluates_each_normalized_kernel_once():
    reformatted = '"""A docstring the original lacks."""\n# a comment\n' + GOOD.replace(
        "t * 2.0 + 1.0", "(t*2.0) + 1.0")
    other = GOOD.replace("t * 2.0 + 1.0", "t * 2.0 + 2.0")
    assert normalized_source_key(reformatted) == normalized_source_key(GOOD)
    assert normalized_source_key(other) != normalized_source_key(GOOD)
    jobs = [make_job(SCALE_TASK, s, label=n) for n, s in
            (("a", GOOD), ("b", reformatted), ("c", other))]
    ex = _CountingExecutor()
    try:
        results = {r.label: r for r in evaluate_many(jobs, ex, progress=False, cache=False)}
    finally:
        ex.shutdown()
    assert sorted(ex.submitted) == ["a", "c"]
    assert results["a"].status is results["b"].status is Status.CORRECT
    assert results["c"].status is Status.INCORRECT
    assert results["b"].kernel_sha256 == jobs[1].kernel_sha256
    assert any("evaluated once" in line for line in results["b"].log)


class TextOutputBackend:
    """A backend at the system boundary that hands back text instead of numbers."""

    def __init__(self, job, workdir):
        pass

    def load(self, kernel_path, kernel_name):
        pass

    def run(self, nki_inputs):
        return RunOutput(outputs=(np.array(["1.0"] * nki_inputs[0].size),))

    def close(self):
        pass


def test_non_numeric_runner_outputs_are_incorrect(tmp_path):
    register_backend("fake-text-output", f"{__name__}:TextOutputBackend")
    job = make_job(SCALE_TASK, GOOD, backend="fake-text-output")
    r = evaluate_job(job, tmp_path)
    assert r.status is Status.INCORRECT and "non-numeric dtype" in r.message, r.summary()


def test_only_backends_that_declare_it_have_exact_trace_profiles():
    from accelopt_nb.evaluation.backends import exact_trace_profile
    assert exact_trace_profile("simulator") and not exact_trace_profile("neuron")
    register_backend("fake-exact-profile", f"{__name__}:TextOutputBackend", exact_trace_profile=True)
    assert exact_trace_profile("fake-exact-profile")
    register_backend("fake-exact-profile", f"{__name__}:TextOutputBackend")
    assert not exact_trace_profile("fake-exact-profile")


def test_the_trace_fingerprint_follows_values_not_objects():
    """Equal streams built from distinct objects hash alike; a changed region bound, an attribute or
    the statement structure changes the hash; a value marshal cannot encode (a NumPy scalar) is hashed too."""
    import copy

    from accelopt_nb.evaluation.backends.simulator import trace_fingerprint
    from accelopt_nb.sim.trace import Instruction, Region, TensorInfo, Trace

    def stream(hi=128, attrs=None, lines=(10, 11)):
        t = Trace("k", tensors={0: TensorInfo(0, "x", "hbm", "input", (128, 256), "float32", 4, 0, 0)})
        for i, line in enumerate(lines):
            r = Region(0, "hbm", (0, 0), (128, hi), 128 * hi, 4)
            t.instructions.append(Instruction(i, "dma", "dma_load", "nl.load", (r,), (), 128, hi, ("float32",),
                                              "float32", attrs=dict(attrs or {"bytes": 4 * 128 * hi}),
                                              file="/somewhere/kernel.py", line=line))
        return t

    base = trace_fingerprint(stream())
    assert trace_fingerprint(copy.deepcopy(stream())) == base
    moved = stream(lines=(20, 21))                       # the same statements, elsewhere in the file
    assert trace_fingerprint(moved) == base
    assert trace_fingerprint(stream(lines=(10, 10))) != base   # one statement instead of two
    assert trace_fingerprint(stream(hi=127)) != base
    assert trace_fingerprint(stream(attrs={"bytes": 4 * 128 * 128, "transpose": False})) != base
    scalar = trace_fingerprint(stream(attrs={"bytes": np.int64(4 * 128 * 128)}))
    assert scalar == trace_fingerprint(stream(attrs={"bytes": np.int64(4 * 128 * 128)})) != base
