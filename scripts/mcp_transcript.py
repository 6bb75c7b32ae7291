"""Record a transcript of an MCP client session with `accelopt mcp` (docs/mcp_transcript.md).

The client is the official SDK's, talking to the server over stdio exactly as a coding agent
does: list problems, profile the baseline, submit an improved kernel, get its verdict and % of
peak, submit a kernel that breaks an NKI rule and get the structured error, then the lineage and
a lesson for the memory. Long strings (sources, reference programs) are shortened in the record.

    python scripts/mcp_transcript.py [--out docs/mcp_transcript.md] [--run-dir DIR] [--store URL]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

from mcp import Client, StdioServerParameters

from accelopt_nb.kernels import kernel_path

BAD = kernel_path("silu_staged_256").read_text()   # breaks the 128-partition rule on line 11
PLAN = ("Replace the exp, add and divide (one ScalarE and two VectorE instructions per tile) by one fused "
        "nisa.activation(op=nl.silu), and move 2048 columns per DMA instead of 512.")
LESSON = ("**Fuse an element-wise chain into one activation**\n"
          "When a kernel computes a standard activation as several instructions (exp, add, divide for silu), "
          "one nisa.activation(op=nl.<fn>) does it in a single ScalarE pass, removing the intermediate tiles "
          "and two VectorE instructions per tile.\n"
          "Before: e = nisa.activation(op=nl.exp, data=t, scale=-1.0); y = nl.divide(t, nl.add(e, 1.0))\n"
          "After:  y = nisa.activation(op=nl.silu, data=t)")


def _short(value, limit=600):
    if isinstance(value, str):
        lines = value.splitlines()
        if len(value) > limit and len(lines) > 6:
            return "\n".join(lines[:6]) + f"\n... ({len(lines)} lines, {len(value)} characters)"
        if len(value) > limit:
            return value[:limit] + f"... ({len(value)} characters)"
        return value
    if isinstance(value, list):
        return [_short(v, limit) for v in value]
    if isinstance(value, dict):
        return {k: _short(v, limit) for k, v in value.items()}
    return value


class Recorder:
    def __init__(self) -> None:
        self.parts: list[str] = []
        self.t0 = time.monotonic()

    def note(self, text: str) -> None:
        self.parts.append(text + "\n")

    async def call(self, client, tool: str, shown: dict | None = None, trim=None, **arguments):
        t = time.monotonic()
        result = await client.call_tool(tool, arguments)
        data = result.structured_content
        shown_args = _short(shown if shown is not None else arguments, 300)
        body = trim(data) if trim else data
        self.parts.append(f"**→ `{tool}`** {json.dumps(shown_args)}\n\n"
                          f"**← isError: {str(result.is_error).lower()}** ({time.monotonic() - t:.1f} s)\n\n"
                          f"```json\n{json.dumps(_short(body), indent=2)}\n```\n")
        return result.is_error, data


def _trim_problems(d):
    rows = d["problems"]
    return {"problems": [rows[i] for i in range(len(rows)) if rows[i]["name"] in ("matmul", "silu")],
            "...": f"{len(rows)} problems in all", "hw": d["hw"], "default_shapes": d["default_shapes"]}


def _trim_verdict(d):
    d = dict(d)
    if "checks" in d:
        d["checks"] = [f"{c['kind']} {c['index']}: {'pass' if c['passed'] else 'FAIL'} "
                       f"(rel. L2 error {c['max_rel_error']:.2e})" if c["max_rel_error"] is not None else
                       f"{c['kind']} {c['index']}: {'pass' if c['passed'] else 'FAIL'}" for c in d["checks"]]
    if d.get("error", {}) and isinstance(d["error"], dict) and "verdict" in d["error"]:
        d["error"] = {**d["error"], "verdict": "(the judge's full verdict: status, message, checks, log)"}
    return d


async def main(out: Path, run_dir: Path, store: str | None) -> None:
    extra = ["--store", store] if store else []
    params = StdioServerParameters(command=sys.executable, args=["-m", "accelopt_nb.cli", "mcp", "--run-dir",
                                                                 str(run_dir), "--session", "transcript",
                                                                 "--author", "agent", *extra])
    rec = Recorder()
    async with Client(params) as client:
        tools = (await client.list_tools()).tools
        rec.note("## Connect\n\n`accelopt mcp` over stdio; the server lists its tools:\n")
        rec.note("\n".join(f"- `{t.name}`: {t.description.split('.')[0]}." for t in tools) + "\n")

        rec.note("## 1. List the problems (two of fourteen shown)\n")
        await rec.call(client, "list_problems", trim=_trim_problems)
        rec.note("## 2. Read the problem\n")
        await rec.call(client, "show_problem", problem="silu")
        rec.note("## 3. Profile the baseline\n")
        _, base = await rec.call(client, "profile", problem="silu", trim=_trim_verdict)
        rec.note("## 4. Look up the API the plan needs\n")
        await rec.call(client, "nki_api", name="nisa.activation",
                       trim=lambda d: {"query": d["query"], "entries": [{k: e[k] for k in (
                           "api", "module", "signature", "simulator", "rules")} for e in d["entries"]]})
        rec.note("## 5. Submit an improved kernel: verdict, % of peak, speedup\n")
        fused = kernel_path("silu_fused").read_text()
        _, good = await rec.call(client, "evaluate", shown={"problem": "silu", "source": fused, "plan": PLAN,
                                                            "parent_kernel_id": "baseline"},
                                 trim=_trim_verdict, problem="silu", source=fused, plan=PLAN,
                                 parent_kernel_id="baseline")
        rec.note("## 6. Submit a kernel that breaks an NKI rule: the structured error\n")
        _, bad = await rec.call(client, "evaluate", trim=_trim_verdict, problem="silu", source=BAD,
                                parent_kernel_id=good["kernel_id"], filename="staged.py",
                                plan="Stage two row blocks per tile.")
        rec.note("## 7. The lineage of what was submitted\n")
        await rec.call(client, "lineage", kernel_id=bad["error"]["kernel_id"])
        rec.note("## 8. The summarizer's lesson, and the memory\n")
        await rec.call(client, "add_memory", shown={"problem": "silu", "slow_kernel_id": "baseline",
                                                    "fast_kernel_id": good["kernel_id"], "summary": LESSON},
                       problem="silu", slow_kernel_id="baseline", fast_kernel_id=good["kernel_id"], summary=LESSON)
        await rec.call(client, "memory", problem="silu")
        rec.note("## 9. Bad input gets a structured error too\n")
        await rec.call(client, "evaluate", shown={"problem": "softmax", "source": fused}, problem="softmax",
                       source=fused)
        await rec.call(client, "simulate", shown={"problem": "silu", "source": "<300 KB of text>"},
                       problem="silu", source="#" * 300_000)
    head = ("# An MCP client session with `accelopt mcp`\n\n"
            "Recorded by `python scripts/mcp_transcript.py` with the official `mcp` SDK's client over stdio "
            f"(server and client on one shared 2-core machine; wall times are that machine's). Latencies are the "
            "trn1 performance model's estimates for the `small` preset. Long strings are shortened.\n\n"
            f"Baseline {base['latency_ms'] * 1e3:.2f} µs ({base['pct_peak']:.1f} % of peak) -> improved kernel "
            f"{good['latency_ms'] * 1e3:.2f} µs ({good['pct_peak']:.1f} % of peak), "
            f"{good['speedup_over_parent']:.2f}x; the rule violation answered `kernel_error` at "
            f"{bad['error']['kernel_error']['file']}:{bad['error']['kernel_error']['line']} "
            f"({bad['error']['kernel_error']['api']}).\n\n")
    out.write_text(head + "\n".join(rec.parts))
    print(f"wrote {out} ({time.monotonic() - rec.t0:.0f} s)")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("docs/mcp_transcript.md"))
    ap.add_argument("--run-dir", type=Path, default=None, help="default: a fresh temporary directory")
    ap.add_argument("--store", help="a store URL or path (default: the run directory's SQLite file)")
    a = ap.parse_args()
    run_dir = a.run_dir or Path(tempfile.mkdtemp(prefix="accelopt-mcp-transcript-"))
    asyncio.run(main(a.out, run_dir, a.store))
