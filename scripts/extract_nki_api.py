"""Regenerate ``accelopt_nb/sim/api/nki_api.yaml``: the documented NKI API of both front ends.

The list of documented names comes from the API reference index pages of the AWS Neuron docs
(``nki/api/nki.language.rst``, ``nki/api/nki.isa.rst``), the signatures from the docstring
modules those pages are rendered from (``nki/api/nki/language/__init__.py``, ``.../isa/__init__.py``).
Both live in the public ``aws-neuron/aws-neuron-sdk`` repository; give a local clone (any bare
or normal git directory holding the two commits below):

    python scripts/extract_nki_api.py --sdk-repo PATH/TO/aws-neuron-sdk

Only names, signatures, the doc section and the first NeuronCore generation a docstring says an API is
available on ("Available only on NeuronCore-v3 and newer": ``min_nc_version: 3``) are recorded: facts about
the API, no docs text.
"""
from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
from pathlib import Path

import yaml

OUT = Path(__file__).resolve().parent.parent / "accelopt_nb" / "sim" / "api" / "nki_api.yaml"
REPO = "aws-neuron/aws-neuron-sdk"
DOCS = "https://awsdocs-neuron.readthedocs-hosted.com"

# front end -> (commit, release, rendered docs root)
FRONT_ENDS = {
    "neuronxcc": ("716f08dcb02f85223ac53f8bfb7951be4efdb6a7", "Neuron SDK 2.26.1, the last release documenting neuronxcc.nki",
                  f"{DOCS}/en/v2.26.1/nki/api/"),
    "nki": ("81ce03ae", "Neuron SDK 2.32 (NKI Beta 2, the standalone nki package)", f"{DOCS}/en/latest/nki/api/"),
}
MODULES = ("language", "isa")

_AVAILABLE = re.compile(r"Available (?:only )?on NeuronCore-v(\d)(?: \([^)]*\))? (?:and|or) (?:newer|beyond|later)")
_ENTRY = re.compile(r"^ {3}(\.\. )?([A-Za-z_][A-Za-z_0-9.]*)\s*(?::.*)?$")


def git_show(repo: Path, commit: str, path: str) -> str:
    return subprocess.run(["git", f"--git-dir={repo}", "show", f"{commit}:{path}"], check=True,
                          capture_output=True, text=True).stdout


def full_commit(repo: Path, commit: str) -> str:
    return subprocess.run(["git", f"--git-dir={repo}", "rev-parse", commit], check=True, capture_output=True,
                          text=True).stdout.strip()


def index_entries(rst: str) -> list[tuple[str, str, bool]]:
    """(name, section, hidden) for every autosummary entry; hidden = commented out in the index."""
    lines = rst.splitlines()
    out, section, in_summary = [], "", False
    for i, line in enumerate(lines):
        if i + 1 < len(lines) and re.fullmatch(r"-{3,}", lines[i + 1].strip()) and line.strip():
            section, in_summary = line.strip(), False
            continue
        if line.startswith(".. autosummary::"):
            in_summary = True
            continue
        if not in_summary or not line.strip() or line.strip().startswith(":"):
            continue
        if not line.startswith("   "):
            in_summary = False
            continue
        m = _ENTRY.match(line)
        if m:
            out.append((m.group(2), section, bool(m.group(1))))
    return out


def signatures(source: str) -> dict[str, dict]:
    """Module-level functions, classes and constants of a docstring module."""
    found: dict[str, dict] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef):
            args = node.args
            for a in args.posonlyargs + args.args + args.kwonlyargs:
                a.annotation = None
            if args.vararg is not None:
                args.vararg.annotation = None
            if args.kwarg is not None:
                args.kwarg.annotation = None
            found[node.name] = {"kind": "function", "signature": ast.unparse(args)}
            available = _AVAILABLE.search(ast.get_docstring(node) or "")
            if available:
                found[node.name]["min_nc_version"] = int(available.group(1))
        elif isinstance(node, ast.ClassDef):
            enum = any(isinstance(b, ast.Name) and b.id.endswith("Enum") for b in node.bases)
            members = [t.id for s in node.body if isinstance(s, ast.Assign) for t in s.targets
                       if isinstance(t, ast.Name)]
            members += [s.name for s in node.body if isinstance(s, ast.FunctionDef)
                        and any(isinstance(d, ast.Name) and d.id == "property" for d in s.decorator_list)]
            found[node.name] = {"kind": "enum" if enum else "class", **({"members": members} if members else {})}
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name):
                    found[t.id] = {"kind": "constant"}
    return found


def extract(repo: Path) -> dict:
    data: dict = {"generated_by": "scripts/extract_nki_api.py", "front_ends": {}}
    for fe, (commit, release, url) in FRONT_ENDS.items():
        commit = full_commit(repo, commit)
        entry: dict = {"release": release, "source": {"repo": REPO, "commit": commit}, "url": url, "modules": {}}
        for mod in MODULES:
            index_path, sig_path = f"nki/api/nki.{mod}.rst", f"nki/api/nki/{mod}/__init__.py"
            sigs = signatures(git_show(repo, commit, sig_path))
            apis = []
            seen = set()
            for name, section, hidden in index_entries(git_show(repo, commit, index_path)):
                if name in seen or (hidden and name not in sigs):  # a commented-out name without docs
                    continue
                seen.add(name)
                api = {"name": name, "section": section, **sigs.get(name, {"kind": "undefined"})}
                if hidden:
                    api["hidden_in_index"] = True
                apis.append(api)
            entry["modules"][mod] = {"index": index_path, "signatures": sig_path, "apis": apis}
        data["front_ends"][fe] = entry
    return data


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sdk-repo", type=Path, help="git directory of a clone of aws-neuron/aws-neuron-sdk")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    if args.sdk_repo is None:
        print("skipped: give --sdk-repo, a local clone of github.com/aws-neuron/aws-neuron-sdk", file=sys.stderr)
        return 2
    data = extract(args.sdk_repo)
    header = ("# The documented NKI API (nki.language, nki.isa) of both front ends, as data.\n"
              "# Generated by scripts/extract_nki_api.py from the AWS Neuron docs sources; do not edit by hand.\n"
              "# accelopt_nb.sim.api.coverage compares it with the simulator (docs/nki_coverage.md).\n")
    args.out.write_text(header + yaml.safe_dump(data, sort_keys=False, width=120))
    n = sum(len(m["apis"]) for fe in data["front_ends"].values() for m in fe["modules"].values())
    print(f"wrote {args.out} ({n} APIs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
