"""Two agents' sessions writing to one PostgreSQL kernel database at the same time, then the
team's view of it: best kernels and the lineage query (docs/team_database_transcript.md).

Each session is a real `accelopt mcp` server (stdio) driven by the official SDK client; both point
`--store` at the same database and run concurrently. Without ``--store`` a throwaway PostgreSQL
server is started in a temporary directory (Debian's postgresql binaries; see
accelopt_nb/store/pgtemp.py).

    python scripts/team_store_demo.py [--store postgresql://user@host/db] [--out FILE]
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import sys
import tempfile
import time
from pathlib import Path

from mcp import Client, StdioServerParameters

from accelopt_nb.kernels import kernel_path

# Bob's first step: the baseline with its three instructions fused into one activation (512-column tiles).
BOB_1 = '''"""silu: one fused activation per 512-column tile."""
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa

TILE_N = 512


@nki.jit
def kernel(x):
    P, J, N = x.shape
    out = nl.ndarray((P, J, N), dtype=x.dtype, buffer=nl.shared_hbm)
    for j in nl.affine_range(J):
        for c in nl.affine_range((N + TILE_N - 1) // TILE_N):
            width = min(TILE_N, N - c * TILE_N)
            t = nl.load(x[:, j, nl.ds(c * TILE_N, width)])
            nl.store(out[:, j, nl.ds(c * TILE_N, width)], value=nisa.activation(op=nl.silu, data=t))
    return out
'''
# Bob's second step: a whole row block per DMA.
BOB_2 = '''"""silu: one fused activation and one DMA each way per row block."""
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa


@nki.jit
def kernel(x):
    P, J, N = x.shape
    out = nl.ndarray((P, J, N), dtype=x.dtype, buffer=nl.shared_hbm)
    for j in nl.affine_range(J):
        t = nl.load(x[:, j, :])
        nl.store(out[:, j, :], value=nisa.activation(op=nl.silu, data=t))
    return out
'''


class Timeline:
    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.rows: list[tuple[float, float, str, str, str]] = []

    async def call(self, who: str, client, tool: str, **arguments):
        start = time.monotonic() - self.t0
        result = await client.call_tool(tool, arguments)
        data = result.structured_content
        end = time.monotonic() - self.t0
        if result.is_error:
            outcome = f"error {data['error']['code']}"
        elif tool in ("evaluate", "profile"):
            outcome = (f"{data['status']}, {data['latency_ms'] * 1e3:.2f} µs, {data['pct_peak']:.1f} % of peak"
                       + (f", {data['speedup_over_parent']:.2f}x over parent" if data.get("speedup_over_parent")
                          else "") + f" -> {data['kernel_id']}")
        elif tool == "best_kernels":
            outcome = ", ".join(f"{k['run_id']}/{k['kernel_id']} {k['latency_ms'] * 1e3:.2f} µs" for k in data["kernels"])
        elif tool == "memory":
            outcome = f"{len(data['items'])} lesson(s): " + "; ".join(i["summary"].splitlines()[0] for i in data["items"])
        else:
            outcome = "ok"
        self.rows.append((start, end, who, tool, outcome))
        return data


def _params(who: str, store: str, root: Path) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=[
        "-m", "accelopt_nb.cli", "mcp", "--run-dir", str(root / who), "--store", store, "--session", who,
        "--author", who])


async def alice(store: str, root: Path, tl: Timeline) -> None:
    async with Client(_params("alice", store, root)) as c:
        await tl.call("alice", c, "profile", problem="silu")
        good = await tl.call("alice", c, "evaluate", problem="silu", source=kernel_path("silu_fused").read_text(),
                             plan="Fuse exp, add and divide into one silu activation; 2048 columns per DMA.")
        await tl.call("alice", c, "add_memory", problem="silu", slow_kernel_id="baseline",
                      fast_kernel_id=good["kernel_id"],
                      summary="**Fuse the activation, then widen the DMAs**\nOne nisa.activation(op=nl.silu) "
                              "replaces exp + add + divide; 2048 columns per transfer.")


async def bob(store: str, root: Path, tl: Timeline) -> None:
    async with Client(_params("bob", store, root)) as c:
        first = await tl.call("bob", c, "evaluate", problem="silu", source=BOB_1,
                              plan="Fuse exp, add and divide into one nisa.activation(op=nl.silu).")
        await tl.call("bob", c, "evaluate", problem="silu", source=BOB_2, parent_kernel_id=first["kernel_id"],
                      plan="Move a whole row block per DMA instead of 512-column tiles.")
        await tl.call("bob", c, "memory", problem="silu")
        await tl.call("bob", c, "best_kernels", problem="silu", limit=3)


def _cli(*argv: str) -> str:
    from accelopt_nb.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        main(list(argv))
    return buf.getvalue().rstrip()


async def run(store: str, root: Path) -> Timeline:
    tl = Timeline()
    await asyncio.gather(alice(store, root, tl), bob(store, root, tl))
    return tl


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", help="a postgresql:// URL (default: a throwaway local server)")
    ap.add_argument("--out", type=Path, default=Path("docs/team_database_transcript.md"))
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="accelopt-team-"))
    with contextlib.ExitStack() as stack:
        store = a.store
        if store is None:
            from accelopt_nb.store.pgtemp import TempPostgres
            store = stack.enter_context(TempPostgres()).url
        tl = asyncio.run(run(store, root))
        from accelopt_nb.store import RunStore
        from accelopt_nb.store.queries import best_kernels

        with RunStore(store) as s:
            bob_best = [k for k in best_kernels(s, problem="silu", hw="trn1", limit=10) if k["run_id"] == "bob-silu-small"][0]
        runs = _cli("store", "runs", "--store", store)
        best = _cli("store", "best", "--store", store, "--problem", "silu", "--hw", "trn1")
        lineage = _cli("store", "lineage", "--store", store, "--run", "bob-silu-small", bob_best["kernel_id"])
    overlap = [r for r in tl.rows if r[2] == "alice"], [r for r in tl.rows if r[2] == "bob"]
    a0, a1 = min(r[0] for r in overlap[0]), max(r[1] for r in overlap[0])
    b0, b1 = min(r[0] for r in overlap[1]), max(r[1] for r in overlap[1])
    lines = ["# Two sessions, one PostgreSQL kernel database",
             "",
             "Recorded by `python scripts/team_store_demo.py`: a throwaway PostgreSQL server (Debian's binaries), and "
             "two `accelopt mcp` servers (sessions `alice` and `bob`, each with its own run directory) both started "
             "with `--store postgresql://accelopt@127.0.0.1:<port>/accelopt` and driven at the same time by the "
             "official `mcp` SDK client. One shared 2-core machine; latencies are the trn1 model's estimates "
             "(`small` preset).",
             "",
             f"Alice's calls ran from {a0:.1f} s to {a1:.1f} s, Bob's from {b0:.1f} s to {b1:.1f} s: they overlapped.",
             "",
             "## The calls, in order of completion", "",
             "| start s | end s | session | tool | result |", "|---:|---:|---|---|---|"]
    for start, end, who, tool, outcome in sorted(tl.rows, key=lambda r: r[1]):
        lines.append(f"| {start:.1f} | {end:.1f} | {who} | `{tool}` | {outcome} |")
    lines += ["", "## The database afterwards", "",
              "`accelopt store runs --store postgresql://...`", "", "```", runs, "```", "",
              "`accelopt store best --store postgresql://... --problem silu --hw trn1` (everyone's kernels)", "",
              "```", best, "```", "",
              f"`accelopt store lineage --store postgresql://... --run bob-silu-small {bob_best['kernel_id']}` "
              "(one recursive SQL query, `accelopt_nb.store.queries.LINEAGE_SQL`, the same on SQLite)", "",
              "```", lineage, "```", ""]
    a.out.write_text("\n".join(lines))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
