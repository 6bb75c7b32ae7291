"""The fixer stage: failed candidates get up to F repairs, each an ordinary candidate (store, ledger,
beam, cassette), with a fake model over real HTTP and real evaluation of a tiny task."""
from __future__ import annotations

import pytest
from fakes.fake_nki_llm import FakeNKIModel, double_tile, wrong_result, write_axpb_problem
from fakes.fake_openai_server import FakeOpenAIServer

from accelopt_nb.errors import ConfigError
from accelopt_nb.fake_model.nki_model import fix_wrong_result
from accelopt_nb.llm import Cassette, Ledger, LLMClient, ModelConfig, PriceTable
from accelopt_nb.search import SearchConfig, SearchProblem, Session
from accelopt_nb.search.fixing import repair_id
from accelopt_nb.store import RunStore

MODEL = "fake-nki-model"
PRICES = PriceTable.default().with_entries({"fake-price": {"kind": "per_token", "input": 1.0, "output": 2.0}})
PLANS = ["DOUBLE the tile width.", "BREAK: add 1.5 instead of 1.0 to save an instruction."]


def config(attempts: int, **overrides) -> SearchConfig:
    base = {"iterations": 1, "beam_width": 2, "plans_per_kernel": 2, "samples_per_plan": 1,
            "evaluation.shape_preset": "task", "fixer.attempts": attempts}
    base.update(overrides)
    return SearchConfig.from_preset("smoke", **base)


@pytest.fixture
def problem(tmp_path):
    task, kern = write_axpb_problem(tmp_path / "problem")
    return SearchProblem.from_files(task, kern, name="axpb")


@pytest.fixture(scope="module", autouse=True)
def _shared_pool(eval_pool):
    """The warm evaluation workers every search test shares (conftest's ``eval_pool``)."""
    global POOL
    POOL = eval_pool


def run(problem, tmp_path, model, cfg, *, name="run", url=None, cassette=None):
    with FakeOpenAIServer(models=[MODEL], responder=model.responder) as srv:
        store = RunStore.open(tmp_path / name)
        client = LLMClient(ModelConfig(model=MODEL, base_url=url or srv.url, price="fake-price"),
                           Ledger.for_store(store, name, prices=PRICES), cassette, concurrency=4)
        s = Session.create(problem, run_dir=tmp_path / name, config=cfg, llm=client, run_id=name,
                           eval_cache=tmp_path / "cache", eval_executor=POOL)
        try:
            report = s.run()
            return s, report, store.llm_calls_df(name), srv.chat_requests
        finally:
            client.close()
            s.close()


def broken_kernel(s):
    """The executor's kernel of the BREAK plan."""
    (kernel,) = [k for k in s.kernels.values() if k.origin == "llm" and "1.5" in k.source]
    return kernel


def test_repair_ids_chain():
    assert repair_id("i0b0p1s0") == "i0b0p1s0f1" and repair_id("i0b0p1s0f1") == "i0b0p1s0f2"


def test_a_wrong_kernel_is_repaired_from_its_report_and_the_repair_is_a_normal_candidate(problem, tmp_path):
    model = FakeNKIModel(plans=PLANS, rewrites=[("DOUBLE", double_tile), ("BREAK", wrong_result)],
                         fixes=[("nl.add(u, 1.5)", fix_wrong_result)])
    s, report, calls, _ = run(problem, tmp_path, model, config(attempts=2))
    broken = broken_kernel(s)  # which plan slot got the BREAK plan depends on answer order
    repaired = s.kernels[repair_id(broken.kernel_id)]
    assert broken.status == "incorrect" and repaired.status == "correct"
    assert repaired.origin == "fixer" and repaired.plan_id == broken.plan_id and repaired.parent_id == broken.parent_id
    assert repaired.data["repairs"] == broken.kernel_id and repaired.data["fix_attempt"] == 1
    assert repair_id(repaired.kernel_id) not in s.kernels  # a correct repair is not repaired again
    assert model.calls["fixer"] == 1 and list(calls["role"]).count("fixer") == 1
    # what the fixer was told: the failing kernel, its plan, each output's error against the tolerance
    assert repaired.kernel_id in {c.kernel_id for c in s.beam_choice()} or repaired.correct
    assert "fixer" in {u.role for u in report.usage} and report.repairs == report.repairs_correct == 1
    assert "fixer: 1 repairs of failed candidates, 1 correct" in report.to_text()


def test_repairs_stop_after_f_attempts_and_f0_asks_none(problem, tmp_path):
    model = FakeNKIModel(plans=PLANS, rewrites=[("DOUBLE", double_tile), ("BREAK", wrong_result)],
                         fixes=[("nl.add(u, 1.5)", lambda src: "# still wrong\n" + src)])
    s, _, calls, _ = run(problem, tmp_path, model, config(attempts=2), name="f2")
    first = broken_kernel(s).kernel_id
    chain = [first, repair_id(first), repair_id(repair_id(first))]
    assert [s.kernels[k].status for k in chain] == ["incorrect"] * 3
    assert repair_id(chain[-1]) not in s.kernels and model.calls["fixer"] == 2
    off = FakeNKIModel(plans=PLANS, rewrites=[("DOUBLE", double_tile), ("BREAK", wrong_result)])
    s0, _, calls0, _ = run(problem, tmp_path, off, config(attempts=0), name="f0")
    assert off.calls["fixer"] == 0 and not any(k.origin == "fixer" for k in s0.kernels.values())
    with pytest.raises(ConfigError, match="fixer.attempts"):
        config(attempts=-1)


def test_a_run_with_repairs_replays_offline_to_the_same_kernels(problem, tmp_path):
    model = FakeNKIModel(plans=PLANS, rewrites=[("DOUBLE", double_tile), ("BREAK", wrong_result)],
                         fixes=[("nl.add(u, 1.5)", fix_wrong_result)])
    tape = tmp_path / "tape.jsonl"
    rec, _, _, served = run(problem, tmp_path, model, config(attempts=1), name="record",
                            cassette=Cassette(tape, "record"))
    rep, _, _, replay_served = run(problem, tmp_path, model, config(attempts=1), name="replay",
                                   url="http://127.0.0.1:9/v1", cassette=Cassette(tape, "replay"))
    assert {k: v.source for k, v in rec.kernels.items()} == {k: v.source for k, v in rep.kernels.items()}
    assert {k: v.status for k, v in rec.kernels.items()} == {k: v.status for k, v in rep.kernels.items()}
    assert repair_id(broken_kernel(rep).kernel_id) in rep.kernels and replay_served == 0


def test_a_repair_owed_when_the_run_stops_is_asked_on_resume(problem, tmp_path):
    model = FakeNKIModel(plans=PLANS, rewrites=[("DOUBLE", double_tile), ("BREAK", wrong_result)],
                         fixes=[("nl.add(u, 1.5)", fix_wrong_result)])
    with FakeOpenAIServer(models=[MODEL], responder=model.responder) as srv:
        store = RunStore.open(tmp_path / "run")
        client = LLMClient(ModelConfig(model=MODEL, base_url=srv.url, price="fake-price"),
                           Ledger.for_store(store, "r", prices=PRICES), concurrency=4)
        s = Session.create(problem, run_dir=tmp_path / "run", config=config(attempts=1), llm=client, run_id="r",
                           eval_cache=tmp_path / "cache", eval_executor=POOL)
        holder = {"stopped": False}

        def progress(event):  # stop the moment the broken kernel's screening is recorded
            if event.phase == "evaluate" and event.kind == "eval_done" and not holder["stopped"]:
                if any(k.status == "incorrect" for k in s.kernels.values()):
                    holder["stopped"] = True
                    s.request_stop()

        s.progress = progress
        s.run()
        broken = broken_kernel(s)
        assert holder["stopped"] and repair_id(broken.kernel_id) not in s.kernels and model.calls["fixer"] == 0
        assert s.iteration == 0  # the evaluate step stayed open: a repair is owed
        s.progress = None
        s.run()  # resume
        repaired = s.kernels[repair_id(broken.kernel_id)]
        assert repaired.status == "correct" and model.calls["fixer"] == 1 and s.iteration == 1
        client.close()
        s.close()
