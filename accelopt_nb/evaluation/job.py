"""What to evaluate: the job (problem, kernel source, backend, hardware, preset) and its options.

A job is plain data (``to_dict`` / ``from_dict``) because it travels to a sandbox worker or to a
Dask worker on another machine. The problem travels as a reference: an NKIBench problem name
(resolved on the worker through the ``nkibench`` package) or the full source of a task file.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, get_args

import accelopt_nb

# Bump when a change to the evaluator can change a verdict; it is part of every cache key.
EVALUATOR_VERSION = "3"   # 3: the simulator simulates for the job's hw (trn1 is_transpose, TargetError)

# How thoroughly a job is checked (docs/evaluation.md, "Fidelity levels"):
# full: every seed and adversarial input at the job's shape preset, profiled there;
# screen: seeds and adversarial inputs at the small preset, latency from a trace-only run at the
#         job's preset (a kernel that cannot run at the small shape is checked at the job's shape
#         with one seed plus the adversarial inputs);
# confirm: the full checks at the job's preset, for the few kernels a search keeps;
# trace: no correctness check, only the profile of a trace-only run at the job's preset (status "profiled").
# identify: no check, the kernel's program hash at the job's preset (EvalResult.identity; status "profiled");
# identify_screen: its program hash at the small preset and at the job's preset
#         (what a screen's verdict depends on). The evaluation service uses them to evaluate each program once.
Fidelity = Literal["full", "screen", "confirm", "trace", "identify", "identify_screen"]
FIDELITIES: tuple[str, ...] = get_args(Fidelity)
# The simulator and the performance model decide verdicts and profiles; their code and data are part of
# every cache key, so a changed model (a refit, a new rule) never serves results computed by the old one.
MODEL_PACKAGES = ("sim", "perf")
SCREEN_PRESET = "small"

PAPER_SEEDS: tuple[int, ...] = (0, 21, 42, 63, 84)
PROFILE_SEED = 42       # the paper profiles the seed-42 run
# Latency re-measurement threshold, (max - min) / min, per hardware generation (the paper's protocol).
LATENCY_SPREAD = {"trn1": 0.01, "trn2": 0.04}


@dataclass
class NeuronOptions:
    """Options of the real-hardware backend (see :mod:`accelopt_nb.evaluation.neuron`)."""

    warmup: int = 2
    iters: int = 10
    max_rounds: int = 10
    spread: float | None = None           # None: LATENCY_SPREAD[hw]
    round_pause_s: float = 1.0            # pause between measurement rounds
    python: str | None = None             # interpreter with neuronxcc; None: $ACCELOPT_NEURON_PYTHON or ours
    pythonpath: list[str] = field(default_factory=list)
    compile_opts: str = "--disable-dge --logical-nc-config=1"


# Default sandbox limits per shape preset: (wall-time s, address space MiB). The paper's 180 s
# covers small shapes; paper-size shapes simulate 5 seeds of ~10^5 instructions and hold
# multi-GB float64 references (bmm: 2 GiB), so they get more of both.
LIMITS_BY_PRESET = {"small": (180.0, 4096), "paper": (1800.0, 16384)}


def default_limits(preset: str) -> tuple[float, int]:
    return LIMITS_BY_PRESET.get(preset, LIMITS_BY_PRESET["small"])


@dataclass
class EvalOptions:
    """Knobs of one evaluation. ``verdict_fields`` are the ones that can change the result."""

    seeds: tuple[int, ...] = PAPER_SEEDS
    tolerance: float | None = None        # None: the problem's own (DEFAULT_TOLERANCE unless it says otherwise)
    adversarial: bool = True              # run the task's get_adversarial_inputs()
    check_precision: bool = True          # reject kernels using narrower float dtypes than the inputs
    fail_fast: bool = True                # stop at the first failing input, as the paper does
    profile: bool = True                  # estimate (simulator) or measure (neuron) the latency
    timeout_s: float | None = None        # wall-time limit; None: by preset (LIMITS_BY_PRESET)
    memory_mb: int | None = None          # address-space limit of the sandbox; None: by preset
    kernel_name: str = "kernel"           # the kernel function in the source
    kernel_filename: str = "kernel.py"    # how the kernel file is named in error messages
    neuron: NeuronOptions = field(default_factory=NeuronOptions)

    def verdict_fields(self) -> dict[str, Any]:
        d = {"seeds": list(self.seeds), "tolerance": self.tolerance, "adversarial": self.adversarial,
             "check_precision": self.check_precision,
             "fail_fast": self.fail_fast, "profile": self.profile, "kernel_name": self.kernel_name}
        n = self.neuron
        d["neuron"] = {"warmup": n.warmup, "iters": n.iters, "max_rounds": n.max_rounds,
                       "spread": n.spread, "compile_opts": n.compile_opts}
        return d

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["seeds"] = list(self.seeds)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "EvalOptions":
        d = {k: v for k, v in d.items() if k in {f.name for f in fields(cls)}}
        if "seeds" in d:
            d["seeds"] = tuple(int(s) for s in d["seeds"])
        if isinstance(d.get("neuron"), dict):
            d["neuron"] = NeuronOptions(**{k: v for k, v in d["neuron"].items()
                                           if k in {f.name for f in fields(NeuronOptions)}})
        return cls(**d)


@dataclass
class ProblemRef:
    """Where the task comes from: ``kind`` "nkibench" (by name) or "task" (full task-file source)."""

    kind: str
    name: str
    source: str | None = None
    fingerprint: str | None = None        # nkibench: hash of the materialised task, when known

    def identity(self) -> str:
        """Stable identity for cache keys: the name, and the hash of the task source."""
        if self.kind == "task":
            return f"task:{self.name}:{hashlib.sha256((self.source or '').encode()).hexdigest()}"
        return f"nkibench:{self.name}:{self.fingerprint or ''}"


@dataclass
class EvalJob:
    """One kernel to evaluate on one problem."""

    problem: ProblemRef
    kernel_source: str
    backend: str = "simulator"
    hw: str = "trn1"
    preset: str = "small"
    options: EvalOptions = field(default_factory=EvalOptions)
    label: str | None = None
    visible_cores: str | None = None      # NEURON_RT_VISIBLE_CORES lease (set by the executor)
    fidelity: str = "full"                # one of FIDELITIES

    @property
    def kernel_sha256(self) -> str:
        return hashlib.sha256(self.kernel_source.encode()).hexdigest()

    def cache_key(self) -> str:
        ident = {"kernel": self.kernel_sha256, "problem": self.problem.identity(),
                 "preset": self.preset, "backend": self.backend, "hw": self.hw,
                 "fidelity": self.fidelity, "evaluator": EVALUATOR_VERSION, "package": accelopt_nb.__version__,
                 "model": model_fingerprint(),
                 "options": self.options.verdict_fields()}
        return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()

    def to_dict(self) -> dict[str, Any]:
        return {"problem": asdict(self.problem), "kernel_source": self.kernel_source,
                "backend": self.backend, "hw": self.hw, "preset": self.preset,
                "options": self.options.to_dict(), "label": self.label,
                "visible_cores": self.visible_cores, "fidelity": self.fidelity}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "EvalJob":
        return cls(problem=ProblemRef(**d["problem"]), kernel_source=d["kernel_source"],
                   backend=d.get("backend", "simulator"), hw=d.get("hw", "trn1"),
                   preset=d.get("preset", "small"),
                   options=EvalOptions.from_dict(d.get("options", {})), label=d.get("label"),
                   visible_cores=d.get("visible_cores"), fidelity=d.get("fidelity", "full"))


@lru_cache(maxsize=1)
def model_fingerprint() -> str:
    """A hash of the simulator's and the performance model's files (code, hardware YAML, tables)."""
    root = Path(accelopt_nb.__file__).resolve().parent
    digest = hashlib.sha256()
    for package in MODEL_PACKAGES:
        for path in sorted((root / package).rglob("*")):
            if path.is_file() and path.suffix in (".py", ".yaml", ".yml", ".csv"):
                digest.update(path.relative_to(root).as_posix().encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()[:16]
