"""How much of the documented NKI API the simulator runs: ``docs/nki_coverage.md``, generated from the code.

Every ``nki.language`` and ``nki.isa`` name documented for either front end (``nki_api.yaml``) is
looked up in that front end's facade module, and a function's status comes from the same
boundary spec the simulator enforces (``api_guard``):

- supported: present, and every documented parameter is simulated (or cannot change a result);
- partial: present, but some documented parameters or values are refused (listed with the reason);
- refused: absent, or a required documented parameter is not simulated; using it raises
  UnsupportedAPIError.

    python -m accelopt_nb.sim.api.coverage            # rewrite docs/nki_coverage.md
    python -m accelopt_nb.sim.api.coverage --check    # exit 1 if the committed file differs
"""
from __future__ import annotations

import argparse
import inspect
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accelopt_nb.sim.api import guard as api_guard

DOC_PATH = Path(__file__).resolve().parents[3] / "docs" / "nki_coverage.md"
STATUSES = ("supported", "partial", "refused")


@dataclass
class Coverage:
    """The status of one documented API in one front end."""

    front_end: str
    module: str
    name: str
    section: str
    status: str
    notes: list[str] = field(default_factory=list)

    @property
    def qualname(self) -> str:
        return f"{api_guard.SHORT[self.module]}.{self.name}"


def facade_modules() -> dict[tuple[str, str], types.ModuleType]:
    from accelopt_nb.sim.api.loader import ALIASES
    return {(fe, kind): ALIASES[f"{prefix}.{kind}"] for fe, prefix in api_guard.FRONT_END_PREFIX.items()
            for kind in ("language", "isa")}


def _function_status(obj: Any, entry: dict) -> tuple[str, list[str]]:
    spec: api_guard.Spec | None = getattr(obj, "__nki_spec__", None)
    if spec is None:
        return "refused", ["not behind the API boundary (no documented-signature check)"]
    doc = api_guard.doc_signature(entry)
    doc_params = api_guard.public_params(doc) if doc is not None else {}
    refused_required, limited, dropped = [], [], []
    for name, p in doc_params.items():
        arg = spec.args[name]
        if arg.limit is None:
            if arg.target is None:
                dropped.append(name)
            continue
        if p.default is inspect.Parameter.empty and arg.target is None:
            refused_required.append(f"`{name}` ({arg.limit.reason})")
        else:
            limited.append(f"`{name}` ({arg.limit.reason})")
    notes = []
    if refused_required:
        notes.append("required parameter not simulated: " + "; ".join(refused_required))
    if limited:
        notes.append("refused unless default: " + "; ".join(limited))
    key = f"{spec.api.rsplit('.', 2)[-2]}.{entry['name']}"
    no_effect = {**api_guard.NO_EFFECT, **api_guard.NO_EFFECT_FOR.get(key, {})}
    renamed = {d: s for d, s in api_guard.ALIASES.get(key, {}).items() if d in doc_params}
    if renamed:
        notes.append("simulator spells " + ", ".join(f"`{d}` as `{s}`" for d, s in renamed.items()))
    if dropped:
        notes.append("accepted, no effect on values: " + ", ".join(f"`{d}`" for d in dropped))
    extras = [n for n in spec.args if n not in doc_params and n not in renamed.values() and n not in no_effect]
    if extras and doc is not None:
        notes.append("simulator also accepts: " + ", ".join(f"`{n}`" for n in extras))
    status = "refused" if refused_required else "partial" if limited else "supported"
    return status, notes


def _value_status(obj: Any, entry: dict) -> tuple[str, list[str]]:
    limited = getattr(obj, "coverage_note", None)     # a value the simulator names but does not fully model
    if isinstance(limited, str):
        return "partial", [limited]
    missing = [m for m in entry.get("members", []) if not hasattr(obj, m)]
    if missing:
        return "partial", ["missing members: " + ", ".join(f"`{m}`" for m in missing)]
    return "supported", []


def collect() -> list[Coverage]:
    """The status of every documented API of both front ends, in documentation order."""
    rows = []
    docs = api_guard.documented()
    for (fe, kind), module in facade_modules().items():
        for name, entry in docs[fe][kind].items():
            row = Coverage(fe, kind, name, entry.get("section", ""), "refused")
            if name not in module.__dict__:
                why = api_guard.MISSING_WHY.get(f"{kind}.{name}")
                row.notes = ["not implemented by the simulator (using it raises UnsupportedAPIError)"
                             + (f": {why}" if why else "")]
            elif entry.get("kind") == "function":
                row.status, row.notes = _function_status(module.__dict__[name], entry)
                if entry.get("min_nc_version"):
                    row.notes.append(f"NeuronCore-v{entry['min_nc_version']} and newer: refused (TargetError) when "
                                     "the target is older")
            else:
                row.status, row.notes = _value_status(module.__dict__[name], entry)
            rows.append(row)
    return rows


def extras(front_end: str, kind: str) -> list[str]:
    """Facade names the simulator defines beyond that front end's documented API."""
    module = facade_modules()[(front_end, kind)]
    docs = api_guard.documented()[front_end][kind]
    out = []
    for name, obj in module.__dict__.items():
        if name.startswith("_") or name in docs:
            continue
        owner = getattr(obj, "__module__", None) or getattr(type(obj), "__module__", "")
        if inspect.ismodule(obj) or not str(owner).startswith("accelopt_nb.sim"):
            continue
        out.append(name)
    return sorted(out)


# How the simulated target's generation (SimOptions.hw) changes what runs: the rules are in the code named here.
TARGET_NOTES = [
    "## The target generation",
    "",
    "A simulation has a target (`SimOptions(hw=...)`; `--hw trn1|trn2` of the CLI, the evaluation service, the MCP "
    "tool and the magics, which simulate for the hardware they time on). Its NeuronCore generation is the hardware "
    "registry's `nc_version` (`accelopt_nb/perf/hw/<name>.yaml`: trn1 = NeuronCore-v2, trn2 = NeuronCore-v3). "
    "What follows it (`accelopt_nb/sim/api/generations.py`):",
    "",
    "- **APIs documented for newer generations only** (the API reference's \"Available only on NeuronCore-vN and "
    "newer\", extracted into `nki_api.yaml` as `min_nc_version`; noted per API below) raise `TargetError` on an "
    "older target, naming the API with its front end and the target.",
    "- **Modes of an API**: `nc_matmul(perf_mode=double_row)` (the reference: performance mode is not supported on "
    "NeuronCore-v2) and PE tiles of 32 (`tile_size` 32: NeuronCore-v3 and newer, the 2.26 reference) raise "
    "`TargetError` on trn1.",
    "- **`nc_matmul(is_transpose=True)`**: NeuronCore-v3 has a TensorE transpose mode (bit-accurate; fp16/bf16 in, "
    "fp16/bf16 out in PSUM: Trainium2 architecture guide, \"Built-in Transpose Support\"), so on trn2 a 2-byte "
    "float input gives a 2-byte result. NeuronCore-v2 has no transpose mode: the flag only labels the instruction "
    "for the profiler (nc_matmul reference, \"Transpose mode\"), and on trn1 it is the plain fp32 matmul. That is "
    "what autocomp's trn1 attention kernels, which pass a non-identity operand with `is_transpose=True`, computed "
    "on the hardware. With a non-identity operand on NeuronCore-v3 the docs say nothing; the simulator gives the "
    "matmul rounded to the 2-byte type. Transpose mode on fp8 input (16-bit PSUM elements, the fp8 bits low) is "
    "not modelled: fp32 results.",
    "- **NaN and Inf in a TensorE transpose** (`nc_transpose(engine=tensor)`, or `is_transpose=True` against an "
    "identity): bit-accurate on trn2; on trn1 the transpose is a matmul against an identity, so a NaN or Inf "
    "spreads along its output row (0 × Inf = NaN), as the nc_transpose reference warns.",
    "- `nisa.get_nc_version()` returns the target's generation.",
    "",
    "**Unknown target** (`hw=None`, the default of `simulate()` and of `accelopt simulate` without `--hw`): "
    "permissive. Every generation's APIs and modes are accepted (no `TargetError`), `is_transpose` keeps the "
    "NeuronCore-v3 reading (2-byte results) and `get_nc_version()` returns `gen2`. Not gated on any target, "
    "because the references disagree and refusing a kernel that compiles is a false rejection: `tensor_copy` on "
    "ScalarE (the 2.26 reference describes how NeuronCore-v2 ScalarE copies, through fp32; the newer one says "
    "NeuronCore-v2 has none).",
]


def render(rows: list[Coverage] | None = None) -> str:
    rows = collect() if rows is None else rows
    raw = api_guard.documented()
    meta = api_guard.api_file()["front_ends"]
    out = ["# NKI API coverage of the simulator", "",
           "Generated by `python -m accelopt_nb.sim.api.coverage` from the code; do not edit by hand "
           "(`tests/test_sim_coverage.py` fails when it is stale).", "",
           "Every name documented in the `nki.language` and `nki.isa` API reference of each front end, with its "
           "status in the simulator: **supported**; **partial** (some documented parameters are refused unless they "
           "have their documented default, or some values are refused, listed with the reason); **refused** (using it raises `UnsupportedAPIError`, with the reason). A refused argument "
           "always raises `UnsupportedAPIError` naming the API and the argument, never runs with a changed "
           "meaning. The documented API list is data: `accelopt_nb/sim/api/nki_api.yaml`, extracted from the AWS "
           "Neuron docs sources by `scripts/extract_nki_api.py`; the checks are in `accelopt_nb/sim/api/guard.py`.",
           "", *TARGET_NOTES, "", "| front end | module | supported | partial | refused |", "|---|---|---:|---:|---:|"]
    for fe, mods in raw.items():
        for kind in mods:
            sub = [r for r in rows if r.front_end == fe and r.module == kind]
            counts = [sum(1 for r in sub if r.status == s) for s in STATUSES]
            out.append(f"| `{api_guard.FRONT_END_PREFIX[fe]}` | `{kind}` | " + " | ".join(map(str, counts)) + " |")
    for fe, mods in raw.items():
        m = meta[fe]
        out += ["", f"## `{api_guard.FRONT_END_PREFIX[fe]}`", "",
                f"Documented API: {m['release']} ({m['url']}; source `{m['source']['repo']}` at "
                f"`{m['source']['commit'][:12]}`)."]
        for kind in mods:
            out += ["", f"### `{api_guard.FRONT_END_PREFIX[fe]}.{kind}` (`{api_guard.SHORT[kind]}`)", "",
                    "| API | doc section | status | notes |", "|---|---|---|---|"]
            for r in rows:
                if r.front_end == fe and r.module == kind:
                    notes = "; ".join(r.notes).replace("|", "\\|")
                    out.append(f"| `{r.qualname}` | {r.section} | {r.status} | {notes} |")
            ext = extras(fe, kind)
            if ext:
                out += ["", f"Also in the simulator's `{api_guard.FRONT_END_PREFIX[fe]}.{kind}`, not documented for "
                        f"this front end: " + ", ".join(f"`{n}`" for n in ext) + "."]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Generate docs/nki_coverage.md from the simulator.")
    p.add_argument("--out", type=Path, default=DOC_PATH)
    p.add_argument("--check", action="store_true", help="exit 1 if the file differs from the generated text")
    args = p.parse_args(argv)
    text = render()
    if args.check:
        current = args.out.read_text() if args.out.is_file() else ""
        if current != text:
            print(f"{args.out} is stale: run python -m accelopt_nb.sim.api.coverage", file=sys.stderr)
            return 1
        print(f"{args.out} is up to date")
        return 0
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
