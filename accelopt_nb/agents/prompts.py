"""Rendering the planner, executor and summarizer prompts from Jinja2 templates.

The templates ship as package data in ``accelopt_nb/agents/prompts/*.j2``. Two prompt sets share
them (:data:`PROMPT_SETS`): ``paper`` shows the NKI API facts (``_nki_facts.j2``), the profile
glossary and the memory; ``extended`` adds optimization advice (``_nki_knowledge.j2``) and a menu
of candidate transformations. A researcher can
point :class:`PromptSet` at a directory of their own templates (same file names; missing
files fall back to the shipped ones) to ablate or rewrite any prompt without touching code.
Undefined template variables are errors, so a template never silently renders a blank.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import jinja2

from accelopt_nb.errors import ConfigError

ROLES = ("planner", "executor", "summarizer")
# paper: the NKI API facts, the profile glossary and the memory, as the paper's agents had, with no
# optimization advice (so the ablation measures what memory adds); extended: plus the advice.
PROMPT_SETS = ("paper", "extended")

# Per-core hardware numbers the prompts quote (from the NKI docs; see nki_hw_facts.md §1, §3).
HW_FACTS: dict[str, dict[str, Any]] = {
    "trn1": {"name": "trn1, NeuronCore-v2", "sbuf_mib": 24, "sbuf_kib": 192, "hbm_gbps": 410},
    "trn2": {"name": "trn2, NeuronCore-v3", "sbuf_mib": 28, "sbuf_kib": 224, "hbm_gbps": 362},
}

# What each profile field means, in the order the planner sees them. Fractions are in [0, 1].
PROFILE_GLOSSARY: dict[str, str] = {
    "latency": "execution time of the kernel in milliseconds (lower is better).",
    "hbm_read_bytes": "bytes read from HBM by DMA, including reloads of spilled data.",
    "hbm_write_bytes": "bytes written to HBM by DMA, including spills.",
    "sbuf_read_bytes": "bytes read from SBUF by DMA transfers and engine instructions.",
    "sbuf_write_bytes": "bytes written to SBUF by DMA transfers and engine instructions.",
    "psum_read_bytes": "bytes engine instructions read from PSUM.",
    "psum_write_bytes": "bytes engine instructions wrote to PSUM (mostly matmul results).",
    "spill_save_bytes": "bytes of intermediate data the compiler had to move from SBUF to HBM because SBUF was full.",
    "spill_reload_bytes": "bytes of spilled data read back from HBM into SBUF (counted on every reload). Large values "
                          "mean live data outgrew SBUF: shorten buffer lifetimes or shrink tiles.",
    "hardware_flops": "floating-point operations executed by the Tensor Engine, transposes included.",
    "transpose_flops": "the part of hardware_flops spent on transposes (pure overhead for the computation).",
    "peak_flops_bandwidth_ratio": "the hardware's peak Tensor Engine FLOP/s divided by its peak HBM bandwidth "
                                  "(FLOP per byte); the ridge point of the roofline.",
    "mm_arithmetic_intensity": "matmul FLOPs (without transposes) per byte of HBM traffic. Below "
                               "peak_flops_bandwidth_ratio the kernel is memory-bound, above it compute-bound.",
    "hfu_estimated_percent": "hardware FLOP utilization: Tensor Engine FLOPs over what the engine could do in the "
                             "kernel's time, as a fraction (0.41 = 41 %).",
    "tensor_engine_active_time_percent": "fraction of the run time the Tensor Engine was executing (0..1).",
    "vector_engine_active_time_percent": "fraction of the run time the Vector Engine was executing (0..1).",
    "scalar_engine_active_time_percent": "fraction of the run time the Scalar Engine was executing (0..1).",
    "gpsimd_engine_active_time_percent": "fraction of the run time the GpSimd Engine was executing (0..1).",
    "dma_active_time_percent": "fraction of the run time at least one DMA transfer was moving data (0..1).",
    "mbu_estimated_percent": "HBM bandwidth utilization: HBM bytes over what the peak bandwidth could move in the "
                             "kernel's time, as a fraction.",
}


@dataclass(frozen=True)
class PeakInfo:
    """Optional roofline context for the planner (off by default, the paper's future work)."""

    percent: float  # % of the problem's theoretical peak the kernel reaches
    peak_ms: float
    bound: str  # e.g. "HBM bandwidth", "the Tensor Engine", "the Vector/Scalar engines"


# The fields the paper's planner saw (the authors' displayed_profiles list), in glossary order.
PAPER_FIELDS: tuple[str, ...] = (
    "latency", "hbm_read_bytes", "hbm_write_bytes", "sbuf_read_bytes", "sbuf_write_bytes", "psum_read_bytes",
    "psum_write_bytes", "spill_save_bytes", "spill_reload_bytes", "hardware_flops", "transpose_flops",
    "peak_flops_bandwidth_ratio", "mm_arithmetic_intensity", "hfu_estimated_percent",
    "vector_engine_active_time_percent", "scalar_engine_active_time_percent", "gpsimd_engine_active_time_percent")
PROFILE_FIELD_SETS = ("paper", "extended", "all")


def profile_fields(profile: Mapping[str, Any], fields: str = "paper") -> list[str]:
    """The profile keys shown for a field set: ``paper`` (the 17 fields the paper's planner saw),
    ``extended`` (every field of the glossary) or ``all`` (every numeric field)."""
    if fields not in PROFILE_FIELD_SETS:
        raise ConfigError(f"profile field set must be one of {PROFILE_FIELD_SETS}, got {fields!r}")
    chosen = PAPER_FIELDS if fields == "paper" else tuple(PROFILE_GLOSSARY)
    keys = [k for k in PROFILE_GLOSSARY if k in chosen and k in profile]
    if fields == "all":
        keys += sorted(k for k, v in profile.items()
                       if k not in PROFILE_GLOSSARY and isinstance(v, (int, float)) and not isinstance(v, bool))
    return keys


def glossary_for(fields: str = "paper") -> list[tuple[str, str]]:
    chosen = PAPER_FIELDS if fields == "paper" else tuple(PROFILE_GLOSSARY)
    return [(k, v) for k, v in PROFILE_GLOSSARY.items() if k in chosen]


def format_profile(profile: Mapping[str, Any], order: str = "fixed", rng: random.Random | None = None,
                   fields: str = "paper") -> list[str]:
    """``name: value`` lines for the planner, in glossary order (see :func:`profile_fields`).

    ``order="shuffled"`` permutes the lines with the given seeded ``rng`` (the authors did this
    once per beam kernel so the N plan samples start from different emphases).
    """
    keys = profile_fields(profile, fields)
    if order == "shuffled":
        if rng is None:
            raise ConfigError("a shuffled profile order needs a seeded random.Random")
        rng.shuffle(keys)
    elif order != "fixed":
        raise ConfigError(f"profile order must be 'fixed' or 'shuffled', got {order!r}")
    lines = [f"{k}: {_fmt(profile[k])}" for k in keys]
    if profile.get("estimate_note"):   # simulator profiles: latency and utilizations carry the model's error bar
        lines.append(f"note: latency and utilizations are {profile['estimate_note']}")
    return lines


def _fmt(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        if v == int(v) and abs(v) >= 1e3:
            return str(int(v))
        return f"{v:.6g}"
    return str(v)


class PromptSet:
    """Loads the templates and renders the six prompts (system + user per role)."""

    def __init__(self, directory: str | Path | None = None) -> None:
        loaders: list[jinja2.BaseLoader] = []
        if directory is not None:
            d = Path(directory)
            if not d.is_dir():
                raise ConfigError(f"prompt directory not found: {d}")
            loaders.append(jinja2.FileSystemLoader(str(d)))
        shipped = resources.files("accelopt_nb.agents") / "prompts"
        loaders.append(jinja2.FileSystemLoader(str(shipped)))
        self.directory = Path(directory) if directory is not None else None
        self.env = jinja2.Environment(loader=jinja2.ChoiceLoader(loaders), undefined=jinja2.StrictUndefined,
                                      keep_trailing_newline=False, autoescape=False,
                                      trim_blocks=True, lstrip_blocks=True)

    def render(self, name: str, **context: Any) -> str:
        try:
            template = self.env.get_template(f"{name}.j2")
        except jinja2.TemplateNotFound as exc:
            raise ConfigError(f"prompt template {name}.j2 not found") from exc
        try:
            text = template.render(**context)
        except jinja2.UndefinedError as exc:
            raise ConfigError(f"prompt template {name}.j2: {exc}") from exc
        # Trailing spaces only: code shown to the model must reach it exactly as written.
        return "\n".join(line.rstrip() for line in text.splitlines()).strip() + "\n"

    # -- the three roles -------------------------------------------------------------------
    def planner(self, *, problem_name: str, reference_source: str, kernel_source: str, profile_lines: Sequence[str],
                memory_items: Iterable[Any] = (), hw: str = "trn1", dtypes: str = "float32",
                peak: PeakInfo | None = None, hints: Sequence[str] = (),
                fields: str = "paper", prompt_set: str = "extended") -> tuple[str, str]:
        common = self._common(hw, fields, prompt_set)
        system = self.render("planner_system", memory_items=list(memory_items), **common)
        user = self.render("planner_user", problem_name=problem_name, reference_source=reference_source,
                           kernel_source=kernel_source, profile_lines=list(profile_lines), peak=peak,
                           hints=list(hints), dtypes=dtypes, **common)
        return system, user

    def executor(self, *, problem_name: str, reference_source: str, kernel_source: str, plan: str,
                 tolerance: float, hw: str = "trn1", dtypes: str = "float32", n_seeds: int = 5,
                 adversarial: bool = False, prompt_set: str = "extended") -> tuple[str, str]:
        common = self._common(hw, prompt_set=prompt_set)
        system = self.render("executor_system", tolerance=_tol(tolerance), n_seeds=n_seeds, adversarial=adversarial,
                             dtypes=dtypes, **common)
        user = self.render("executor_user", problem_name=problem_name, reference_source=reference_source,
                           kernel_source=kernel_source, plan=plan, dtypes=dtypes, **common)
        return system, user

    def summarizer(self, *, slow_source: str, fast_source: str, speedup: float, slow_ms: float, fast_ms: float,
                   hw: str = "trn1", measured_on: str | None = None) -> tuple[str, str]:
        common = self._common(hw)
        system = self.render("summarizer_system", **common)
        user = self.render("summarizer_user", slow_source=slow_source, fast_source=fast_source, speedup=speedup,
                           slow_ms=slow_ms, fast_ms=fast_ms, measured_on=measured_on or f"measured on {hw}",
                           **common)
        return system, user

    def _common(self, hw: str, fields: str = "paper", prompt_set: str = "extended") -> dict[str, Any]:
        if hw not in HW_FACTS:
            raise ConfigError(f"unknown hardware {hw!r}; known: {sorted(HW_FACTS)}")
        if prompt_set not in PROMPT_SETS:
            raise ConfigError(f"unknown prompt set {prompt_set!r}; known: {', '.join(PROMPT_SETS)}")
        return {"hw": HW_FACTS[hw], "glossary": glossary_for(fields), "prompt_set": prompt_set}


def reference_for_agents(source: str, show_adversarial: bool = False) -> str:
    """The task source the agents see: without the adversarial-input generator (the judge's
    business) unless asked for. Top-level functions named ``*adversarial*`` are removed."""
    if show_adversarial:
        return source
    import ast

    from accelopt_nb.pyutil import parse

    try:
        tree = parse(source)
    except SyntaxError:
        return source
    lines = source.splitlines()
    drop: set[int] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and "adversarial" in node.name.lower():
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            drop.update(range(first - 1, node.end_lineno or node.lineno))
    if not drop:
        return source
    kept = [ln for i, ln in enumerate(lines) if i not in drop]
    text = "\n".join(kept)
    while "\n\n\n\n" in text:
        text = text.replace("\n\n\n\n", "\n\n\n")
    return text.rstrip() + "\n"


def _tol(t: float) -> str:
    return f"{t:g}"
