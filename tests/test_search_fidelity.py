"""Multi-fidelity search: confirmed before learned, and a cassette that replays exactly.

The problem is a user-defined NKIBench folder whose paper shape is small enough for tests
(``double``: 1024x2048, small preset 128x256), so screening (checks at the small shape) and the
full check (at the paper shape) really differ. The FAKE model proposes three rewrites of a slow
two-pass baseline: FUSE (one pass, correct, faster), SLOWBAD (correct at the small shape only,
and slower: a negative lesson if nobody confirmed it) and WIDEBAD (correct at the small shape
only, and fastest: the beam's first pick until the full check rejects it)."""
from __future__ import annotations

import pytest
from fakes.fake_nki_llm import FakeNKIModel
from fakes.fake_openai_server import FakeOpenAIServer
from nkibench_helpers import make_problem

from accelopt_nb.llm import Cassette, Ledger, LLMClient, ModelConfig
from accelopt_nb.search import SearchConfig, SearchProblem, Session
from accelopt_nb.store import RunStore

MODEL = "fake-nki-model"
HEADER = "import neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\n\n\n@nki.jit\ndef kernel(x):\n" \
         "    M, N = x.shape\n    out = nl.ndarray((M, N), dtype=x.dtype, buffer=nl.shared_hbm)\n"
SLOW_BASELINE = HEADER + """    for m in nl.affine_range(M // 128):
        t = nl.load(x[nl.ds(m * 128, 128), :])
        nl.store(out[nl.ds(m * 128, 128), :], value=nl.multiply(t, 1.0))
        u = nl.load(out[nl.ds(m * 128, 128), :])
        nl.store(out[nl.ds(m * 128, 128), :], value=nl.multiply(u, 2.0))
    return out
"""
FUSED = HEADER + """    for m in nl.affine_range(M // 128):
        t = nl.load(x[nl.ds(m * 128, 128), :])
        nl.store(out[nl.ds(m * 128, 128), :], value=nl.multiply(t, 2.0))
    return out
"""
# Right only while M is one tile (the scale is wrong at the paper shape), and a third pass: slower.
SLOWBAD = HEADER + """    scale = 2.0 if M <= 128 else 2.5
    for m in nl.affine_range(M // 128):
        t = nl.load(x[nl.ds(m * 128, 128), :])
        nl.store(out[nl.ds(m * 128, 128), :], value=nl.multiply(t, 1.0))
        u = nl.load(out[nl.ds(m * 128, 128), :])
        nl.store(out[nl.ds(m * 128, 128), :], value=nl.multiply(u, 1.0))
        v = nl.load(out[nl.ds(m * 128, 128), :])
        nl.store(out[nl.ds(m * 128, 128), :], value=nl.multiply(v, scale))
    return out
"""
# Writes only the first row tile: all of the output at the small shape, an eighth at the paper shape.
WIDEBAD = HEADER + """    for m in nl.affine_range(1):
        t = nl.load(x[nl.ds(m * 128, 128), :])
        nl.store(out[nl.ds(m * 128, 128), :], value=nl.multiply(t, 2.0))
    return out
"""
PLANS = ["FUSE the two multiplies into one pass.", "SLOWBAD: scale by a constant chosen by shape.",
         "WIDEBAD: one row tile is enough."]
REWRITES = [("FUSE", lambda src: FUSED), ("SLOWBAD", lambda src: SLOWBAD), ("WIDEBAD", lambda src: WIDEBAD)]


@pytest.fixture
def double(tmp_path, monkeypatch):
    root = tmp_path / "problems"
    folder = make_problem(root, "double")
    (folder / "kernel.py").write_text(SLOW_BASELINE)
    monkeypatch.setenv("NKIBENCH_PATH", str(root))   # the evaluation workers find it by name too
    return SearchProblem.from_nkibench("double", "paper")


def config(**overrides) -> SearchConfig:
    base = {"iterations": 2, "beam_width": 2, "plans_per_kernel": 3, "samples_per_plan": 1, "memory.top_k": 4,
            "memory.capacity": 8, "evaluation.shape_preset": "paper", "evaluation.fidelity": "multi",
            "runtime.eval_workers": 2}
    base.update(overrides)
    return SearchConfig.from_preset("smoke", **base)


def run(problem, tmp_path, name, url, tape, mode, concurrency):
    run_dir = tmp_path / name
    store = RunStore.open(run_dir)
    client = LLMClient(ModelConfig(model=MODEL, base_url=url), Ledger.for_store(store, name),
                       Cassette(tape, mode), concurrency=concurrency)
    s = Session.create(problem, run_dir=run_dir, config=config(), llm=client, run_id=name, eval_cache=False,
                       store=store)
    try:
        report = s.run()
        seen = {
            "kernels": {k.kernel_id: (k.source, k.status, k.fidelity, k.screened, k.latency_ms)
                        for k in s.kernels.values()},
            "memory": [(i.kind, i.slow_kernel_id, i.fast_kernel_id, i.title, i.summary) for i in s.memory],
            "beam": list(s.beam), "best": s.best.kernel_id,
            "report": {k: v for k, v in report.to_dict().items()
                       if k not in ("run_id", "phase_seconds", "usage", "total_cost_usd", "total_tokens")},
            "confirmations": [r["kernel_id"] for r in s.store.rows("evaluations", name)
                              if r["result"]["fidelity"] == "confirm"],
        }
    finally:
        client.close()
        s.close()
    return seen


@pytest.mark.slow
def test_only_confirmed_kernels_are_learned_and_a_multi_fidelity_run_replays_exactly(double, tmp_path):
    model = FakeNKIModel(plans=PLANS, rewrites=REWRITES)
    tape = tmp_path / "tape.jsonl"
    with FakeOpenAIServer(models=[MODEL], responder=model.responder) as srv:
        recorded = run(double, tmp_path, "record", srv.url, tape, "record", concurrency=4)
    first = {kid: v for kid, v in recorded["kernels"].items() if kid.startswith("i0")}
    by_plan = {v[0]: kid for kid, v in first.items()}
    slowbad, widebad, fused = by_plan[SLOWBAD], by_plan[WIDEBAD], by_plan[FUSED]
    # Both shape-dependent kernels screen correct and fail the full check; the beam and memory
    # take FUSE only; SLOWBAD, a negative lesson on its screening alone, was confirmed because
    # memory needed it, and then not learned.
    for bad in (slowbad, widebad):
        assert first[bad][1:4] == ("incorrect", "confirm", "correct")
    assert first[fused][1] == "correct" and recorded["beam"][0] == fused
    learned = {kid for item in recorded["memory"] for kid in item[1:3]}
    assert learned and not learned & {slowbad, widebad}
    assert all(recorded["kernels"][kid][2] in ("full", "confirm") for kid in learned)
    report = recorded["report"]
    assert report["rejected_on_confirmation"] >= 2 and report["correct_kernels"] >= 1
    # Replayed offline twice, scheduled differently: the same kernels, verdicts, memory and report.
    for n in (1, 2):
        replayed = run(double, tmp_path, f"replay{n}", "http://127.0.0.1:9/v1", tape, "replay", concurrency=n)
        assert replayed == recorded


# Three rewrites that differ only in comments and an unused constant: one program, so one screen and one
# confirmation; the others inherit them (recorded as inherited from that kernel).
SAME_PLANS = ["FUSE the two multiplies into one pass.", "TAGGED: fuse, and tag the module.",
              "RENAMED: fuse, with clearer names."]
SAME_REWRITES = [("FUSE", lambda src: FUSED), ("TAGGED", lambda src: FUSED + "\n\n_VARIANT = 2  # unused\n"),
                 ("RENAMED", lambda src: FUSED.replace("        t = ", "        tile = ").replace("(t, 2.0)", "(tile, 1.0 + 1.0)"))]


def test_kernels_with_one_program_are_screened_and_confirmed_once(double, tmp_path):
    model = FakeNKIModel(plans=SAME_PLANS, rewrites=SAME_REWRITES)
    run_dir = tmp_path / "same"
    store = RunStore.open(run_dir)
    with FakeOpenAIServer(models=[MODEL], responder=model.responder) as srv:
        client = LLMClient(ModelConfig(model=MODEL, base_url=srv.url), Ledger.for_store(store, "same"),
                           concurrency=1)
        s = Session.create(double, run_dir=run_dir, config=config(iterations=1, beam_width=3), llm=client,
                           run_id="same", eval_cache=False, store=store)
        try:
            report = s.run()
            rows = [r["result"] for r in s.store.rows("evaluations", "same")]
            kernels = [k for k in s.kernels.values() if k.iteration == 0 and k.origin != "baseline"]
        finally:
            client.close()
            s.close()
    assert len(kernels) == 3 and all(k.confirmed_correct for k in kernels)
    confirms = [r for r in rows if r["fidelity"] == "confirm"]
    screens = [r for r in rows if r["fidelity"] == "screen"]
    assert len(confirms) == 3 and len(screens) == 3
    for group in (confirms, screens):
        leaders = [r for r in group if not r["inherited_from"]]
        assert len(leaders) == 1
        assert {r["inherited_from"] for r in group if r["inherited_from"]} == {leaders[0]["label"]}
    assert report.inherited == {"confirm": 2, "screen": 2}
    assert "inherited from a kernel with the same program" in report.to_text()
    assert sum(k.inherited_from is not None for k in kernels) == 2
