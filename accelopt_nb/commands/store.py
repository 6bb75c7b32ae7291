"""`accelopt store`: look into a run store and move runs between stores.

::

    accelopt store runs    --store runs/silu                    # a SQLite store (directory or file)
    accelopt store best    --store postgresql://me@db/kernels --problem silu --hw trn1
    accelopt store lineage --store runs/silu --run RUN KERNEL_ID
    accelopt store memory  --store postgresql://me@db/kernels --problem silu   # the newest lessons
    accelopt store export  --store runs/silu [--run RUN ...] silu-runs.jsonl
    accelopt store import  --store postgresql://me@db/kernels silu-runs.jsonl
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

NAME = "store"
HELP = ("list runs, best kernels and kernel lineage of a run store (SQLite or PostgreSQL), and "
        "export/import runs between stores")


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="store_command", metavar="ACTION")
    sub.required = True

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument("--store", required=True, metavar="PATH_OR_URL",
                       help="a run store: an experiment directory or .sqlite file, or postgresql://user@host/db")
        q.add_argument("--json", action="store_true", help="print JSON instead of a table")

    q = sub.add_parser("runs", help="the runs in the store, with their kernel counts and best latency")
    common(q)
    q = sub.add_parser("best", help="the fastest correct kernels over every run in the store")
    common(q)
    q.add_argument("--problem", help="only this problem")
    q.add_argument("--hw", help="only evaluations on this hardware (trn1, trn2)")
    q.add_argument("--fidelity", help="only evaluations at this fidelity (full, screen, confirm)")
    q.add_argument("-n", "--limit", type=int, default=10, help="how many (default 10)")
    q = sub.add_parser("lineage", help="a kernel's ancestry up to the baseline, with plans and speedups")
    common(q)
    q.add_argument("--run", required=True, help="the run holding the kernel")
    q.add_argument("kernel", help="kernel id")
    q.add_argument("--hw", help="the hardware whose evaluations to show")
    q = sub.add_parser("memory", help="the newest optimization-memory lessons over every run")
    common(q)
    q.add_argument("--problem", help="only this problem")
    q.add_argument("-n", "--limit", type=int, default=16, help="how many (default 16, AccelOpt's capacity)")
    q = sub.add_parser("export", help="write runs to a JSON-lines file")
    common(q)
    q.add_argument("--run", action="append", dest="runs", help="a run id (repeatable; default: every run)")
    q.add_argument("file", type=Path, help="the export file (.jsonl)")
    q = sub.add_parser("import", help="load runs from an export file (idempotent)")
    common(q)
    q.add_argument("file", type=Path, help="an export file written by `accelopt store export`")


def run(args: argparse.Namespace) -> int:
    from accelopt_nb.commands import emit_json
    from accelopt_nb.errors import ConfigError
    from accelopt_nb.store import RunStore
    from accelopt_nb.store.backends import is_database_url

    target = args.store
    if not is_database_url(target) and not Path(target).exists() and args.store_command != "import":
        raise ConfigError(f"no run store at {target}")
    with RunStore(target) as store:
        out = _ACTIONS[args.store_command](store, args)
    if args.json:
        emit_json(out, indent=2, default=str)
    else:
        print(_text(args.store_command, out, store.location))
    return 0


def _runs(store, args) -> list[dict[str, Any]]:
    return store.query(
        "SELECT r.run_id, r.created_at, r.status, "
        "(SELECT COUNT(*) FROM kernels k WHERE k.run_id = r.run_id) AS kernels, "
        "(SELECT MIN(e.latency_us) FROM evaluations e WHERE e.run_id = r.run_id AND e.status = 'correct') "
        "AS best_latency_us FROM runs r ORDER BY r.created_at, r.run_id")


def _best(store, args) -> list[dict[str, Any]]:
    from accelopt_nb.store.queries import best_kernels
    return best_kernels(store, problem=args.problem, hw=args.hw, fidelity=args.fidelity, limit=args.limit)


def _lineage(store, args) -> list[dict[str, Any]]:
    from accelopt_nb.store.queries import lineage
    return lineage(store, args.run, args.kernel, hw=args.hw)


def _memory(store, args) -> list[dict[str, Any]]:
    from accelopt_nb.store.queries import memory_items
    return memory_items(store, problem=args.problem, limit=args.limit)


def _export(store, args) -> dict[str, Any]:
    from accelopt_nb.store.transfer import export_runs
    counts = export_runs(store, args.file, args.runs)
    return {"file": str(args.file), "rows": counts}


def _import(store, args) -> dict[str, Any]:
    from accelopt_nb.store.transfer import import_runs
    counts = import_runs(store, args.file)
    return {"file": str(args.file), "rows": counts}


_ACTIONS = {"runs": _runs, "best": _best, "lineage": _lineage, "memory": _memory, "export": _export,
            "import": _import}


def _ms(v: Any) -> str:
    return "-" if v is None else f"{float(v):.4g}"


def _text(action: str, out: Any, location: str) -> str:
    if action in ("export", "import"):
        rows = ", ".join(f"{n} {t}" for t, n in out["rows"].items()) or "nothing"
        verb = "exported to" if action == "export" else "imported from"
        return f"{rows} {verb} {out['file']} ({location})"
    if not out:
        return f"(nothing in {location})"
    if action == "runs":
        lines = [f"{'run':<44} {'created':<24} {'status':<10} {'kernels':>7} {'best ms':>9}"]
        for r in out:
            best = None if r["best_latency_us"] is None else float(r["best_latency_us"]) / 1e3
            lines.append(f"{r['run_id']:<44} {str(r['created_at'])[:23]:<24} {r['status']:<10} "
                         f"{r['kernels']:>7} {_ms(best):>9}")
        return "\n".join(lines)
    if action == "memory":
        lines = [f"{'problem':<14} {'speedup':>8}  {'run':<36} lesson"]
        for r in out:
            speedup = "-" if r["speedup"] is None else f"{r['speedup']:.3f}x"
            title = (r["summary"] or "").strip().splitlines()[0].strip("*# ")[:70] if r["summary"] else ""
            lines.append(f"{r['problem_id']:<14} {speedup:>8}  {r['run_id']:<36} {title}")
        return "\n".join(lines)
    if action == "best":
        lines = [f"{'problem':<14} {'hw':<5} {'fidelity':<8} {'latency ms':>10} {'% peak':>7}  run / kernel"]
        for r in out:
            pct = "-" if r["pct_peak"] is None else f"{r['pct_peak']:.1f}"
            lines.append(f"{r['problem_id']:<14} {r['hw'] or '-':<5} {r['fidelity'] or '-':<8} "
                         f"{_ms(r['latency_ms']):>10} {pct:>7}  {r['run_id']} / {r['kernel_id']}")
        return "\n".join(lines)
    lines = [f"{'depth':>5} {'kernel':<22} {'status':<10} {'latency ms':>10} {'speedup':>8}  plan"]
    for r in out:
        speedup = "-" if r["speedup_over_parent"] is None else f"{r['speedup_over_parent']:.3f}x"
        plan = (r["plan"] or "").strip().splitlines()[0][:60] if r["plan"] else ""
        lines.append(f"{r['depth']:>5} {r['kernel_id']:<22} {r['status'] or '-':<10} {_ms(r['latency_ms']):>10} "
                     f"{speedup:>8}  {plan}")
    return "\n".join(lines)
