"""The MCP server: the :class:`~accelopt_nb.mcp.environment.Environment`'s tools over the Model
Context Protocol (the official ``mcp`` SDK, version 2), on stdio or on streamable HTTP (loopback).

Every tool answers with a JSON object, both as structured content and as text. A call that cannot
be done (bad or unknown input, a kernel that does not build) answers ``isError: true`` with
``{"error": {"code": ..., "message": ..., ...details}}``; argument type errors the SDK catches
before the tool runs are turned into the same shape (code ``invalid_argument``).
"""
from __future__ import annotations

import json
import logging
import math
from typing import Annotated, Any, Callable, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent
from pydantic import Field, ValidationError

from accelopt_nb.evaluation.job import FIDELITIES
from accelopt_nb.mcp.environment import BASELINE_ID, Environment, ToolFailure
from accelopt_nb.perf.hardware import presets as hardware_names

__all__ = ["build_server", "serve", "TOOL_NAMES", "SERVER_NAME"]

SERVER_NAME = "accelopt-nkibench"
log = logging.getLogger("accelopt_nb.mcp")

INSTRUCTIONS = """\
NKIBench as an environment: optimize AWS Trainium NKI kernels without Trainium. Kernels run on a CPU
simulator; latency and neuron-profile fields come from a Trainium performance model (estimates, with
their error bar in `estimate_note`). Start with list_problems and show_problem, profile the baseline,
then submit candidate kernels with evaluate (source text, the parent kernel id and the plan you
followed). Look up an nl/nisa call with nki_api. Every kernel you evaluate is stored with its lineage;
best_kernels, lineage and memory read the whole store, which a team may share. `accelopt mcp --skill`
prints the AccelOpt workflow (planner, executor, summarizer, beam search, memory) for these tools."""

Problem = Annotated[str, Field(description="NKIBench problem name (see list_problems), e.g. 'silu'")]
Shapes = Annotated[str | None, Field(
    description="shape preset: 'small' (default; seconds on a CPU) or 'paper' (the paper's shapes: use "
                "fidelity 'screen' there, which checks at the small shape and estimates the latency at paper)")]
# the choices come from their homes: the hardware registry and the evaluation service's fidelity levels
Hw = Annotated[Literal[tuple(hardware_names())] | None, Field(description="hardware model (default: the server's, trn1)")]
Fid = Annotated[Literal[FIDELITIES] | None, Field(
    description="judge fidelity: full (default; every check at the preset), screen (checks at the small "
                "shape, latency from a trace-only run: fast, for many candidates), confirm (full checks, for "
                "the kernels that matter)")]
Source = Annotated[str, Field(description="the kernel module's Python source: defines `kernel`, decorated "
                                          "with @nki.jit, importing neuronxcc.nki as the baseline does")]
KernelId = Annotated[str, Field(description="a kernel id: 'baseline' or one returned by evaluate/best_kernels")]
RunId = Annotated[str | None, Field(description="the run holding the kernel (only needed for another session's)")]
Filename = Annotated[str, Field(description="a label for error messages, e.g. 'kernel.py' (no directories)")]


def _plain(obj: Any) -> Any:
    """Strict JSON: non-finite floats as strings ('inf', 'nan'), NumPy scalars as Python ones."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else str(obj)
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if obj is None or isinstance(obj, (str, bool, int)):
        return obj
    if hasattr(obj, "item"):
        return _plain(obj.item())
    return str(obj)


def _result(payload: dict[str, Any], *, is_error: bool = False) -> CallToolResult:
    payload = _plain(payload)
    text = json.dumps(payload, indent=2, allow_nan=False)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=payload,
                          is_error=is_error)


def _call(fn: Callable[..., dict[str, Any]], **kwargs: Any):
    try:
        return _result(fn(**kwargs))
    except ToolFailure as exc:
        return _result(exc.to_dict(), is_error=True)
    except Exception as exc:  # a bug or an infrastructure failure: still a structured answer
        log.exception("tool %s failed", getattr(fn, "__name__", fn))
        return _result({"error": {"code": "internal_error", "message": f"{type(exc).__name__}: {exc}"}},
                       is_error=True)


def build_server(env: Environment) -> MCPServer:
    """An ``MCPServer`` whose tools are ``env``'s."""

    class _Server(MCPServer):
        async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None):
            try:
                return await super().call_tool(name, arguments, context)
            except ToolError as exc:
                cause = exc.__cause__
                if isinstance(cause, ValidationError):
                    problems = [{"field": ".".join(str(p) for p in e["loc"]), "message": e["msg"]}
                                for e in cause.errors()]
                    return _result({"error": {"code": "invalid_argument", "message": f"invalid arguments to {name}",
                                              "problems": problems}}, is_error=True)
                if name not in TOOL_NAMES:
                    return _result({"error": {"code": "unknown_tool", "message": f"no tool {name!r}",
                                              "tools": list(TOOL_NAMES)}}, is_error=True)
                raise

    from accelopt_nb import __version__

    server = _Server(SERVER_NAME, instructions=INSTRUCTIONS, version=__version__)

    def tool(fn: Callable[..., CallToolResult]) -> Callable[..., CallToolResult]:
        # The docstring, unwrapped, is what the agent reads about the tool.
        server.add_tool(fn, description=" ".join((fn.__doc__ or "").split()))
        return fn

    @tool
    def list_problems() -> CallToolResult:
        """The NKIBench problems: name, one-line summary, shapes per preset, tolerance, and the peak
        (roofline) latency per preset with what bounds it (memory, mm or vec)."""
        return _call(env.list_problems)

    @tool
    def show_problem(problem: Problem, shapes: Shapes = None) -> CallToolResult:
        """One problem in full: the NumPy reference program, the baseline NKI kernel (id 'baseline'), the
        input/output layouts, shapes, tolerance and the peak latency per hardware."""
        return _call(env.show_problem, problem=problem, shapes=shapes)

    @tool
    def simulate(problem: Problem, source: Source, shapes: Shapes = None,
                 seed: Annotated[int, Field(description="input seed")] = 42,
                 filename: Filename = "kernel.py") -> CallToolResult:
        """Run a kernel once on the simulator (one seed, no adversarial inputs) and compare with the
        reference: a quick check while writing a kernel. Not recorded; evaluate gives the verdict."""
        return _call(env.simulate, problem=problem, source=source, shapes=shapes, seed=seed, filename=filename)

    @tool
    def profile(problem: Problem, kernel_id: KernelId = BASELINE_ID, run_id: RunId = None, shapes: Shapes = None,
                hw: Hw = None, fidelity: Fid = None,
                explain: Annotated[bool, Field(description="add what each profile field means")] = False
                ) -> CallToolResult:
        """The profile of a stored kernel (the baseline by default): latency, % of peak and its bound, and
        the neuron-profile summary fields (HBM/SBUF/PSUM bytes, spills, FLOPs, engine and DMA activity),
        from the sandboxed judge."""
        return _call(env.profile, problem=problem, kernel_id=kernel_id, run_id=run_id, shapes=shapes, hw=hw,
                     fidelity=fidelity, explain=explain)

    @tool
    def evaluate(problem: Problem, source: Source,
                 parent_kernel_id: Annotated[str, Field(description="the kernel this one was derived from")]
                 = BASELINE_ID,
                 plan: Annotated[str | None, Field(description="the one-step plan this kernel implements")] = None,
                 shapes: Shapes = None, hw: Hw = None, fidelity: Fid = None,
                 filename: Filename = "kernel.py") -> CallToolResult:
        """Submit a candidate kernel to the judge: static check, then in a sandbox the paper's five seeds and
        adversarial inputs against the tolerance, then the profile. Returns the verdict (status, per-check
        relative errors), latency, % of peak, speedup over the parent and the baseline, and the new
        kernel's id; the kernel is stored with its parent and plan. A kernel that does not build answers
        an error with the file, line, API and the NKI rule broken."""
        return _call(env.evaluate, problem=problem, source=source, parent_kernel_id=parent_kernel_id, plan=plan,
                     shapes=shapes, hw=hw, fidelity=fidelity, filename=filename)

    @tool
    def nki_api(name: Annotated[str, Field(description="an nl/nisa call, e.g. 'nisa.nc_matmul' or 'nl.load'")],
                front_end: Annotated[Literal["neuronxcc", "nki", "both"], Field(
                    description="neuronxcc.nki (what NKIBench kernels use; default), the standalone nki, or both")]
                = "neuronxcc") -> CallToolResult:
        """The reference of one NKI call: its documented signature, whether the simulator supports it (and
        which arguments it refuses), and the NKI rules that involve it."""
        return _call(env.nki_api, name=name, front_end=front_end)

    @tool
    def best_kernels(problem: Annotated[str | None, Field(description="only this problem")] = None,
                     hw: Hw = None, fidelity: Fid = None,
                     limit: Annotated[int, Field(description="how many, 1-100")] = 5,
                     include_source: Annotated[bool, Field(description="include each kernel's source")] = False
                     ) -> CallToolResult:
        """The fastest correct kernels in the whole run store (every session's, a team's when shared), with
        latency and % of peak, fastest first."""
        return _call(env.best_kernels, problem=problem, hw=hw, fidelity=fidelity, limit=limit,
                     include_source=include_source)

    @tool
    def get_kernel(kernel_id: KernelId, problem: Annotated[str | None, Field(description="its problem")] = None,
                   run_id: RunId = None) -> CallToolResult:
        """A stored kernel: source, parent, the plan that produced it, and every evaluation (hw, fidelity)."""
        return _call(env.get_kernel, kernel_id=kernel_id, problem=problem, run_id=run_id)

    @tool
    def lineage(kernel_id: KernelId, problem: Annotated[str | None, Field(description="its problem")] = None,
                run_id: RunId = None, hw: Hw = None) -> CallToolResult:
        """A kernel's ancestry from the baseline: each step's plan, status, latency, % of peak and speedup
        over its parent."""
        return _call(env.lineage, kernel_id=kernel_id, problem=problem, run_id=run_id, hw=hw)

    @tool
    def memory(problem: Annotated[str | None, Field(description="only this problem")] = None,
               limit: Annotated[int, Field(description="how many, 1-100 (AccelOpt keeps 16)")] = 16
               ) -> CallToolResult:
        """The optimization memory: the newest lessons (slow -> fast kernel pairs, their speedup and what
        changed), from every run in the store. Read it before planning."""
        return _call(env.memory, problem=problem, limit=limit)

    @tool
    def add_memory(problem: Problem, slow_kernel_id: KernelId, fast_kernel_id: KernelId,
                   summary: Annotated[str, Field(description="first line: a short title; then the change, "
                                                             "in general terms, with the code before and after")],
                   shapes: Shapes = None, hw: Hw = None) -> CallToolResult:
        """Record a lesson from two evaluated kernels of this session (the speedup is computed from their
        stored latencies on hw). Write it so it helps on other kernels, too."""
        return _call(env.add_memory, problem=problem, slow_kernel_id=slow_kernel_id,
                     fast_kernel_id=fast_kernel_id, summary=summary, shapes=shapes, hw=hw)

    @tool
    def session_info() -> CallToolResult:
        """This session: its id, run directory, store (database), defaults, input limits and runs."""
        return _call(env.session_info)

    return server


TOOL_NAMES = ("list_problems", "show_problem", "simulate", "profile", "evaluate", "nki_api", "best_kernels",
              "get_kernel", "lineage", "memory", "add_memory", "session_info")


def serve(env: Environment, transport: str = "stdio", *, host: str = "127.0.0.1", port: int = 8765,
          path: str = "/mcp") -> None:
    """Run the server until its client disconnects (stdio) or it is interrupted (HTTP)."""
    server = build_server(env)
    if transport == "stdio":
        server.run("stdio")
    elif transport == "http":
        server.run("streamable-http", host=host, port=port, streamable_http_path=path)
    else:
        raise ValueError(f"unknown transport {transport!r}; choose stdio or http")
