"""The Session step API on a tiny task, with real evaluation and a fake model over real HTTP."""
from __future__ import annotations

import pytest
from fakes.fake_nki_llm import (FakeNKIModel, double_tile, set_tile, wrong_result, write_axpb_problem)
from fakes.fake_openai_server import Fail, FakeOpenAIServer

from accelopt_nb.errors import ConfigError, StepFailedError
from accelopt_nb.llm import Ledger, LLMClient, ModelConfig, PriceTable
from accelopt_nb.search import OptimizationMemory, SearchConfig, SearchProblem, Session
from accelopt_nb.store import RunStore

MODEL = "fake-nki-model"
PRICES = PriceTable.default().with_entries({"fake-price": {"kind": "per_token", "input": 1.0, "output": 2.0}})


def small_config(**overrides) -> SearchConfig:
    base = {"iterations": 2, "beam_width": 2, "plans_per_kernel": 2, "samples_per_plan": 1,
            "memory.top_k": 2, "memory.capacity": 3, "evaluation.shape_preset": "task"}
    base.update(overrides)
    return SearchConfig.from_preset("smoke", **base)


@pytest.fixture
def problem(tmp_path):
    task, kern = write_axpb_problem(tmp_path / "problem")
    return SearchProblem.from_files(task, kern, name="axpb")


@pytest.fixture
def server():
    with FakeOpenAIServer(models=[MODEL]) as srv:
        yield srv


def make_client(server, run_dir, run_id="r1"):
    store = RunStore.open(run_dir)
    ledger = Ledger.for_store(store, run_id, prices=PRICES)
    config = ModelConfig(model=MODEL, base_url=server.url, price="fake-price", max_unusable_retries=1)
    return LLMClient(config, ledger, concurrency=4), ledger


@pytest.fixture(scope="module", autouse=True)
def _shared_pool(eval_pool):
    """The warm evaluation workers every search test shares (conftest's ``eval_pool``)."""
    global POOL
    POOL = eval_pool


def new_session(problem, tmp_path, server=None, config=None, run_id="r1", **kw):
    kw.setdefault("eval_executor", POOL)
    run_dir = tmp_path / "run"
    client = ledger = None
    if server is not None:
        client, ledger = make_client(server, run_dir, run_id)
    s = Session.create(problem, run_dir=run_dir, config=config or small_config(), llm=client, run_id=run_id,
                       eval_cache=tmp_path / "cache", **kw)
    return s, client, ledger


def test_two_iterations_improve_the_beam_fill_memory_and_account_every_call(problem, tmp_path, server):
    model = FakeNKIModel(plans=["DOUBLE the tile width.", "Use 512-column tiles: WIDE512."],
                         rewrites=[("DOUBLE", double_tile), ("WIDE512", set_tile(512))])
    server.responder = model.responder
    s, client, ledger = new_session(problem, tmp_path, server)
    events = []
    s.progress = events.append
    base_ms = s.baseline.latency_ms
    assert s.baseline.correct and s.beam == ["baseline"]

    report = s.run()
    assert s.iteration == 2 and s.next_phase == "plan"
    hist = s.history()
    assert [h["iteration"] for h in hist] == [0, 1]
    assert hist[1]["best_latency_ms"] <= hist[0]["best_latency_ms"] < base_ms  # improves, never regresses
    assert "TILE = 512" in s.best.source and report.speedup > 1.2      # 128 -> 512 columns: 1.40x in the v3 model
    # Iteration 0: one beam kernel x 2 plans x 1 sample; iteration 1: two beam kernels.
    assert model.calls["planner"] == 2 + 4 and model.calls["executor"] == 2 + 4
    # Memory: positive rewrites (> 1.04x) from each iteration, in FIFO order, capacity 3.
    assert 1 <= len(s.memory) <= 3 and all(i.kind == "positive" and i.speedup > 1.04 for i in s.memory)
    assert model.calls["summarizer"] >= 1
    # The second iteration's planner saw the memory in its system prompt.
    planner_prompts = [b["messages"][0]["content"] for b in server.requests if "propose the next" in
                       b["messages"][0]["content"]]
    assert "Lessons from earlier" not in planner_prompts[0] and "Widen the tiles" in planner_prompts[-1]
    # The ledger adds up: one row per request, tokens as the server counted them, cost per role summed.
    store = s.store
    calls = store.llm_calls_df("r1")
    assert len(calls) == server.chat_requests == sum(model.calls.values())
    assert set(calls["status"]) == {"ok"}
    assert sum(u.calls for u in report.usage) == len(calls)
    assert sum(u.prompt_tokens for u in report.usage) == int(calls["prompt_tokens"].sum())
    assert report.total_cost_usd == pytest.approx(ledger.spent_usd) == pytest.approx(calls["cost_usd"].sum())
    expected = sum(r.prompt_tokens * 1.0 + r.completion_tokens * 2.0 for r in ledger.records) / 1e6
    assert report.total_cost_usd == pytest.approx(expected)
    # Everything is in the store: kernels with raw responses, evaluations, plans, steps.
    counts = store.table_counts("r1")
    assert counts["kernels"] == 1 + 6 and counts["evaluations"] == 7 and counts["plans"] == 6
    kdf = store.kernels_df("r1")
    llm_rows = kdf[kdf["origin"] == "llm"]
    assert all("```py" in d["raw_response"] and d["extraction"] == "fenced" for d in llm_rows["data"])
    assert {e.kind for e in events} >= {"start", "call_done", "eval_done", "end"}
    assert {e.phase for e in events} >= {"iteration", "plan", "execute", "evaluate", "select", "summarize"}
    ends = [e for e in events if e.kind == "end" and e.phase == "execute"]
    assert [(e.done, e.failed) for e in ends] == [(2, 0), (4, 0)]
    assert s.last_step.phase == "summarize" and s.last_step.done
    assert "best:" in report.to_text() and "executor" in report.to_text()
    # Every call's finish_reason is in the ledger and counted per role in the report.
    assert calls["finish_reason"].tolist() == ["stop"] * len(calls)
    by_role = {u.role: u for u in report.usage}
    assert by_role["executor"].finish_reasons == {"stop": 6} and by_role["planner"].finish_reasons == {"stop": 6}
    assert "finish reasons: planner 6 stop; executor 6 stop" in report.to_text()
    client.close()
    s.close()


def test_parent_retained_when_children_are_slower_or_wrong(problem, tmp_path, server):
    model = FakeNKIModel(plans=["NARROW to 64 columns.", "WRONG: fold the constant."],
                         rewrites=[("NARROW", set_tile(64)), ("WRONG", wrong_result)])
    server.responder = model.responder
    s, client, _ = new_session(problem, tmp_path, server, config=small_config(iterations=2))
    s.run(1)  # iteration 0 of 2: its lessons are summarized (the last iteration's would not be)
    kernels = {k.kernel_id: k for k in s.iteration_kernels(0)}
    assert {k.status for k in kernels.values()} == {"correct", "incorrect"}
    # The slower child is in the beam (width 2) but behind the parent; the wrong one never.
    assert s.beam[0] == "baseline" and len(s.beam) == 2
    assert kernels[s.beam[1]].latency_ms > s.baseline.latency_ms
    # A 64-wide tile is > 15 % slower: a negative rewrite, stored reversed (slow = child).
    assert [i.kind for i in s.memory] == ["negative"]
    assert s.memory.items[0].fast_kernel_id == "baseline"
    client.close()
    s.close()


def test_failed_llm_calls_never_abort_a_step_but_a_step_whose_calls_all_failed_is_not_done(problem, tmp_path,
                                                                                          server):
    model = FakeNKIModel(plans=["DOUBLE the tile width.", "DOUBLE the tile width, again."],
                         rewrites=[("DOUBLE", double_tile)])
    server.responder = model.responder
    s, client, _ = new_session(problem, tmp_path, server, config=small_config(iterations=1))
    server.enqueue(Fail(400, "context too long"))  # the first planner call fails outright
    s.plan()
    plans = s.iteration_plans()
    assert len(plans) == 1  # one of two planner calls failed; the step went on
    info = s.done_steps()[(0, "plan")]
    assert info["failed"][0]["status"] == "error"
    assert (s.last_step.calls, s.last_step.failed, s.last_step.done) == (2, 1, True)
    server.enqueue(Fail(400, "nope"))
    with pytest.raises(StepFailedError, match="all 1 LLM calls failed.*nope"):
        s.execute()
    assert s.last_step.all_failed and not s.last_step.done and s.next_phase == "execute"
    row = [r for r in s.store.rows("steps", "r1") if r["step"] == "execute"][0]
    assert row["status"] == "failed" and row["info"]["failed"][0]["status"] == "error"
    # Retrying the step (as a resume would) makes the missing call; now it works.
    kernels = s.execute()
    assert len(kernels) == 1 and s.last_step.done and s.next_phase == "evaluate"
    s.evaluate(); s.select(); s.summarize()
    assert s.iteration == 1
    statuses = set(s.store.llm_calls_df("r1")["status"])
    assert statuses == {"ok", "error"}
    client.close()
    s.close()


def test_unusable_answers_are_retried_then_recorded(problem, tmp_path, server):
    model = FakeNKIModel(plans=["GIVEUP on this one."], rewrites=[("GIVEUP", lambda src: None)])
    server.responder = model.responder
    s, client, _ = new_session(problem, tmp_path, server, config=small_config(iterations=1, plans_per_kernel=1))
    s.plan()
    with pytest.raises(StepFailedError):
        s.execute()
    row = [r for r in s.store.rows("steps", "r1") if r["step"] == "execute"][0]
    failed = row["info"]["failed"]
    assert len(failed) == 1 and failed[0]["status"] == "unusable" and "ran out of time" in failed[0]["raw"]
    assert s.last_step.unusable == 1
    calls = s.store.llm_calls_df("r1")
    row = calls[calls["role"] == "executor"].iloc[0]
    assert row["unusable_outputs"] == 2  # the first answer and one retry, both counted
    client.close()
    s.close()


def test_every_role_can_be_played_by_a_person_without_any_llm(problem, tmp_path):
    s, _, _ = new_session(problem, tmp_path, server=None, config=small_config(iterations=1))
    with pytest.raises(ConfigError, match="no LLM client for the planner"):
        s.plan()
    s2 = Session.resume(tmp_path / "run", eval_cache=tmp_path / "cache", eval_executor=POOL)
    assert s2.next_phase == "plan"  # the failed attempt left no completed step
    plans = s2.plan(manual=["Use 256-column tiles."])
    assert [p.origin for p in plans] == ["manual"]
    with pytest.raises(ConfigError, match="the next step is execute"):
        s2.select()
    with pytest.raises(ConfigError, match="unknown plans"):
        s2.execute(manual={"nope": "x"})
    kernels = s2.execute(manual={plans[0].plan_id: set_tile(256)(problem.baseline_source)}, llm=False)
    assert [k.origin for k in kernels] == ["manual"]
    s2.evaluate()
    beam = s2.select()
    assert beam[0].kernel_id == kernels[0].kernel_id and beam[0].latency_ms < s2.baseline.latency_ms
    items = s2.summarize(manual=[{"title": "Wider tiles", "summary": "**Wider tiles**\nUse 256 columns."}])
    assert [i.kind for i in items] == ["manual"] and len(s2.memory) == 1
    assert s2.store.table_counts(s2.run_id)["llm_calls"] == 0
    s.close()
    s2.close()


def test_resume_continues_from_the_last_completed_step(problem, tmp_path, server):
    model = FakeNKIModel(plans=["DOUBLE the tile width.", "Use 512-column tiles: WIDE512."],
                         rewrites=[("DOUBLE", double_tile), ("WIDE512", set_tile(512))])
    server.responder = model.responder
    s, client, _ = new_session(problem, tmp_path, server)
    s.plan()
    s.execute()
    s.close()
    client.close()
    before = RunStore.open(tmp_path / "run").table_counts("r1")

    client2, _ = make_client(server, tmp_path / "run")
    s2 = Session.resume(tmp_path / "run", llm=client2, problem=problem, eval_cache=tmp_path / "cache",
                        eval_executor=POOL)
    assert (s2.iteration, s2.next_phase) == (0, "evaluate")
    assert len(s2.iteration_kernels()) == 2
    s2.run()
    after = s2.store.table_counts("r1")
    assert after["kernels"] == before["kernels"] + 4  # iteration 1 only; nothing re-generated
    assert model.calls["planner"] == 6 and model.calls["executor"] == 6
    assert s2.iteration == 2
    # A resumed run with more iterations continues, it does not start over.
    s2.run(3)
    assert s2.iteration == 3 and len(s2.history()) == 3
    client2.close()
    s2.close()


def test_repeated_sampling_always_plans_from_the_baseline_without_memory(problem, tmp_path, server):
    model = FakeNKIModel(plans=["DOUBLE the tile width.", "Use 512-column tiles: WIDE512."],
                         rewrites=[("DOUBLE", double_tile), ("WIDE512", set_tile(512))])
    server.responder = model.responder
    s, client, _ = new_session(problem, tmp_path, server, config=small_config(strategy="repeated"))
    s.run()
    plans0, plans1 = s.iteration_plans(0), s.iteration_plans(1)
    assert len(plans0) == 2 and len(plans1) == 4  # N, then B*N: the beam search's nominal budget
    assert {p.parent_id for p in plans0 + plans1} == {"baseline"}
    assert len(s.memory) == 0 and model.calls["summarizer"] == 0
    assert "TILE = 512" in s.best.source
    client.close()
    s.close()


def test_shared_memory_is_visible_across_problems_only_when_enabled(problem, tmp_path, server):
    model = FakeNKIModel(plans=["DOUBLE the tile width."], rewrites=[("DOUBLE", double_tile)])
    server.responder = model.responder
    shared = OptimizationMemory(8)
    shared.add_manual("Other lesson", "**Other lesson**\nFrom another problem.", problem="other")
    cfg = small_config(iterations=1, plans_per_kernel=1, **{"memory.shared": False})
    s, client, _ = new_session(problem, tmp_path, server, config=cfg, memory=shared)
    s.plan()
    assert "From another problem" not in server.requests[-1]["messages"][0]["content"]
    s.close()
    client.close()
    cfg2 = small_config(iterations=2, plans_per_kernel=1, **{"memory.shared": True})
    s2, client2, _ = new_session(problem, tmp_path / "two", server, config=cfg2, memory=shared, run_id="r2")
    s2.run(1)
    planner_systems = [b["messages"][0]["content"] for b in server.requests
                       if "propose the next" in b["messages"][0]["content"]]
    assert "From another problem" in planner_systems[-1]
    assert any(i.problem == "axpb" for i in shared)  # the new lesson went into the shared memory
    saved = OptimizationMemory.load(tmp_path / "two" / "run" / "memory-r2.json")
    assert len(saved) == len(shared)
    client2.close()
    s2.close()


def test_steps_run_from_inside_a_running_event_loop_like_jupyter(problem, tmp_path, server):
    import asyncio

    model = FakeNKIModel(plans=["DOUBLE the tile width."], rewrites=[("DOUBLE", double_tile)])
    server.responder = model.responder
    s, client, _ = new_session(problem, tmp_path, server, config=small_config(iterations=1, plans_per_kernel=1))

    async def cell():  # a notebook cell runs synchronous code while the kernel's loop is running
        s.step()

    asyncio.run(cell())
    df = s.kernels_df()
    assert list(df["kernel_id"]) == ["baseline", "i0b0p0s0"]
    assert df.set_index("kernel_id").loc["i0b0p0s0", "in_beam"]
    client.close()
    s.close()


def test_a_recorded_run_replays_offline_to_the_same_kernels(problem, tmp_path, server):
    from accelopt_nb.llm import Cassette

    model = FakeNKIModel(plans=["DOUBLE the tile width.", "Use 512-column tiles: WIDE512."],
                         rewrites=[("DOUBLE", double_tile), ("WIDE512", set_tile(512))])
    server.responder = model.responder
    tape = tmp_path / "tape.jsonl"
    runs = {}
    for mode, url in (("record", server.url), ("replay", "http://127.0.0.1:9/v1")):  # nothing listens on :9
        run_dir = tmp_path / mode
        store = RunStore.open(run_dir)
        cfg = ModelConfig(model=MODEL, base_url=url, price="fake-price")
        client = LLMClient(cfg, Ledger.for_store(store, mode, prices=PRICES), Cassette(tape, mode), concurrency=4)
        s = Session.create(problem, run_dir=run_dir, config=small_config(), llm=client, run_id=mode,
                           eval_cache=tmp_path / "cache")
        s.run()
        runs[mode] = {k.kernel_id: k.source for k in s.kernels.values()}, s.best.kernel_id, s.memory.items
        client.close()
        s.close()
    assert runs["record"][0] == runs["replay"][0] and runs["record"][1] == runs["replay"][1]
    assert [i.summary for i in runs["record"][2]] == [i.summary for i in runs["replay"][2]]
    assert server.chat_requests == sum(model.calls.values())  # the replay never reached a server


def test_multi_fidelity_screens_every_candidate_and_confirms_the_beam(problem, tmp_path, server):
    model = FakeNKIModel(plans=["DOUBLE the tile width.", "WRONG: fold the constant."],
                         rewrites=[("DOUBLE", double_tile), ("WRONG", wrong_result)])
    server.responder = model.responder
    s, client, _ = new_session(problem, tmp_path, server,
                               config=small_config(iterations=2, **{"evaluation.fidelity": "multi"}))
    s.run(1)
    rows = s.store.rows("evaluations", "r1")
    fidelity = {(r["kernel_id"], r["result"]["fidelity"]) for r in rows}
    new = [k.kernel_id for k in s.iteration_kernels(0)]
    assert all((kid, "screen") in fidelity for kid in new)  # every candidate screened
    assert ("baseline", "full") in fidelity
    # Every beam kernel is confirmed at full fidelity; the wrong kernel never needed a confirmation.
    assert all(s.kernels[k].confirmed for k in s.beam)
    confirmed = {kid for kid, f in fidelity if f == "confirm"}
    assert confirmed and confirmed <= set(new) and confirmed <= set(s.beam)
    assert s.best.fidelity in ("confirm", "full")
    report = s.run(1)
    assert report.fidelity == "multi" and "multi fidelity" in report.to_text()
    client.close()
    s.close()


def test_a_cassette_replays_kernel_by_kernel_even_when_requests_are_identical(problem, tmp_path, server):
    """Four identical executor requests (same parent, same plan text) get different answers; the
    replay, scheduled differently, still gives every kernel id its own recorded kernel."""
    import itertools
    import re

    from fakes.fake_openai_server import Reply, Slow

    from accelopt_nb.llm import Cassette

    counter = itertools.count(1)

    def responder(body):
        system, user = body["messages"][0]["content"], body["messages"][-1]["content"]
        if "propose the next" in system:
            return Reply("The kernel is DMA-bound.\n\nPlan:\nTag the module with a constant.")
        if "You implement that step" in system:
            parent = re.search(r"## The kernel to optimize\n```python\n(.*?)\n```", user, re.DOTALL).group(1)
            n = next(counter)
            reply = Reply(f"```python\n{parent}\n\n_VARIANT = {n}\n```")
            # the first answers arrive last, so the recording order differs from the request order
            return Slow(0.5, reply) if n <= 2 else reply
        return Reply("No optimization found")

    server.responder = responder
    tape = tmp_path / "tape.jsonl"
    runs = {}
    cfg = small_config(iterations=1, plans_per_kernel=2, samples_per_plan=2)
    for mode, url, concurrency in (("record", server.url, 4), ("replay", "http://127.0.0.1:9/v1", 1)):
        run_dir = tmp_path / mode
        store = RunStore.open(run_dir)
        model = ModelConfig(model=MODEL, base_url=url, price="fake-price")
        client = LLMClient(model, Ledger.for_store(store, mode, prices=PRICES), Cassette(tape, mode),
                           concurrency=concurrency)
        s = Session.create(problem, run_dir=run_dir, config=cfg, llm=client, run_id=mode,
                           eval_cache=tmp_path / "cache")
        s.run()
        runs[mode] = {k.kernel_id: k.source for k in s.kernels.values()}
        client.close()
        s.close()
    assert len({src for kid, src in runs["record"].items() if kid != "baseline"}) == 4  # four different kernels
    assert runs["record"] == runs["replay"]


def test_kernels_with_the_same_syntax_tree_are_evaluated_once_and_take_one_beam_slot(problem, tmp_path, server):
    from fakes.fake_nki_llm import harmless_variation

    model = FakeNKIModel(plans=["DOUBLE the tile width.", "HARMLESS: add a comment."],
                         rewrites=[("DOUBLE", double_tile), ("HARMLESS", harmless_variation)])
    server.responder = model.responder
    s, client, _ = new_session(problem, tmp_path, server, config=small_config(iterations=2, samples_per_plan=2))
    s.run(1)
    kernels = s.iteration_kernels(0)
    assert len(kernels) == 4 and all(k.evaluated for k in kernels)
    logs = [r["result"]["log"] for r in s.store.rows("evaluations", "r1") if r["kernel_id"] != "baseline"]
    copies = [log for log in logs if any("evaluated once" in line for line in log)]
    assert len(copies) >= 1  # the two DOUBLE samples are the same kernel: one of them is a copy
    # the comment-only variation has the baseline's tree: it never takes a second beam slot
    trees = [s.kernels[k].hash for k in s.beam]
    assert len(trees) == len(set(trees))
    client.close()
    s.close()


def test_overridden_swaps_config_and_clients_for_a_block_then_restores_them(problem, tmp_path, server):
    s, client, _ = new_session(problem, tmp_path, server)
    step_client = LLMClient(client.config.replace(temperature=0.3), client.ledger)
    narrow = s.config.with_overrides(beam_width=1)
    with s.overridden(config=narrow, clients={"planner": step_client}):
        assert s.config.beam_width == 1 and s.client("planner") is step_client
        with pytest.raises(ConfigError):
            s.client("executor")
    assert s.config.beam_width == 2
    assert s.client("planner") is client and s.client("executor") is client
    step_client.close()


class RecordingEvaluator:
    """A real local pool with a known capacity that records what was submitted, in order."""

    def __init__(self, workers: int | None) -> None:
        from accelopt_nb.evaluation import LocalPoolEvaluator

        self.pool = LocalPoolEvaluator(workers or 2)
        self.workers = workers          # None: a capacity the search cannot know (as on Dask)
        self.submitted: list[tuple[str, str]] = []
        self.profiled: list[bool] = []
        self.identified: list[tuple[str, str]] = []   # the program hashes asked before each evaluation

    def submit(self, job):
        if job.fidelity.startswith("identify"):
            self.identified.append((job.label, job.fidelity))
            return self.pool.submit(job)
        self.submitted.append((job.label, job.fidelity))
        self.profiled.append(job.options.profile)
        return self.pool.submit(job)

    def shutdown(self, wait=True):
        self.pool.shutdown(wait)


@pytest.mark.parametrize("workers", [1, None])
def test_multi_fidelity_confirms_what_beam_and_memory_need_in_the_stream_after_the_screens(problem, tmp_path, server,
                                                                                    workers):
    model = FakeNKIModel(plans=["DOUBLE the tile width.", "WRONG: fold the constant.", "NARROW to 64 columns."],
                         rewrites=[("DOUBLE", double_tile), ("WRONG", wrong_result), ("NARROW", set_tile(64))])
    server.responder = model.responder
    evaluator = RecordingEvaluator(workers)
    s, client, _ = new_session(problem, tmp_path, server, eval_executor=evaluator,
                               config=small_config(plans_per_kernel=3, **{"evaluation.fidelity": "multi"}))
    s.plan()
    s.execute()
    evaluator.submitted.clear()
    evaluator.profiled.clear()
    evaluator.identified.clear()
    s.evaluate()
    by_plan = {word: k.kernel_id for k in s.iteration_kernels() for word in ("DOUBLE", "WRONG", "NARROW")
               if word in s.plans[k.plan_id].text}
    # Screens first (none waits for a worker while a confirmation runs), then the kernels the
    # search will need, in rank order: the faster DOUBLE (it would take a beam slot: the baseline
    # is confirmed already), then the slower NARROW (memory would learn it as a negative lesson);
    # never WRONG (incorrect).
    pairs = s.rewrite_pairs()
    assert [(p.kind, p.slow_id, p.fast_id) for p in pairs] == [
        ("positive", "baseline", by_plan["DOUBLE"]), ("negative", by_plan["NARROW"], "baseline")]
    fidelities = [f for _, f in evaluator.submitted]
    assert fidelities == ["screen"] * 3 + ["confirm"] * 2
    # asked in rank order (each program identified first, so the executor may start them in either order)
    assert [label for label, f in evaluator.identified if f == "identify"] == [by_plan["DOUBLE"], by_plan["NARROW"]]
    assert sorted(label for label, _ in evaluator.submitted[3:]) == sorted([by_plan["DOUBLE"], by_plan["NARROW"]])
    assert s.kernels[by_plan["DOUBLE"]].confirmed and s.kernels[by_plan["NARROW"]].confirmed
    assert not s.kernels[by_plan["WRONG"]].confirmed
    # The confirmation checks correctness only; latency and profile come from the screening.
    assert evaluator.profiled[3:] == [False, False]
    double = s.kernels[by_plan["DOUBLE"]]
    rows = s.store.rows("evaluations", "r1")
    confirmation = next(r["result"] for r in rows
                        if r["kernel_id"] == double.kernel_id and r["result"]["fidelity"] == "confirm")
    screening = next(r["result"] for r in rows
                     if r["kernel_id"] == double.kernel_id and r["result"]["fidelity"] == "screen")
    assert confirmation["status"] == "correct"
    assert confirmation["latency_ms"] == screening["latency_ms"] == double.latency_ms
    assert confirmation["profile"] == screening["profile"]
    assert any("from this kernel's screening" in line for line in confirmation["log"])
    # recorded in rank order, once every screen was in
    assert [r["kernel_id"] for r in rows if r["result"]["fidelity"] == "confirm"] == \
        [by_plan["DOUBLE"], by_plan["NARROW"]]
    s.select()                          # nothing left to confirm
    assert len(evaluator.submitted) == 5
    assert s.beam == [by_plan["DOUBLE"], "baseline"]
    client.close()
    s.close()
    evaluator.shutdown()
