"""Fingerprints of what the simulator computes, to prove a refactoring changed nothing.

``record`` runs every kernel the speed benchmarks run (our 14 NKIBench baselines at a shape preset, the arange/mask
kernel, with ``--accelopt-repo DIR`` the paper's 14 at the paper's shapes, with ``--nki-samples DIR`` the
real-kernel harness of ``benchmarks/real_kernels.py``, with ``--nki-library DIR`` / ``--nxdi DIR`` its
standalone-``nki`` cases too) in each simulation mode (with values and trace-only, each
with loop replay and running every iteration) and writes, per kernel and mode, a hash of every output's
dtype, shape and bytes, a hash of every trace field (``Trace`` and each instruction and tensor record, file
names reduced to their base name so two checkouts compare), the replayed-instruction count, the warnings and
the log, or the error's type and message. ``compare`` lists every difference between two recordings.

    python benchmarks/sim_fingerprint.py record OUT.json [--shapes small] [--accelopt-repo DIR]
                                                         [--nki-samples DIR] [--nki-library DIR]
                                                         [--nxdi DIR] [--only adamw,paper/]
    python benchmarks/sim_fingerprint.py compare BEFORE.json AFTER.json

It uses only the simulator's public API (``load_kernel``, ``simulate``, ``SimOptions``, the trace dataclasses),
so the same file records a checkout from before a change (run it with that checkout first on ``PYTHONPATH``).
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import real_kernels  # noqa: E402
from sim_speed import arange_mask_case, our_cases, paper_cases  # noqa: E402

import accelopt_nb  # noqa: E402
from accelopt_nb.sim import SimOptions, load_kernel, simulate  # noqa: E402

MODES = {
    "values": SimOptions(),
    "values-full": SimOptions(loop_replay=False),
    "trace": SimOptions(trace_only=True),
    "trace-full": SimOptions(trace_only=True, loop_replay=False),
}
ROOT = str(Path(accelopt_nb.__file__).resolve().parent.parent)   # the checkout whose simulator runs


def _plain(x: Any) -> Any:
    """Trace data as plain values, with file paths reduced to their base name."""
    if dataclasses.is_dataclass(x):
        # Trace.skip_middle_end (added 2026-12-03) only when set, so traces of earlier commits stay comparable
        return tuple((f.name, Path(v).name if f.name == "file" and isinstance(v, str) else _plain(v))
                     for f in dataclasses.fields(x) if f.name != "replayed" for v in [getattr(x, f.name)]
                     if not (f.name == "skip_middle_end" and v is False))
    if isinstance(x, dict):
        return tuple((repr(k), _plain(v)) for k, v in x.items())
    if isinstance(x, (list, tuple)):
        return tuple(_plain(v) for v in x)
    if isinstance(x, float):
        return x.hex()
    return x


def _digest(text: str | bytes) -> str:
    return hashlib.sha256(text if isinstance(text, bytes) else text.encode()).hexdigest()[:20]


def _clean(text: str) -> str:
    return text.replace(ROOT, "<root>")


def fingerprint(run: Callable[[SimOptions], Any]) -> dict[str, dict]:
    """Per mode: the hashes of the outputs and the trace, or the error."""
    out: dict[str, dict] = {}
    for mode, options in MODES.items():
        t0 = time.process_time()
        try:
            res = run(options)
        except Exception as exc:  # noqa: BLE001 - the error is part of the fingerprint
            out[mode] = {"error": _clean(f"{type(exc).__name__}: {exc}")}
            continue
        arrays = [np.ascontiguousarray(a) for a in res.outputs]
        out[mode] = {
            "outputs": [f"{a.dtype}{a.shape}:{_digest(a.tobytes())}" for a in arrays],
            "trace": _digest(repr(_plain(res.trace))),   # every field but ``replayed`` (recorded on its own)
            "instructions": len(res.trace),
            "replayed": res.trace.replayed,
            "warnings": _digest(_clean(repr(res.warnings))),
            "log": _digest(repr(res.log)),
            "seconds": round(time.process_time() - t0, 3),
        }
        del res, arrays
    return out


def cases(args: argparse.Namespace) -> list[tuple[str, Callable[[SimOptions], Any]]]:
    only = [s for s in args.only.split(",") if s]
    out: list[tuple[str, Callable[[SimOptions], Any]]] = []
    bench = our_cases(args.shapes, None) + [arange_mask_case(*(int(v) for v in args.arange_shape.split("x")))]
    if args.accelopt_repo is not None:
        bench += paper_cases(args.accelopt_repo, None)
    for case in bench:
        def run(options: SimOptions, case=case) -> Any:
            _, nki_inputs = case.make()
            return simulate(load_kernel(case.kernel_path), *nki_inputs, options=options)
        out.append((case.name, run))
    roots = {"nki-samples": args.nki_samples, "accelopt": [args.accelopt_repo] if args.accelopt_repo else [],
             "nki-library": [args.nki_library] if args.nki_library else [], "nxdi": [args.nxdi] if args.nxdi else []}
    for rc in real_kernels.all_cases():
        path = real_kernels._locate(rc, roots)
        if path is None:
            continue

        def run(options: SimOptions, rc=rc, path=path) -> Any:
            kern = real_kernels._load(rc, path)
            rng = np.random.default_rng(0)
            if rc.task is not None:
                task, inputs, _, _ = real_kernels._accelopt_task(rc, path, rng)
                return simulate(kern, *task.to_nki(inputs), options=options)
            module = getattr(getattr(kern, "fn", kern), "__globals__", {})
            args_, kwargs, _ = rc.harness(rng, module) if rc.needs_module else rc.harness(rng)
            return simulate(kern, *args_, grid=rc.grid or None, options=options, **kwargs)
        out.append((f"real/{rc.repo}/{rc.title}", run))
    return [(name, run) for name, run in out if not only or any(s in name for s in only)]


def record(args: argparse.Namespace) -> None:
    result: dict[str, Any] = {"root": ROOT, "kernels": {}}
    for name, run in cases(args):
        fp = fingerprint(run)
        result["kernels"][name] = fp
        secs = sum(m.get("seconds", 0) for m in fp.values())
        errors = sum("error" in m for m in fp.values())
        print(f"{name:70s} {secs:7.2f} s" + (f"  ({errors} modes raise)" if errors else ""), flush=True)
        Path(args.out).write_text(json.dumps(result, indent=1, sort_keys=True))


def compare(args: argparse.Namespace) -> int:
    a, b = (json.loads(Path(p).read_text())["kernels"] for p in (args.before, args.after))
    diffs = 0
    same = 0
    for name in sorted(set(a) | set(b)):
        if name not in a or name not in b:
            print(f"{name}: only in {'after' if name in b else 'before'}")
            diffs += 1
            continue
        for mode in MODES:
            x, y = a[name].get(mode, {}), b[name].get(mode, {})
            keys = sorted((set(x) | set(y)) - {"seconds"})
            bad = [k for k in keys if x.get(k) != y.get(k)]
            if bad:
                diffs += 1
                print(f"{name} [{mode}]: " + "; ".join(f"{k}: {x.get(k)!r} -> {y.get(k)!r}" for k in bad))
            else:
                same += 1
    print(f"{same} (kernel, mode) pairs identical, {diffs} differ")
    return 1 if diffs else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("out")
    rec.add_argument("--shapes", default="paper", help="shape preset of our 14 (paper or small)")
    rec.add_argument("--arange-shape", default="4000x3000")
    rec.add_argument("--accelopt-repo", type=Path, default=None)
    rec.add_argument("--nki-samples", type=Path, action="append", default=[])
    rec.add_argument("--nki-library", type=Path, default=None)
    rec.add_argument("--nxdi", type=Path, default=None)
    rec.add_argument("--only", default="", help="comma-separated substrings of case names")
    cmp_ = sub.add_parser("compare")
    cmp_.add_argument("before")
    cmp_.add_argument("after")
    args = ap.parse_args()
    if args.cmd == "record":
        record(args)
        return 0
    return compare(args)


if __name__ == "__main__":
    sys.exit(main())
