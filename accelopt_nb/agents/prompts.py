"""Rendering the planner, executor, summarizer and fixer prompts.

Two prompt sets ship as Jinja2 templates in ``accelopt_nb/agents/prompts/`` (:data:`PROMPT_SETS`):
``paper`` (``prompts/paper/*.j2``) carries the information of the authors' prompts, in our words
and in their structure (the differences that remain are listed in ``docs/search.md``);
``extended`` (``prompts/*.j2``) adds our optimization knowledge, a diagnosis checklist and the
real correctness criterion. A researcher can point :class:`PromptSet` at a directory of their
own templates (the same file names, ``paper/`` for the paper set; missing files fall back to the
shipped ones), or at the authors' own prompt directory, which is then read unchanged (their
file names and ``{placeholders}``; :mod:`accelopt_nb.agents.authors_prompts`). Undefined
template variables are errors, so a template never silently renders a blank.
"""
from __future__ import annotations

import functools
import math
import random
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import jinja2

from accelopt_nb.errors import ConfigError

ROLES = ("planner", "executor", "summarizer", "fixer")
# paper: the authors' prompt content in our words (the paper preset); extended: plus our advice.
PROMPT_SETS = ("paper", "extended")



class _HardwareFacts(Mapping[str, Mapping[str, Any]]):
    """The per-core numbers the prompts quote, read from the hardware configs (``perf/hw/*.yaml``,
    their one home): ``HW_FACTS["trn1"]["sbuf_kib"]``. Read on first use."""

    def __getitem__(self, hw: str) -> Mapping[str, Any]:
        if hw not in self:
            raise KeyError(hw)
        return _hardware_facts(hw)

    def __iter__(self) -> Iterator[str]:
        from accelopt_nb.perf.hardware import presets
        return iter(presets())

    def __len__(self) -> int:
        from accelopt_nb.perf.hardware import presets
        return len(presets())

    def __contains__(self, hw: object) -> bool:
        from accelopt_nb.perf.hardware import presets
        return hw in presets()


@functools.lru_cache(maxsize=None)
def _hardware_facts(hw: str) -> Mapping[str, Any]:
    from accelopt_nb.perf.hardware import load_hw

    cfg = load_hw(hw)
    per_partition = cfg.sbuf_bytes_per_partition
    return {"name": f"{cfg.name}, NeuronCore-v{cfg.nc_version}", "sbuf_kib": per_partition // 1024,
            "sbuf_mib": cfg.sbuf_partitions * per_partition // 2**20, "hbm_gbps": int(cfg.hbm_bandwidth // 1e9)}


HW_FACTS: Mapping[str, Mapping[str, Any]] = _HardwareFacts()

# What each profile field means: the information of the authors' glossary, in our words, for the
# fields the paper showed; then the fields only our profiles carry. Fractions are in [0, 1].
PROFILE_GLOSSARY: dict[str, str] = {
    "latency": "the kernel's total time on the device, in milliseconds.",
    "hbm_read_bytes": "total bytes the DMA engines read from HBM.",
    "hbm_write_bytes": "total bytes the DMA engines wrote to HBM.",
    "sbuf_read_bytes": "total size of all reads from SBUF (the State Buffer): DMA transfers that read it and "
                       "instructions that take their input from it.",
    "sbuf_write_bytes": "total size of all writes to SBUF: DMA transfers that write it and instructions whose "
                        "output goes to it.",
    "psum_read_bytes": "total bytes that compute-engine instructions read from PSUM.",
    "psum_write_bytes": "total bytes that compute-engine instructions wrote to PSUM.",
    "spill_save_bytes": "total bytes of spilled data saved to HBM. Spilled data are intermediate tensors computed by "
                        "the engines that do not fit in SBUF during execution and must be moved out to HBM.",
    "spill_reload_bytes": "total bytes of spilled data loaded back into SBUF (spilled data: intermediate tensors "
                          "that did not fit in SBUF and were moved to HBM). A tensor reloaded several times "
                          "counts its size once per reload.",
    "hardware_flops": "the FLOP count of every Tensor Engine instruction the compiler emitted, including matmuls "
                      "that only move data (transposes, partition broadcasts); a multiply-add counts as two FLOPs "
                      "(2 * MAC_count * rows * cols * elements).",
    "transpose_flops": "twice the number of matmul operations spent on transposes; a part of hardware_flops.",
    "peak_flops_bandwidth_ratio": "the Tensor Engine's theoretical peak FLOP/s divided by the peak DRAM bandwidth. "
                                  "A kernel whose mm_arithmetic_intensity is below this value is memory-bound; "
                                  "above it, compute-bound.",
    "mm_arithmetic_intensity": "regular matmul FLOPs per byte of DRAM traffic, (hardware_flops - transpose_flops) "
                               "/ (hbm_read_bytes + hbm_write_bytes). Below peak_flops_bandwidth_ratio the kernel "
                               "is memory-bound, above it compute-bound.",
    "hfu_estimated_percent": "hardware FLOP utilization of the Tensor Engine, over every Tensor Engine instruction "
                             "the compiler emitted, including the data-movement matmuls (transposes, partition "
                             "broadcasts) it inserts to resolve layout conflicts; a multiply-add counts as two "
                             "FLOPs. It is hardware_flops / (tensor_engine_max_ops_per_sec * total_time), the "
                             "maximum being 2 * Tensor Engine elements * clock frequency; a fraction (0.41 = 41 %).",
    "tensor_engine_active_time_percent": "fraction of the run time the Tensor Engine was executing (0..1).",
    "vector_engine_active_time_percent": "share of the run time the Vector Engine was processing at least one "
                                         "instruction, semaphore waits excluded (a fraction, 0..1).",
    "scalar_engine_active_time_percent": "share of the run time the Scalar Engine was processing at least one "
                                         "instruction, semaphore waits excluded (a fraction, 0..1).",
    "gpsimd_engine_active_time_percent": "share of the run time the GpSimd Engine was processing at least one "
                                         "instruction, semaphore waits excluded (a fraction, 0..1).",
    "dma_active_time_percent": "fraction of the run time at least one DMA transfer was moving data (0..1).",
    "mbu_estimated_percent": "HBM bandwidth utilization: HBM bytes over what the peak bandwidth could move in the "
                             "kernel's time, as a fraction.",
}
# Advice beyond the meaning of a field: shown by the extended prompt set only.
GLOSSARY_ADVICE: dict[str, str] = {
    "latency": "Lower is better.",
    "spill_reload_bytes": "Large values mean live data outgrew SBUF: shorten buffer lifetimes or shrink tiles.",
    "transpose_flops": "Transposes are pure overhead for the computation.",
}


@dataclass(frozen=True)
class PeakInfo:
    """Optional roofline context for the planner (off by default, the paper's future work)."""

    percent: float  # % of the problem's theoretical peak the kernel reaches
    peak_ms: float
    bound: str  # e.g. "HBM bandwidth", "the Tensor Engine", "the Vector/Scalar engines"


# The fields the paper's planner saw (the authors' displayed list), in the order of their glossary.
PAPER_FIELDS: tuple[str, ...] = (
    "hbm_read_bytes", "hbm_write_bytes", "psum_read_bytes", "psum_write_bytes", "sbuf_read_bytes",
    "sbuf_write_bytes", "spill_reload_bytes", "spill_save_bytes", "hardware_flops", "transpose_flops",
    "peak_flops_bandwidth_ratio", "mm_arithmetic_intensity", "hfu_estimated_percent",
    "scalar_engine_active_time_percent", "vector_engine_active_time_percent", "gpsimd_engine_active_time_percent",
    "latency")
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


def glossary_for(fields: str = "paper", prompt_set: str = "paper") -> list[tuple[str, str]]:
    """(field, meaning) pairs the planner's glossary explains: the paper's fields in the authors'
    order, or every field of :data:`PROFILE_GLOSSARY`; the extended set adds :data:`GLOSSARY_ADVICE`."""
    keys = PAPER_FIELDS if fields == "paper" else tuple(PROFILE_GLOSSARY)
    out = []
    for k in keys:
        text = PROFILE_GLOSSARY[k]
        if prompt_set == "extended" and k in GLOSSARY_ADVICE:
            text = f"{text} {GLOSSARY_ADVICE[k]}"
        out.append((k, text))
    return out


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
    """The prompts of a run: renders system + user messages per role.

    ``directory``: templates of your own (same file names as the shipped ones, ``paper/`` for the
    paper set; missing files fall back to the shipped ones), or the authors' prompt directory
    (``planner_prompts/``, ``executor_prompts/``, ``summarizer_prompts/``; also found under a
    checkout's ``prompts/``), which is then used unchanged for every role it has.
    """

    def __init__(self, directory: str | Path | None = None) -> None:
        from accelopt_nb.agents.authors_prompts import AuthorsPrompts

        self.directory = Path(directory) if directory is not None else None
        if self.directory is not None and not self.directory.is_dir():
            raise ConfigError(f"prompt directory not found: {self.directory}")
        self.authors = AuthorsPrompts.find(self.directory) if self.directory is not None else None
        loaders: list[jinja2.BaseLoader] = []
        if self.directory is not None and self.authors is None:
            loaders.append(jinja2.FileSystemLoader(str(self.directory)))
        shipped = resources.files("accelopt_nb.agents") / "prompts"
        loaders.append(jinja2.FileSystemLoader(str(shipped)))
        self.env = jinja2.Environment(loader=jinja2.ChoiceLoader(loaders), undefined=jinja2.StrictUndefined,
                                      keep_trailing_newline=False, autoescape=False,
                                      trim_blocks=True, lstrip_blocks=True)

    @property
    def source(self) -> str:
        """Where the prompts come from, in words (for run records and reports)."""
        if self.authors is not None:
            return f"the authors' prompt files in {self.authors.root}"
        if self.directory is not None:
            return f"templates in {self.directory} (shipped ones for the rest)"
        return "the shipped templates"

    def render(self, name: str, prompt_set: str = "extended", **context: Any) -> str:
        """Render ``name`` of a prompt set: ``paper/<name>.j2`` for the paper set (falling back to
        ``<name>.j2``, e.g. the fixer's user prompt), ``<name>.j2`` for the extended set."""
        names = [f"{name}.j2"] if prompt_set == "extended" else [f"{prompt_set}/{name}.j2", f"{name}.j2"]
        try:
            template = self.env.select_template(names)
        except jinja2.TemplatesNotFound as exc:
            raise ConfigError(f"prompt template {' or '.join(names)} not found") from exc
        try:
            text = template.render(prompt_set=prompt_set, **context)
        except jinja2.UndefinedError as exc:
            raise ConfigError(f"prompt template {template.name}: {exc}") from exc
        # Trailing spaces only: code shown to the model must reach it exactly as written.
        return "\n".join(line.rstrip() for line in text.splitlines()).strip() + "\n"

    # -- the roles -------------------------------------------------------------------------
    def planner(self, *, problem_name: str, reference_source: str, kernel_source: str, profile_lines: Sequence[str],
                memory_items: Iterable[Any] = (), hw: str = "trn1", dtypes: str = "float32",
                peak: PeakInfo | None = None, hints: Sequence[str] = (),
                fields: str = "paper", prompt_set: str = "extended") -> tuple[str, str]:
        if self.authors is not None and self.authors.has("planner"):
            return self.authors.planner(reference_source=reference_source, kernel_source=kernel_source,
                                        profile_lines=profile_lines, memory_items=memory_items)
        common = self._common(hw, fields, prompt_set)
        system = self.render("planner_system", prompt_set, memory_items=list(memory_items), **common)
        user = self.render("planner_user", prompt_set, problem_name=problem_name, reference_source=reference_source,
                           kernel_source=kernel_source, profile_lines=list(profile_lines), peak=peak,
                           hints=list(hints), dtypes=dtypes, **common)
        return system, user

    def executor(self, *, problem_name: str, reference_source: str, kernel_source: str, plan: str,
                 tolerance: float, hw: str = "trn1", dtypes: str = "float32", n_seeds: int = 5,
                 adversarial: bool = False, prompt_set: str = "extended") -> tuple[str, str]:
        if self.authors is not None and self.authors.has("executor"):
            return self.authors.executor(reference_source=reference_source, kernel_source=kernel_source, plan=plan)
        common = self._common(hw, prompt_set=prompt_set)
        judged = dict(tolerance=_tol(tolerance), n_seeds=n_seeds, adversarial=adversarial, dtypes=dtypes)
        system = self.render("executor_system", prompt_set, **judged, **common)
        user = self.render("executor_user", prompt_set, problem_name=problem_name, reference_source=reference_source,
                           kernel_source=kernel_source, plan=plan, **judged, **common)
        return system, user

    def summarizer(self, *, slow_source: str, fast_source: str, speedup: float, slow_ms: float, fast_ms: float,
                   hw: str = "trn1", measured_on: str | None = None,
                   prompt_set: str = "extended") -> tuple[str, str]:
        if self.authors is not None and self.authors.has("summarizer"):
            return self.authors.summarizer(slow_source=slow_source, fast_source=fast_source, speedup=speedup)
        common = self._common(hw, prompt_set=prompt_set)
        system = self.render("summarizer_system", prompt_set, **common)
        user = self.render("summarizer_user", prompt_set, slow_source=slow_source, fast_source=fast_source,
                           speedup=speedup, slow_ms=slow_ms, fast_ms=fast_ms,
                           measured_on=measured_on or f"measured on {hw}", **common)
        return system, user

    def fixer(self, *, problem_name: str, reference_source: str, kernel_source: str, report: str,
              plan: str | None, tolerance: float, attempt: int = 1, hw: str = "trn1", dtypes: str = "float32",
              n_seeds: int = 5, adversarial: bool = False, prompt_set: str = "extended") -> tuple[str, str]:
        if self.authors is not None and self.authors.has("fixer"):
            return self.authors.fixer(kernel_source=kernel_source, report=report)
        common = self._common(hw, prompt_set=prompt_set)
        judged = dict(tolerance=_tol(tolerance), n_seeds=n_seeds, adversarial=adversarial, dtypes=dtypes)
        system = self.render("fixer_system", prompt_set, **judged, **common)
        user = self.render("fixer_user", prompt_set, problem_name=problem_name, reference_source=reference_source,
                           kernel_source=kernel_source, report=report, plan=plan, attempt=attempt,
                           **judged, **common)
        return system, user

    def _common(self, hw: str, fields: str = "paper", prompt_set: str = "extended") -> dict[str, Any]:
        if hw not in HW_FACTS:
            raise ConfigError(f"unknown hardware {hw!r}; known: {sorted(HW_FACTS)}")
        if prompt_set not in PROMPT_SETS:
            raise ConfigError(f"unknown prompt set {prompt_set!r}; known: {', '.join(PROMPT_SETS)}")
        return {"hw": HW_FACTS[hw], "glossary": glossary_for(fields, prompt_set)}


def reference_for_agents(source: str, show_adversarial: bool = False) -> str:
    """The task source the agents see: without the adversarial-input generator (the judge's
    business) unless asked for. Removed: top-level functions named ``*adversarial*``, the
    top-level constants and helpers only they use (with the comments just above them), and
    every comment that mentions adversarial inputs."""
    if show_adversarial:
        return source
    import ast

    from accelopt_nb.pyutil import parse

    try:
        tree = parse(source)
    except SyntaxError:
        return source
    body = list(tree.body)
    dropped = [n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
               and "adversarial" in n.name.lower()]
    if not dropped and "adversar" not in source.lower():
        return source
    # Constants and helpers used by the dropped code and nothing else go too (to a fixed point).
    while True:
        kept = [n for n in body if n not in dropped]
        used_by_dropped = _loaded_names(dropped)
        more = [n for n in kept if _defined_names(n) and _defined_names(n) <= used_by_dropped
                and not (_defined_names(n) & _loaded_names([k for k in kept if k is not n]))]
        if not more:
            break
        dropped += more
    lines = source.splitlines()
    drop: set[int] = set()
    for node in dropped:
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        while first > 1 and lines[first - 2].lstrip().startswith("#"):  # its own comment block
            first -= 1
        drop.update(range(first - 1, node.end_lineno or node.lineno))
    kept_lines = [_without_adversarial_comment(ln) for i, ln in enumerate(lines) if i not in drop]
    text = "\n".join(ln for ln in kept_lines if ln is not None)
    while "\n\n\n\n" in text:
        text = text.replace("\n\n\n\n", "\n\n\n")
    return text.rstrip() + "\n"


def _defined_names(node: Any) -> set[str]:
    import ast

    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return set()


def _loaded_names(nodes: Iterable[Any]) -> set[str]:
    import ast

    return {n.id for node in nodes for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _without_adversarial_comment(line: str) -> str | None:
    """The line without a ``#`` comment that mentions adversarial inputs (None: nothing left)."""
    if "adversar" not in line.lower():
        return line
    import io
    import tokenize

    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(line + "\n").readline))
    except (tokenize.TokenError, SyntaxError):
        return line
    for tok in tokens:
        if tok.type == tokenize.COMMENT and "adversar" in tok.string.lower():
            code = line[:tok.start[1]].rstrip()
            return code or None
    return line


def _tol(t: float) -> str:
    return f"{t:g}"
