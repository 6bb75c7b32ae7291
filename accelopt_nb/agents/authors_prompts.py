"""The authors' own prompt directory, read unchanged.

A user with a checkout of the paper's code passes its prompt directory (``--prompts-dir
AccelOpt/prompts``, or the checkout itself) and the agents send exactly those prompts. The
directory holds one folder per role, each with a system prompt and a user template::

    planner_prompts/base_prompt.txt        planner_prompts/planner_prompt_template.txt
    executor_prompts/base_prompt.txt       executor_prompts/user_prompt_template.txt
    summarizer_prompts/base_prompt.txt     summarizer_prompts/user_prompt_template.txt
    fixer_prompts/base_prompt.txt          fixer_prompts/user_prompt_template.txt   (optional)

The user templates name their inputs ``{problem_code}``, ``{kernel_code}``, ``{profile}``,
``{optimization_plan}``, ``{slow_kernel}``, ``{fast_kernel}``, ``{speedup}``, ``{code}`` and
``{log}``; every other brace is text. The memory is appended to the planner's system prompt
under ``#Experiences``, one lesson per paragraph, as the authors' harness did. One deliberate
difference from that harness: ``{speedup}`` is filled in (theirs left it in the prompt as
written).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from accelopt_nb.errors import ConfigError

__all__ = ["AUTHORS_FILES", "AuthorsPrompts", "EXPERIENCES_HEADING"]

# role -> (folder, system prompt file, user template file, the placeholders its template may use)
AUTHORS_FILES: dict[str, tuple[str, str, str, tuple[str, ...]]] = {
    "planner": ("planner_prompts", "base_prompt.txt", "planner_prompt_template.txt",
                ("problem_code", "kernel_code", "profile")),
    "executor": ("executor_prompts", "base_prompt.txt", "user_prompt_template.txt",
                 ("problem_code", "kernel_code", "optimization_plan")),
    "summarizer": ("summarizer_prompts", "base_prompt.txt", "user_prompt_template.txt",
                   ("slow_kernel", "fast_kernel", "speedup")),
    "fixer": ("fixer_prompts", "base_prompt.txt", "user_prompt_template.txt", ("code", "log")),
}
EXPERIENCES_HEADING = "#Experiences"
_NOT_A_LESSON = "no optimization found"


@dataclass(frozen=True)
class _RolePrompts:
    system: str
    template: str
    placeholders: tuple[str, ...]

    def user(self, **values: str) -> str:
        """The template with each of its placeholders replaced (in one pass, so a value that
        happens to contain a placeholder's text is left as it is)."""
        pattern = re.compile(r"\{(" + "|".join(re.escape(p) for p in self.placeholders) + r")\}")
        return pattern.sub(lambda m: values[m.group(1)], self.template)


class AuthorsPrompts:
    """The prompts of an authors'-format directory; build with :meth:`find`."""

    def __init__(self, root: Path, roles: Mapping[str, _RolePrompts]) -> None:
        self.root = root
        self.roles = dict(roles)

    @classmethod
    def find(cls, directory: str | Path) -> "AuthorsPrompts | None":
        """The authors' prompts in ``directory`` (or its ``prompts/`` folder); None when it holds
        none of their role folders (it is then a directory of templates). A role folder with only
        one of its two files is an error, not a silent fallback."""
        base = Path(directory)
        for root in (base, base / "prompts"):
            if any((root / folder).is_dir() for folder, *_ in AUTHORS_FILES.values()):
                return cls(root, cls._read(root))
        return None

    @staticmethod
    def _read(root: Path) -> dict[str, _RolePrompts]:
        roles: dict[str, _RolePrompts] = {}
        for role, (folder, system_file, user_file, placeholders) in AUTHORS_FILES.items():
            d = root / folder
            if not d.is_dir():
                continue
            missing = [f for f in (system_file, user_file) if not (d / f).is_file()]
            if missing:
                raise ConfigError(f"{d} is an authors' prompt folder without {', '.join(missing)}")
            template = (d / user_file).read_text()
            if not any("{" + p + "}" in template for p in placeholders):
                raise ConfigError(f"{d / user_file} uses none of the placeholders "
                                  f"{', '.join('{' + p + '}' for p in placeholders)}")
            roles[role] = _RolePrompts((d / system_file).read_text(), template, placeholders)
        if "planner" not in roles or "executor" not in roles:
            raise ConfigError(f"{root} holds the authors' prompts only in part: planner_prompts/ and "
                              f"executor_prompts/ are both needed")
        return roles

    def has(self, role: str) -> bool:
        return role in self.roles

    # -- the roles (the same return shape as PromptSet: system, user) ---------------------
    def planner(self, *, reference_source: str, kernel_source: str, profile_lines: Sequence[str],
                memory_items: Iterable[Any] = ()) -> tuple[str, str]:
        p = self.roles["planner"]
        lessons = [str(getattr(i, "summary", i)) for i in memory_items
                   if _NOT_A_LESSON not in str(getattr(i, "title", "")).lower()]
        system = p.system
        if lessons:
            system += f"\n\n{EXPERIENCES_HEADING}\n" + "".join(f"{text}\n\n" for text in lessons)
        profile = "".join(f"{line}\n" for line in profile_lines)
        return system, p.user(problem_code=reference_source, kernel_code=kernel_source, profile=profile)

    def executor(self, *, reference_source: str, kernel_source: str, plan: str) -> tuple[str, str]:
        p = self.roles["executor"]
        return p.system, p.user(problem_code=reference_source, kernel_code=kernel_source, optimization_plan=plan)

    def summarizer(self, *, slow_source: str, fast_source: str, speedup: float) -> tuple[str, str]:
        p = self.roles["summarizer"]
        return p.system, p.user(slow_kernel=slow_source, fast_kernel=fast_source, speedup=f"{speedup:.3f}")

    def fixer(self, *, kernel_source: str, report: str) -> tuple[str, str]:
        p = self.roles["fixer"]
        return p.system, p.user(code=kernel_source, log=report)
