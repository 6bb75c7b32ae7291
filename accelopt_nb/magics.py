"""IPython magics: ``%accelopt`` / ``%%accelopt``, a thin layer over accelopt_nb's Python API.

Load with ``%load_ext accelopt_nb``. Subcommands::

    %%accelopt profile --problem silu [--preset small] [--hw trn1] [--timeline]
        (cell: an NKI kernel)      evaluate the cell's kernel: correctness, profile, timeline
    %accelopt open PROBLEM --base-url URL --model NAME [--preset smoke] [--shape-preset small]
                   [--run-dir DIR] [--resume] [--model-preset P] [--price KEY] [--cap-usd X]
    %accelopt step [plan|execute|evaluate|select|summarize]     one phase, or a whole iteration
    %%accelopt plan            (cell: your own plan; a line of --- separates several)
    %%accelopt kernel PLAN_ID [--only]   (cell: your kernel for that plan; the executor LLM
                                          writes the other plans' kernels unless --only)
    %accelopt run [-T N]       finish the run (or go to iteration N)
    %accelopt status | beam | memory | report
    %accelopt panel            buttons and text areas for the same steps (ipywidgets)

The open session is also bound to ``accelopt_session`` in the notebook's namespace, so every
Session method stays one attribute away.
"""
from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from IPython.core.magic import Magics, line_cell_magic, magics_class

from accelopt_nb.errors import AccelOptError, ConfigError

SESSION_NAME = "accelopt_session"
PHASES = ("plan", "execute", "evaluate", "select", "summarize")


class MagicUsageError(ConfigError):
    """A %accelopt command line that does not parse."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would exit the kernel
        raise MagicUsageError(f"%accelopt {self.prog}: {message}")


def _parser(prog: str) -> _Parser:
    return _Parser(prog=prog, add_help=False)


@dataclass
class Shown:
    """A result for the notebook: plain text for terminals, HTML for Jupyter, the value for code."""

    text: str
    html: str | None = None
    value: Any = None

    def _repr_mimebundle_(self, include=None, exclude=None):
        bundle = {"text/plain": self.text}
        if self.html:
            bundle["text/html"] = self.html
        return bundle

    def __repr__(self) -> str:
        return self.text


def _frame(rows: list[dict[str, Any]], columns: list[str]):
    import pandas as pd
    return pd.DataFrame([{c: r.get(c) for c in columns} for r in rows], columns=columns)


def _shown_frame(df, title: str) -> Shown:
    text = f"{title}\n{df.to_string(index=False)}" if len(df) else f"{title}: none"
    return Shown(text, f"<b>{title}</b>" + df.to_html(index=False), df)


@magics_class
class AccelOptMagics(Magics):
    """``%accelopt``: profile kernels and drive an AccelOpt session one step at a time."""

    def __init__(self, shell=None) -> None:
        super().__init__(shell)
        self.session: Any = None

    @line_cell_magic
    def accelopt(self, line: str, cell: str | None = None):
        argv = shlex.split(line)
        if not argv:
            return Shown(__doc__.split("Load with", 1)[1].strip())
        sub, rest = argv[0], argv[1:]
        handler = getattr(self, f"_cmd_{sub}", None)
        if handler is None:
            raise MagicUsageError(f"unknown %accelopt subcommand {sub!r}; one of: profile, open, step, plan, "
                                  "kernel, run, status, beam, memory, report, panel")
        return handler(rest, cell)

    # ---- kernels without a session ----------------------------------------------------------
    def _cmd_profile(self, argv: list[str], cell: str | None) -> Shown:
        from accelopt_nb.evaluation import EvalOptions, evaluate
        from accelopt_nb.perf import format_profile

        p = _parser("profile")
        p.add_argument("--problem", required=True)
        p.add_argument("--preset", default="small")
        p.add_argument("--hw", default="trn1", choices=("trn1", "trn2"))
        p.add_argument("--backend", default="simulator", choices=("simulator", "neuron"))
        p.add_argument("--no-adversarial", action="store_true")
        p.add_argument("--timeline", action="store_true", help="draw the engine timeline (simulator)")
        args = p.parse_args(argv)
        if not cell or not cell.strip():
            raise MagicUsageError("%%accelopt profile takes the kernel source as the cell body")
        result = evaluate(args.problem, cell, backend=args.backend, hw=args.hw, preset=args.preset,
                          options=EvalOptions(adversarial=not args.no_adversarial, kernel_filename="<cell>"),
                          cache=False)
        text = result.summary() + ("\n\n" + format_profile(result.profile) if result.profile else "")
        if args.timeline and result.profile:
            self._timeline(args.problem, args.preset, args.hw, cell)
        return Shown(text, f"<pre>{_escape(text)}</pre>", result)

    @staticmethod
    def _timeline(problem: str, preset: str, hw: str, source: str) -> None:
        import nkibench
        from IPython.display import display

        from accelopt_nb.perf import estimate
        from accelopt_nb.sim import SimOptions, load_kernel, simulate

        task = nkibench.get_problem(problem).task(preset)
        trace = simulate(load_kernel(source=source), *task.to_nki(task.get_inputs(seed=0)),
                         options=SimOptions(trace_only=True)).trace
        display(estimate(trace, hw=hw).timeline())

    # ---- sessions ------------------------------------------------------------------------------
    def _cmd_open(self, argv: list[str], cell: str | None) -> Shown:
        from accelopt_nb.search.launch import LaunchSpec, open_session

        p = _parser("open")
        p.add_argument("problem")
        p.add_argument("--run-dir", type=Path)
        p.add_argument("--preset", default="smoke")
        p.add_argument("--shape-preset", choices=("small", "paper"))
        p.add_argument("--base-url")
        p.add_argument("--model")
        p.add_argument("--model-preset")
        p.add_argument("--api-key-env")
        p.add_argument("--price")
        p.add_argument("--cap-usd", type=float)
        p.add_argument("--resume", action="store_true")
        p.add_argument("--run-id")
        args = p.parse_args(argv)
        if not args.model_preset and not (args.base_url and args.model):
            raise MagicUsageError("%accelopt open needs --model-preset, or --base-url and --model")
        model = {"base_url": args.base_url, "model": args.model, "model_preset": args.model_preset,
                 "api_key_env": args.api_key_env, "price": args.price}
        if self.session is not None:
            self.session.close()
        overrides = {"evaluation.shape_preset": args.shape_preset} if args.shape_preset else {}
        self.session = open_session(LaunchSpec(args.problem, run_dir=args.run_dir, model=model, preset=args.preset,
                                               overrides=overrides, run_id=args.run_id,
                                               resume="auto" if args.resume else "new", cap_usd=args.cap_usd))
        if self.shell is not None:
            self.shell.user_ns[SESSION_NAME] = self.session
        return self._cmd_status([], None)

    def _need_session(self) -> Any:
        if self.session is None:
            raise MagicUsageError("no open session: start one with %accelopt open PROBLEM --base-url ... --model ...")
        return self.session

    def _cmd_step(self, argv: list[str], cell: str | None) -> Shown:
        s = self._need_session()
        p = _parser("step")
        p.add_argument("phase", nargs="?", choices=PHASES)
        args = p.parse_args(argv)
        if args.phase is None:
            s.step()
            return self._cmd_status([], None)
        out = getattr(s, args.phase)()
        return self._views(args.phase, out)

    def _cmd_plan(self, argv: list[str], cell: str | None) -> Shown:
        s = self._need_session()
        manual = None
        if cell is not None and cell.strip():
            manual = [part.strip() for part in cell.split("\n---\n") if part.strip()]
        return self._views("plan", s.plan(manual=manual))

    def _cmd_kernel(self, argv: list[str], cell: str | None) -> Shown:
        s = self._need_session()
        p = _parser("kernel")
        p.add_argument("plan_id")
        p.add_argument("--only", action="store_true", help="no executor calls for the other plans")
        args = p.parse_args(argv)
        if not cell or not cell.strip():
            raise MagicUsageError("usage: %%accelopt kernel PLAN_ID, with the kernel source as the cell body")
        return self._views("execute", s.execute(manual={args.plan_id: cell}, llm=not args.only))

    def _cmd_run(self, argv: list[str], cell: str | None) -> Shown:
        s = self._need_session()
        p = _parser("run")
        p.add_argument("-T", "--iterations", type=int)
        args = p.parse_args(argv)
        report = s.run(args.iterations)
        text = report.to_text()
        return Shown(text, f"<pre>{_escape(text)}</pre>", report)

    def _cmd_report(self, argv: list[str], cell: str | None) -> Shown:
        from accelopt_nb.search.report import build_report
        report = build_report(self._need_session())
        text = report.to_text()
        return Shown(text, f"<pre>{_escape(text)}</pre>", report)

    def _cmd_status(self, argv: list[str], cell: str | None) -> Shown:
        s = self._need_session()
        base, best = s.baseline, s.best
        text = (f"{s!r}\n  baseline {base.latency_ms:.4g} ms ({_pct(base.pct_peak)} of peak); "
                f"best {best.kernel_id} {best.latency_ms:.4g} ms ({_pct(best.pct_peak)} of peak, "
                f"{base.latency_ms / best.latency_ms:.3f}x)")
        return Shown(text, f"<pre>{_escape(text)}</pre>", s)

    def _cmd_panel(self, argv: list[str], cell: str | None):
        from accelopt_nb.widgets import SessionPanel
        return SessionPanel(self._need_session())

    def _cmd_beam(self, argv: list[str], cell: str | None) -> Shown:
        return self._views("beam", self._need_session().beam_kernels())

    def _cmd_memory(self, argv: list[str], cell: str | None) -> Shown:
        df = self._need_session().memory.to_dataframe()
        return _shown_frame(df, "optimization memory")

    @staticmethod
    def _views(what: str, views: Any) -> Shown:
        rows = [v.__dict__ for v in views] if isinstance(views, list) else []
        if what == "plan":
            cols = ["plan_id", "iteration", "parent_id", "origin", "step"]
        elif what == "summarize":
            rows = [v.to_dict() if hasattr(v, "to_dict") else v.__dict__ for v in views]
            cols = [c for c in ("title", "speedup", "kind", "problem") if any(c in r for r in rows)] or ["title"]
        else:
            cols = ["kernel_id", "iteration", "plan_id", "origin", "status", "latency_ms", "pct_peak", "message"]
        return _shown_frame(_frame(rows, cols), f"{what}: {len(rows)}")


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1f}%"


def _escape(text: str) -> str:
    import html
    return html.escape(text)


def load_ipython_extension(ipython) -> None:
    ipython.register_magics(AccelOptMagics)


__all__ = ["AccelOptMagics", "MagicUsageError", "Shown", "load_ipython_extension", "AccelOptError"]
