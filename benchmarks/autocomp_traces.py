"""Hardware-measured kernels the simulator must not refuse: autocomp's published trn1 optimization traces.

github.com/ucb-bar/autocomp publishes six LLM optimization traces of NKI 0.1 kernels
(``examples/trn-tutorial/{1_gemm,2_gemm,3_mamba,4_attention,5_sd_attention}_trace.py``,
``examples/trn-advanced/4_conv1d_trace.py``): nested ``CodeCandidate(parent=..., code='''...''', score=ms)``
expressions, every candidate compiled, checked against its trace's baseline by autocomp's harness and timed on a
trn1.2xlarge. So a candidate the simulator stops with a rule or support error is a false rejection, unless the
published text itself is damaged (a syntax error, a name lost).

    python benchmarks/autocomp_traces.py --autocomp DIR [--only attention,conv1d] [--values] [--json OUT]

Each candidate runs trace-only at its harness's shapes; ``--values`` also runs it with values on random inputs
and compares with the trace's baseline (step 0) at the harness's tolerance (atol 1e-2). The files are parsed,
never executed; nothing of autocomp is copied here (the shapes below are read from its harnesses).
"""
from __future__ import annotations

import argparse
import ast
import json
import sys
import time
import warnings
from pathlib import Path

import ml_dtypes
import numpy as np

from accelopt_nb.errors import KernelLoadError
from accelopt_nb.sim import SimOptions, load_kernel, simulate

# what a candidate's code assumes is imported (its harness imports these)
HEADER = ("import math\nimport numpy as np\nimport neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\n"
          "import neuronxcc.nki.isa as nisa\nimport neuronxcc.nki.typing as nt\n"
          "import neuronxcc.nki.compiler as ncc\nfrom neuronxcc.nki.language import par_dim\n\n")
BF16 = ml_dtypes.bfloat16

# trace file -> the harness's input shapes and dtype, and keyword arguments
TRACES: dict[str, tuple[list[tuple[int, ...]], object, dict]] = {
    "examples/trn-tutorial/1_gemm_trace.py": ([(8192, 4096), (8192, 8192)], BF16, {}),
    "examples/trn-tutorial/2_gemm_trace.py": ([(8192, 4096), (8192, 8192)], BF16, {}),
    "examples/trn-tutorial/3_mamba_trace.py": ([(1, 256, 2048), (1, 256, 2048), (256, 16), (1, 16, 2048),
                                               (1, 16, 2048)], np.float32, {}),
    "examples/trn-tutorial/4_attention_trace.py": ([(128, 4096)] * 3, BF16, {}),
    "examples/trn-tutorial/5_sd_attention_trace.py": ([(4096, 64)] * 3, np.float32, {}),
    "examples/trn-advanced/4_conv1d_trace.py": ([(8, 512, 1, 2048), (512, 1, 1, 3)], np.float32,
                                               {"padding": ((0, 0), (1, 1))}),
}
ATOL = 1e-2   # autocomp's harnesses: np.allclose(candidate, baseline, atol=1e-2)
HW = "trn1"   # every candidate was timed on a trn1.2xlarge: simulated with trn1's semantics and API availability
# damage in the published text that still parses: read by hand (a comment swallowed an ``if tail > 0:`` line,
# so the tail's tile is allocated with width 0)
DAMAGED = {"examples/trn-tutorial/3_mamba_trace.py#7": "a comment swallowed an `if tail > 0:` line"}
PYTHON_ERROR = "kernel raised a Python error while tracing"   # a name the damaged text lost (NameError, ...)


def candidates(path: Path) -> list[tuple[str, float]]:
    """(code, measured ms) of each candidate of a trace file, baseline first."""
    node = ast.parse(path.read_text()).body[0].value
    out = []
    while isinstance(node, ast.Call):
        kw = {k.arg: k.value for k in node.keywords}
        out.append((ast.literal_eval(kw["code"]), float(ast.literal_eval(kw["score"]))))
        node = kw.get("parent")
    return out[::-1]


def _run(code: str, name: str, inputs: list, kwargs: dict, trace_only: bool):
    kernel = load_kernel(source=HEADER + code, name="test", filename=name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return simulate(kernel, *inputs, options=SimOptions(trace_only=trace_only, hw=HW), **kwargs)


def check(root: Path, only: list[str], values: bool) -> list[dict]:
    rows = []
    for rel, (shapes, dtype, kwargs) in TRACES.items():
        if only and not any(o in rel for o in only):
            continue
        steps = candidates(root / rel)
        zeros = [np.zeros(s, dtype) for s in shapes]
        rng = np.random.default_rng(0)
        rand = [((rng.random(s) - 0.5) * 2).astype(dtype) for s in shapes]
        baseline = None
        for i, (code, ms) in enumerate(steps):
            name = f"{rel}#{i}"
            row = {"candidate": name, "measured_ms": ms}
            t0 = time.perf_counter()
            try:
                res = _run(code, name, zeros, kwargs, True)
                row.update(status="runs", instructions=len(res.trace.instructions))
            except KernelLoadError as e:
                row.update(status="damaged text", error=str(e).splitlines()[0])
            except Exception as e:   # noqa: BLE001 - every outcome is reported
                damaged = getattr(e, "rule", "") == PYTHON_ERROR or name in DAMAGED
                row.update(status="damaged text" if damaged else "refused",
                           error=(f"{DAMAGED[name]}: " if name in DAMAGED else "") + str(e).splitlines()[0])
            if values and row["status"] == "runs":
                out = np.asarray(_run(code, name, rand, kwargs, False).output, np.float32)
                if i == 0:
                    baseline = out
                row["max_abs_diff_vs_baseline"] = float(np.max(np.abs(out - baseline)))
                row["matches_baseline"] = bool(np.allclose(out, baseline, atol=ATOL))
            row["seconds"] = round(time.perf_counter() - t0, 1)
            rows.append(row)
            print(f"{row['status']:13s} {name:48s} {ms:8.3f} ms  " + (
                f"max|diff| {row['max_abs_diff_vs_baseline']:.3g}  " if "max_abs_diff_vs_baseline" in row else "")
                + row.get("error", f"{row.get('instructions', '')} instructions")[:110], flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--autocomp", type=Path, required=True, help="a checkout of github.com/ucb-bar/autocomp")
    ap.add_argument("--only", default="", help="comma-separated substrings of trace file names")
    ap.add_argument("--values", action="store_true", help="also compare values with the trace's baseline")
    ap.add_argument("--json", type=Path, help="write every outcome to this JSON file")
    args = ap.parse_args(argv)
    rows = check(args.autocomp, [o for o in args.only.split(",") if o], args.values)
    counts = {s: sum(r["status"] == s for r in rows) for s in ("runs", "refused", "damaged text")}
    print(f"\n{len(rows)} candidates: {counts['runs']} run, {counts['refused']} refused by the simulator "
          f"(false rejections: every candidate was compiled and timed on trn1), {counts['damaged text']} with "
          "damaged published text")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
