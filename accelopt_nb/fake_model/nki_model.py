"""FAKE MODEL, not a real LLM: plays planner, executor and summarizer over the fake OpenAI server.

For offline smoke runs (``accelopt reproduce --smoke``) and tests only; nothing it produces says
anything about what a real model would do.

It answers like a real model would, from the request alone: it tells the role from the system
prompt, proposes plans from a fixed menu (cycling per kernel), implements a plan by applying
the matching rewrite to the kernel found in the executor prompt, and summarizes a pair with a
fixed lesson. Answers are deliberately messy (reasoning first, a sketch block before the real
block, ``py`` tags) to exercise code extraction.

A rewrite is ``(keyword, transform)``: when the plan text contains the keyword, the executor
answers with ``transform(parent_source)``; a transform may return ``None`` to answer without
any code block (a failed sample), or raise to answer with prose only.
"""
from __future__ import annotations

import re
import threading
from collections import defaultdict
from pathlib import Path
from typing import Callable

from accelopt_nb.fake_model.server import Reply

Transform = Callable[[str], "str | None"]

# Where the kernel and the plan sit in a user prompt, in either shipped prompt set (extended, paper)
# and in the fixer's prompts.
_KERNEL_BLOCK = re.compile(r"(?:## The kernel to optimize|# Baseline NKI kernel|## The failing kernel|# Wrong code:)"
                           r"\n```(?:python)?\n(.*?)\n```", re.DOTALL)
_PLAN_BLOCK = re.compile(r"## The optimization step to implement\n(.*)\Z|# Optimization plan\n```\n(.*?)\n```",
                         re.DOTALL)
# Phrases that tell the role, from the system and user prompts of either prompt set.
_ROLE_MARKERS = (
    ("fixer", ("failed its evaluation", "# Wrong code:")),
    ("planner", ("propose the next optimization step", "propose 1 optimization plan")),
    ("executor", ("You implement that step", "Make the plan concrete")),
    ("summarizer", ("pairs of AWS Trainium kernels", 'answer only "No optimization found"')),
)

# Kernel rewrites the fake model answers with (data files, not part of any API).
KERNELS = Path(__file__).parent / "kernels"


def role_of(body: dict) -> str:
    text = "\n".join(str(m.get("content", "")) for m in body.get("messages", []))
    for role, markers in _ROLE_MARKERS:
        if any(marker in text for marker in markers):
            return role
    raise AssertionError(f"fake model cannot tell the role of: {text[:80]!r}")


def user_text(body: dict) -> str:
    return next(m["content"] for m in body["messages"] if m.get("role") == "user")


def kernel_in(body: dict) -> str:
    """The kernel a planner, executor or fixer request shows (the one to optimize or repair)."""
    found = _KERNEL_BLOCK.search(user_text(body))
    if found is None:
        raise AssertionError("fake model finds no kernel in the request")
    return found.group(1)


def plan_in(body: dict) -> str:
    """The plan an executor request asks to implement."""
    found = _PLAN_BLOCK.search(user_text(body))
    if found is None:
        raise AssertionError("fake model finds no plan in the request")
    return found.group(1) or found.group(2)


class FakeNKIModel:
    """Scriptable planner/executor/summarizer; use ``model.responder`` as the fake server's responder."""

    def __init__(self, plans: list[str], rewrites: list[tuple[str, Transform]],
                 lesson: str = "**Widen the tiles**\nProcess more columns per instruction.",
                 fixes: list[tuple[str, Transform]] = ()) -> None:
        self.plans = plans
        self.rewrites = rewrites
        self.lesson = lesson
        self.fixes = list(fixes)  # (text in the failing kernel, repair): the fixer's answers
        self.calls: dict[str, int] = defaultdict(int)
        self._per_kernel: dict[str, int] = defaultdict(int)
        self._lock = threading.Lock()

    def responder(self, body: dict) -> Reply:
        role = role_of(body)
        with self._lock:
            self.calls[role] += 1
        if role == "planner":
            return Reply(self._plan(body), reasoning="Looking at the profile first.")
        if role == "executor":
            return Reply(self._execute(body))
        if role == "fixer":
            return Reply(self._fix(body))
        return Reply(self.lesson + "\nOriginal code:\n```python\nx\n```\nOptimized code:\n```python\ny\n```")

    def _plan(self, body: dict) -> str:
        kernel = _KERNEL_BLOCK.search(user_text(body))
        key = kernel.group(1) if kernel else ""
        with self._lock:
            j = self._per_kernel[key]
            self._per_kernel[key] += 1
        return f"The profile shows the kernel is DMA-bound.\n\n**Plan:**\n{self.plans[j % len(self.plans)]}"

    def _execute(self, body: dict) -> str:
        parent, plan = kernel_in(body), plan_in(body)
        for keyword, transform in self.rewrites:
            if keyword in plan:
                try:
                    code = transform(parent)
                except Exception:
                    return "I am not able to implement this plan."
                if code is None:
                    return "Here is my analysis, but I ran out of time before writing code."
                sketch = "\n".join(parent.splitlines()[:3])
                return ("Let me first restate the relevant part:\n```python\n" + sketch + "\n```\n"
                        "Now the full optimized kernel:\n```py\n" + code.rstrip() + "\n```\n")
        raise AssertionError(f"fake model has no rewrite for plan {plan!r}")


    def _fix(self, body: dict) -> str:
        failing = kernel_in(body)
        for keyword, transform in self.fixes:
            if keyword in failing:
                code = transform(failing)
                return "The report points at the bug; here is the repaired kernel.\n```python\n" + code.rstrip() + "\n```\n"
        return "I cannot see what is wrong with this kernel."


# ---------------------------------------------------------------- the tiny axpb task
AXPB_TASK = '''import numpy as np
M = 256
N = 1024


def get_inputs():
    return [np.random.normal(0, 1, (M, N)).astype(np.float32)]


def forward(x):
    return x * 2.0 + 1.0


def transform_to_nki_inputs(inputs):
    return inputs


def transform_nki_outputs(k_res, ref):
    return (np.asarray(k_res).reshape(np.asarray(ref).shape),)
'''

AXPB_KERNEL = '''import neuronxcc.nki as nki
import neuronxcc.nki.language as nl

TILE = 128


@nki.jit
def kernel(x):
    M, N = x.shape
    out = nl.ndarray((M, N), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(M // 128):
        for j in nl.affine_range(N // TILE):
            t = nl.load(x[i * 128:(i + 1) * 128, j * TILE:(j + 1) * TILE])
            u = nl.multiply(t, 2.0)
            v = nl.add(u, 1.0)
            nl.store(out[i * 128:(i + 1) * 128, j * TILE:(j + 1) * TILE], value=v)
    return out
'''


def set_tile(width: int) -> Transform:
    return lambda src: re.sub(r"^TILE = \d+$", f"TILE = {width}", src, flags=re.MULTILINE)


def double_tile(src: str) -> str:
    width = int(re.search(r"^TILE = (\d+)$", src, re.MULTILINE).group(1))
    return set_tile(min(width * 2, 512))(src)


def wrong_result(src: str) -> str:
    return src.replace("nl.add(u, 1.0)", "nl.add(u, 1.5)")


def fix_wrong_result(src: str) -> str:
    """The fixer's repair of :func:`wrong_result`."""
    return src.replace("nl.add(u, 1.5)", "nl.add(u, 1.0)")


def write_axpb_problem(directory: Path) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    task, kern = directory / "axpb_task.py", directory / "axpb_kernel.py"
    task.write_text(AXPB_TASK)
    kern.write_text(AXPB_KERNEL)
    return task, kern


# ---------------------------------------------------------------- NKIBench matmul
def matmul_column_outer(src: str) -> str:
    """A genuinely faster matmul for small shapes: column blocks outside row blocks, each block of B loaded once."""
    return (KERNELS / "matmul_column_outer.py").read_text()


def matmul_one_pass(src: str) -> str:
    """The faster matmul with a common bug: each output tile keeps only the last contraction step's
    product (``=`` where ``+=`` accumulates in PSUM). Runs, and computes wrong numbers."""
    return matmul_column_outer(src).replace("acc += nisa.nc_matmul(", "acc = nisa.nc_matmul(")


def fix_accumulation(src: str) -> str:
    """The fixer's repair of :func:`matmul_one_pass`: accumulate again."""
    return src.replace("acc = nisa.nc_matmul(", "acc += nisa.nc_matmul(")


def harmless_variation(src: str) -> str:
    """The parent with a comment added: a new source hash, the same instructions."""
    return "# Reviewed: loop structure kept as is.\n" + src
