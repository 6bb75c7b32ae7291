"""`--prompts-dir` pointed at a prompt directory in the authors' layout: their files, unchanged.

The fixture (tests/data/authors_prompts) has the authors' folder and file names and their
placeholders, with text written for these tests."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from accelopt_nb.agents import Executor, Planner, PromptSet, Summarizer
from accelopt_nb.agents.authors_prompts import AuthorsPrompts
from accelopt_nb.errors import ConfigError
from accelopt_nb.search.memory import MemoryItem

FIXTURE = Path(__file__).parent / "data" / "authors_prompts"
REF = "import numpy as np\n\ndef forward(x):\n    return {'kernel_code': x}\n"  # braces in the code stay
KERNEL = "@nki.jit\ndef kernel(x):\n    return x\n"


def read(*parts: str) -> str:
    return FIXTURE.joinpath(*parts).read_text()


def test_planner_prompts_are_the_files_with_placeholders_filled_and_memory_appended():
    prompts = PromptSet(FIXTURE)
    assert prompts.authors is not None and "authors' prompt files" in prompts.source
    lessons = [MemoryItem(title="Hoist", summary="**Hoist**\nLoad once."),
               MemoryItem(title="No optimization found", summary="No optimization found"),
               MemoryItem(title="Fuse", summary="**Fuse**\nOne pass.")]
    system, user = (m["content"] for m in Planner(prompts, prompt_set="paper").messages(
        problem_name="p", reference_source=REF, kernel_source=KERNEL,
        profile_lines=["latency: 1.5", "hbm_read_bytes: 4096"], memory_items=lessons))
    assert system == read("planner_prompts", "base_prompt.txt") + \
        "\n\n#Experiences\n**Hoist**\nLoad once.\n\n**Fuse**\nOne pass.\n\n"
    expected = read("planner_prompts", "planner_prompt_template.txt").replace("{problem_code}", REF) \
        .replace("{kernel_code}", KERNEL, 1).replace("{profile}", "latency: 1.5\nhbm_read_bytes: 4096\n")
    assert user == expected
    assert "{'kernel_code': x}" in user and "{this brace}" in system  # other braces are text
    no_memory, _ = (m["content"] for m in Planner(prompts).messages(
        problem_name="p", reference_source=REF, kernel_source=KERNEL, profile_lines=[]))
    assert no_memory == read("planner_prompts", "base_prompt.txt")


def test_executor_and_summarizer_prompts_are_the_files():
    prompts = PromptSet(FIXTURE)
    system, user = (m["content"] for m in Executor(prompts).messages(
        problem_name="p", reference_source=REF, kernel_source=KERNEL, plan="Hoist the load."))
    assert system == read("executor_prompts", "base_prompt.txt")
    assert user == ("FIXTURE EXECUTOR USER.\n" + REF + "\n---\n" + KERNEL + "\n---\nPlan:\nHoist the load.\n"
                    "Return `kernel` in a code block.")
    system, user = (m["content"] for m in Summarizer(prompts).messages(
        slow_source="slow()", fast_source="fast()", speedup=1.25, slow_ms=2.0, fast_ms=1.6))
    assert system == read("summarizer_prompts", "base_prompt.txt") and "{Short description}" in system
    assert user == "# Slow\nslow()\n# Fast\nfast()\n# Speedup\n1.250"


def test_a_checkout_root_works_and_a_fixer_falls_back_to_ours(tmp_path):
    shutil.copytree(FIXTURE, tmp_path / "AccelOpt" / "prompts")
    prompts = PromptSet(tmp_path / "AccelOpt")
    assert prompts.authors is not None and prompts.authors.root == tmp_path / "AccelOpt" / "prompts"
    system, user = prompts.fixer(problem_name="p", reference_source=REF, kernel_source=KERNEL,
                                 report="Verdict: incorrect", plan=None, tolerance=2e-5)
    assert "failed its evaluation" in user and "Verdict: incorrect" in user  # no fixer_prompts/: ours
    fixer_dir = tmp_path / "AccelOpt" / "prompts" / "fixer_prompts"
    fixer_dir.mkdir()
    (fixer_dir / "base_prompt.txt").write_text("FIX SYSTEM")
    (fixer_dir / "user_prompt_template.txt").write_text("Code:\n{code}\nLog:\n{log}")
    system, user = PromptSet(tmp_path / "AccelOpt").fixer(problem_name="p", reference_source=REF,
                                                          kernel_source=KERNEL, report="bad", plan=None,
                                                          tolerance=2e-5)
    assert (system, user) == ("FIX SYSTEM", f"Code:\n{KERNEL}\nLog:\nbad")


def test_half_a_role_or_no_placeholders_is_an_error(tmp_path):
    shutil.copytree(FIXTURE, tmp_path / "p")
    (tmp_path / "p" / "executor_prompts" / "user_prompt_template.txt").unlink()
    with pytest.raises(ConfigError, match="without user_prompt_template.txt"):
        PromptSet(tmp_path / "p")
    shutil.copytree(FIXTURE, tmp_path / "q")
    (tmp_path / "q" / "planner_prompts" / "planner_prompt_template.txt").write_text("no placeholders here")
    with pytest.raises(ConfigError, match="uses none of the placeholders"):
        PromptSet(tmp_path / "q")
    shutil.rmtree(tmp_path / "q" / "executor_prompts")
    shutil.copytree(FIXTURE / "planner_prompts", tmp_path / "r" / "planner_prompts")
    with pytest.raises(ConfigError, match="only in part"):
        AuthorsPrompts.find(tmp_path / "r")
    # a directory of our templates is not the authors' layout
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "planner_user.j2").write_text("mine {{ problem_name }}")
    assert PromptSet(tmp_path / "mine").authors is None


def test_a_run_sends_the_authors_prompts_and_keeps_them_on_resume(tmp_path, eval_pool):
    """open_session(prompts_dir=...) over real HTTP: what the server receives is the fixture's text."""
    import re

    from fakes.fake_nki_llm import double_tile, write_axpb_problem
    from fakes.fake_openai_server import FakeOpenAIServer, Reply

    from accelopt_nb.search.launch import LaunchSpec, open_session

    task, kernel = write_axpb_problem(tmp_path / "problem")
    seen: list[tuple[str, str]] = []

    def responder(body):
        system, user = body["messages"][0]["content"], body["messages"][1]["content"]
        seen.append((system, user))
        if system.startswith("FIXTURE PLANNER SYSTEM"):
            return Reply("Plan: DOUBLE the tile width so each instruction covers more columns.")
        if system.startswith("FIXTURE EXECUTOR SYSTEM"):
            parent = re.search(r"\n---\n(.*)\n---\nPlan:", user, re.DOTALL).group(1)
            return Reply("```python\n" + double_tile(parent) + "\n```")
        return Reply("**Double the tile**\nWider tiles.\nOriginal code:\n```\na\n```\nOptimized code:\n```\nb\n```")

    def spec(**kw):
        return LaunchSpec("axpb", run_dir=tmp_path / "run", task=task, kernel=kernel, preset="smoke",
                          overrides={"iterations": 2, "plans_per_kernel": 1, "evaluation.shape_preset": "task"},
                          eval_cache=tmp_path / "cache", eval_executor=eval_pool, check_endpoint=False,
                          model={"base_url": srv.url, "model": "fake", "price": "gpt-oss-120b@groq"}, **kw)

    with FakeOpenAIServer(models=["fake"], responder=responder) as srv:
        with open_session(spec(prompts_dir=FIXTURE)) as s:
            s.step()  # iteration 0
            assert s.store.get_run(s.run_id)["config"]["llm"]["prompts_dir"] == str(FIXTURE.resolve())
        with open_session(spec(resume="auto")) as s:  # no prompts_dir given: the run's own
            s.run()
    systems = {system for system, _ in seen}
    assert read("planner_prompts", "base_prompt.txt") in systems
    assert read("executor_prompts", "base_prompt.txt") in systems
    assert read("summarizer_prompts", "base_prompt.txt") in systems
    assert all(system.startswith("FIXTURE") for system in systems)  # never our templates, resume included
    planner_users = [user for system, user in seen if system.startswith("FIXTURE PLANNER")]
    assert len(planner_users) >= 2 and all(u.startswith("FIXTURE PLANNER USER.\n# Problem\n```\n")
                                           for u in planner_users)
    assert any("#Experiences\n**Double the tile**" in system for system in systems)  # memory, their way
