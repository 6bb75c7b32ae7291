"""IPython magics ``%accelopt`` / ``%%accelopt``: profile kernels and drive an AccelOpt session.

Load with ``%load_ext accelopt_nb``. ``%accelopt help [SUBCOMMAND]`` (or ``SUBCOMMAND --help``)
shows the options of each subcommand::

    %%accelopt profile --problem P [--shapes small] [--timeline]   evaluate the cell's kernel
    %accelopt open PROBLEM --base-url URL --model NAME | --model-preset P   [--resume] [--cassette F]
                                     (no model on the line: %config AccelOptMagics.base_url/model/...,
                                      else $ACCELOPT_BASE_URL/$ACCELOPT_MODEL/$ACCELOPT_MODEL_PRESET)
    %accelopt fake-model [--stop]    start the offline FAKE model (not a real LLM); open then uses it
    %accelopt llm check|presets|prices   is the endpoint usable; the model presets; the price table
    %accelopt step [plan|execute|evaluate|select|summarize]        one phase, or the rest of the iteration
    %%accelopt step                  (cell: this step's settings in YAML, see `help step`)
    %%accelopt plan                  (cell: your plan(s); a line of --- separates several)
    %%accelopt kernel PLAN_ID [--only]   (cell: your kernel for that plan)
    %accelopt run [-T N]             finish the run (or go to iteration N); writes best kernel + report
    %accelopt status | beam | leaderboard | plans [ITER] | diff A B | plot | report
    %accelopt show KERNEL | best [--save PATH]   a kernel's source, plan and evaluation; the best one
    %accelopt memory [save PATH | load PATH]
    %accelopt panel                  buttons, progress and views for the same steps (ipywidgets)
    %accelopt close                  close the session (the run store keeps everything; --resume reopens)

Errors are one line (add ``--debug``, or ``%xmode verbose``, for the traceback). A step that
loses LLM calls says so in red, with the first reason. The open session is also bound to
``accelopt_session`` in the notebook's namespace.
"""
from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path
from typing import Any, Callable

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from traitlets import Unicode

from accelopt_nb.errors import AccelOptError, ConfigError
from accelopt_nb.notebook import display as d
from accelopt_nb.notebook import endpoint
from accelopt_nb.notebook.progress import LiveProgress, StepOutcome
from accelopt_nb.notebook.stepcell import StepSettings, run_step
from accelopt_nb.renamed import add_renamed

SESSION_NAME = "accelopt_session"


class MagicUsageError(ConfigError):
    """A %accelopt command that does not parse, or that the session's state refuses.

    The magic re-raises it (and every other AccelOptError) as IPython's own ``UsageError``, which
    IPython shows as one line without a traceback; ``--debug`` or ``%xmode verbose`` keep the original.
    """


class AccelOptUsageError(UsageError):
    """What the person sees when a %accelopt command fails: one line, no traceback.

    Not IPython's plain ``UsageError``, which a Jupyter kernel reports with an empty error name and
    value (papermill would then fail without the reason): ``_render_traceback_`` gives the one line
    as the traceback, and the kernel reports the name and the message.
    """

    def _render_traceback_(self) -> list[str]:
        return [f"\x1b[31m{self}\x1b[0m"]


class _HelpShown(Exception):
    """``--help`` was given: carries the help text instead of running the command."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would exit the kernel
        raise MagicUsageError(f"{self.prog}: {message} (see {self.prog} --help)")

    def print_help(self, file=None):
        raise _HelpShown(self.format_help())

    def exit(self, status=0, message=None):
        raise MagicUsageError(message or f"{self.prog}: exit {status}")


def _parser(prog: str, description: str) -> _Parser:
    p = _Parser(prog=f"%accelopt {prog}", description=description, add_help=True)
    p.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    return p


# ---- the subcommands' parsers: one place for their options, their help and their completion ------------
def _p_profile() -> _Parser:
    p = _parser("profile", "Evaluate the cell's NKI kernel on an NKIBench problem: correctness, latency, % of peak, "
                           "profile; --timeline draws the engine timeline.")
    p.add_argument("--problem", required=True, help="NKIBench problem name")
    from accelopt_nb.evaluation.backends import backend_names
    from accelopt_nb.perf.hardware import presets as hardware_names
    from nkibench.problem import PRESETS
    p.add_argument("--shapes", default="small", choices=PRESETS, help="shape preset (default small)")
    add_renamed(p, "--preset", "--shapes", dest="shapes", choices=PRESETS)
    p.add_argument("--hw", default="trn1", choices=hardware_names())
    p.add_argument("--backend", default="simulator", choices=backend_names())
    p.add_argument("--no-adversarial", action="store_true", help="skip the adversarial input checks")
    p.add_argument("--timeline", action="store_true", help="draw the engine timeline (simulator)")
    return p


def _p_open() -> _Parser:
    p = _parser("open", "Open (or --resume) a search session; the endpoint is checked first. Without a model on "
                        "the line: %config AccelOptMagics.base_url/model/model_preset/price, else the environment "
                        "($ACCELOPT_BASE_URL, $ACCELOPT_MODEL, $ACCELOPT_MODEL_PRESET, $ACCELOPT_PRICE); "
                        "--resume alone reuses the run's own model.")
    p.add_argument("problem", help="NKIBench problem name")
    p.add_argument("--run-dir", type=Path, help="run directory: its store, memory and report files "
                                                "(default runs/PROBLEM)")
    p.add_argument("--store", metavar="PATH_OR_URL",
                   help="the run store, if not RUN_DIR/accelopt.sqlite: a SQLite file, or a postgresql:// URL "
                        "shared with others (resuming there needs --run-id)")
    p.add_argument("--preset", default="smoke", help="search preset (smoke, paper, or a YAML file)")
    from nkibench.problem import PRESETS
    p.add_argument("--shapes", choices=PRESETS, help="problem shape preset (default: the search preset's)")
    add_renamed(p, "--shape-preset", "--shapes", dest="shapes", choices=PRESETS)
    p.add_argument("--base-url")
    p.add_argument("--model")
    p.add_argument("--model-preset", help="a model preset's name, or a YAML file (FILE.yaml[:NAME])")
    p.add_argument("--api-key-env")
    p.add_argument("--price", help="price-table key for the ledger")
    p.add_argument("--seed", type=int, help="the search's seed, and every LLM call's (derived per call)")
    p.add_argument("--extra-body", metavar="JSON", help="settings sent in every request's body (vLLM top_k, ...)")
    p.add_argument("--cap-usd", type=float)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--allow-model-change", action="store_true",
                   help="resume a run with another model than it was made with (refused otherwise; recorded)")
    p.add_argument("--run-id")
    p.add_argument("--cassette", type=Path, help="record/replay LLM traffic to this JSONL file")
    p.add_argument("--cassette-mode", choices=("record", "replay", "auto"), default="auto")
    p.add_argument("--skip-check", action="store_true", help="do not check the endpoint first")
    return p


def _p_step() -> _Parser:
    p = _parser("step", "Run one phase, or what remains of the current iteration. As a cell magic the body holds "
                        "this step's settings in YAML: phase, B, N, K, model_preset, temperature, plans (your "
                        "plans), kernels ({plan_id: source}), lessons ([{title, summary}]), llm (false: no LLM "
                        "calls for what you did not write). Settings apply to this step only.")
    from accelopt_nb.search.state import PHASES
    p.add_argument("phase", nargs="?", choices=PHASES)
    return p


def _p_llm() -> _Parser:
    p = _parser("llm", "LLM endpoints: `check` (reachable, model listed, one tiny completion; default: the open "
                       "session's model, else the endpoint default), `presets` (the model presets), `prices` "
                       "(the dated price table, USD per 1M tokens).")
    p.add_argument("action", choices=("check", "presets", "prices"))
    p.add_argument("--base-url")
    p.add_argument("--model")
    p.add_argument("--model-preset")
    p.add_argument("--api-key-env")
    p.add_argument("--max-tokens", type=int, default=512, help="output limit of the test completion")
    return p


def _simple(name: str, description: str, setup: Callable[[_Parser], None] | None = None) -> Callable[[], _Parser]:
    def build() -> _Parser:
        p = _parser(name, description)
        if setup is not None:
            setup(p)
        return p
    return build


PARSERS: dict[str, Callable[[], _Parser]] = {
    "profile": _p_profile,
    "open": _p_open,
    "step": _p_step,
    "plan": _simple("plan", "Play the planner: the cell holds your plan(s), a line of --- between several."),
    "kernel": _simple("kernel", "Play the executor: the cell holds your kernel for PLAN_ID; the executor writes "
                                "the other plans' kernels unless --only.",
                      lambda p: (p.add_argument("plan_id"), p.add_argument("--only", action="store_true",
                                                                           help="no executor calls"))),
    "run": _simple("run", "Run to the config's T iterations (or -T N); writes the best kernel and the report.",
                   lambda p: p.add_argument("-T", "--iterations", type=int)),
    "status": _simple("status", "Where the session is: iteration, next step, baseline and best."),
    "beam": _simple("beam", "The current beam's kernels."),
    "leaderboard": _simple("leaderboard", "Every evaluated kernel, fastest first, with speedup and % of peak.",
                           lambda p: p.add_argument("--top", type=int)),
    "plans": _simple("plans", "The planner's text and reasoning for each plan of an iteration.",
                     lambda p: p.add_argument("iteration", nargs="?", type=int)),
    "diff": _simple("diff", "Two kernels side by side (default: baseline vs best).",
                    lambda p: (p.add_argument("a", nargs="?"), p.add_argument("b", nargs="?"))),
    "plot": _simple("plot", "Best speedup per iteration of this session."),
    "memory": _simple("memory", "Show the optimization memory, or save/load it as JSON.",
                      lambda p: (p.add_argument("action", nargs="?", choices=("show", "save", "load"),
                                                default="show"), p.add_argument("path", nargs="?", type=Path))),
    "report": _simple("report", "The run's report; writes best_kernel-RUN.py and report-RUN.json like the CLI.",
                      lambda p: p.add_argument("--no-files", action="store_true")),
    "panel": _simple("panel", "Buttons, live progress and views for driving the session (ipywidgets)."),
    "show": _simple("show", "A kernel of the run: its source, the plan it implements and its evaluation.",
                    lambda p: p.add_argument("kernel_id")),
    "best": _simple("best", "The fastest correct kernel so far; --save writes its source to a file.",
                    lambda p: p.add_argument("--save", type=Path, metavar="PATH",
                                             help="write the kernel here (a directory: best_kernel-RUN.py in it)")),
    "close": _simple("close", "Close the session: its LLM client and evaluators stop; the run store keeps "
                              "everything (%accelopt open PROBLEM --resume reopens it)."),
    "llm": _p_llm,
    "fake-model": _simple("fake-model", "Start the package's offline FAKE model (not a real LLM) on a loopback port "
                                        "for this kernel; %accelopt open then uses it unless the line names a model.",
                          lambda p: (p.add_argument("--stop", action="store_true", help="stop it"),
                                     p.add_argument("--latency", type=float, metavar="SECONDS",
                                                    help="answer each call after this long, as a real model would "
                                                         "(to watch progress and Stop); default 0"))),
    "help": _simple("help", "Help on %accelopt or one subcommand.",
                    lambda p: p.add_argument("subcommand", nargs="?")),
}


def run_directory(session: Any) -> Path:
    """Where a session's files go: its run directory (the memory file's folder), which is not the
    store's folder when the store is elsewhere (``--store``, a database)."""
    if session.memory_path is not None:
        return Path(session.memory_path).parent
    return Path(session.store.path).parent


def reopen_hint(session: Any) -> str:
    """Where the run is kept and the line that reopens it."""
    from accelopt_nb.store import DEFAULT_FILENAME

    run_dir, store = run_directory(session), session.store
    line = f"%accelopt open {session.problem.name} --resume --run-dir {run_dir}"
    if isinstance(store.path, Path) and store.path.resolve() == (run_dir / DEFAULT_FILENAME).resolve():
        return f"the store in {run_dir} keeps it ({line})"
    # A store given with --store; a database URL is shown without its password, so it is not repeated.
    where = "<the same URL>" if isinstance(store.path, str) else str(store.path)
    return f"the store {store.location} keeps it ({line} --store {where} --run-id {session.run_id})"


def write_run_files(session: Any, report: Any, facts: Any = None) -> dict[str, Path]:
    """The best kernel and the JSON report in the run directory, named as the CLI names them; the report
    also holds the run's failures by cause, the models its calls went to and its notes (``facts``)."""
    run_dir = run_directory(session)
    run_dir.mkdir(parents=True, exist_ok=True)
    best = run_dir / f"best_kernel-{report.run_id}.py"
    best.write_text(report.best_source)
    rep = run_dir / f"report-{report.run_id}.json"
    data = report.to_dict()
    if facts is not None:
        data.update(failures=facts["failures"].to_dict(), models=facts["models"], notes=facts["notes"])
    rep.write_text(json.dumps(data, indent=2, default=str))
    return {"best kernel": best, "report": rep}


@magics_class
class AccelOptMagics(Magics):
    # The endpoint `open` uses when its line names no model: `%config AccelOptMagics.base_url = "..."`
    # (persistent in an IPython profile), else the ACCELOPT_* environment variables (see notebook.endpoint).
    base_url = Unicode(None, allow_none=True, help="default --base-url of %accelopt open").tag(config=True)
    model = Unicode(None, allow_none=True, help="default --model of %accelopt open").tag(config=True)
    model_preset = Unicode(None, allow_none=True, help="default --model-preset of %accelopt open").tag(config=True)
    price = Unicode(None, allow_none=True, help="default --price of %accelopt open").tag(config=True)
    api_key_env = Unicode(None, allow_none=True, help="default --api-key-env of %accelopt open").tag(config=True)

    def __init__(self, shell=None) -> None:
        super().__init__(shell)
        self.session: Any = None
        self.panel: Any = None
        self.fake_model: Any = None

    def endpoint_defaults(self) -> dict[str, Any]:
        """The endpoint set with %config (or by `fake-model`), field by field."""
        return {k: getattr(self, k) for k in endpoint.ENV_VARS}

    @line_cell_magic
    def accelopt(self, line: str, cell: str | None = None):
        try:
            return self._dispatch(line, cell)
        except AccelOptError as exc:
            if "--debug" in line.split() or self._verbose():
                raise
            prefix = "" if isinstance(exc, MagicUsageError) else f"{type(exc).__name__}: "
            raise AccelOptUsageError(prefix + str(exc)) from None

    accelopt.__doc__ = __doc__

    def _dispatch(self, line: str, cell: str | None):
        try:
            argv = shlex.split(line)
        except ValueError as exc:
            raise MagicUsageError(f"%accelopt: cannot split the line: {exc}") from None
        if not argv:
            return d.Shown(__doc__.split("Load with", 1)[0].strip() + "\n\n" + self._usage())
        sub, rest = argv[0], argv[1:]
        if sub in ("--help", "-h"):
            sub, rest = "help", []
        if sub not in PARSERS:
            raise MagicUsageError(f"unknown %accelopt subcommand {sub!r}; one of: {', '.join(PARSERS)}")
        try:
            args = PARSERS[sub]().parse_args(rest)
        except _HelpShown as shown:
            return d.Shown(str(shown), f"<pre>{d.esc(shown)}</pre>")
        return getattr(self, f"_cmd_{sub.replace('-', '_')}")(args, cell)

    def _verbose(self) -> bool:
        tb = getattr(self.shell, "InteractiveTB", None)
        return getattr(tb, "mode", "") == "Verbose"

    @staticmethod
    def _usage() -> str:
        return "subcommands: " + ", ".join(PARSERS)

    def _cmd_help(self, args, cell) -> d.Shown:
        if args.subcommand is None:
            text = __doc__
        elif args.subcommand in PARSERS:
            text = PARSERS[args.subcommand]().format_help()
        else:
            raise MagicUsageError(f"no help for {args.subcommand!r}; subcommands: {', '.join(PARSERS)}")
        return d.Shown(text, f"<pre>{d.esc(text)}</pre>")

    # ---- kernels without a session ----------------------------------------------------------------
    def _cmd_profile(self, args, cell: str | None):
        from accelopt_nb.evaluation import EvalOptions, evaluate
        from accelopt_nb.search.problem import SearchProblem

        if not cell or not cell.strip():
            raise MagicUsageError("%%accelopt profile takes the kernel source as the cell body")
        result = evaluate(args.problem, cell, backend=args.backend, hw=args.hw, preset=args.shapes,
                          options=EvalOptions(adversarial=not args.no_adversarial, kernel_filename="<cell>"),
                          cache=False)
        problem = SearchProblem.from_nkibench(args.problem, args.shapes)
        peak = problem.peak(args.hw)
        # the cell's first line is the %%accelopt line: kernel line 1 is cell line 2
        view = d.ResultView(result, problem.percent_of_peak(result.latency_ms, args.hw) if result.correct else None,
                            *(peak or (None, None)), cell_offset=1)
        if args.timeline and result.profile:
            from IPython.display import display
            display(view)
            fig = self._timeline(args.problem, args.shapes, args.hw, cell)
            import matplotlib.pyplot as plt
            display(fig)
            plt.close(fig)  # shown once, not again by the inline backend
            return None
        return view

    @staticmethod
    def _timeline(problem: str, preset: str, hw: str, source: str):
        import nkibench

        from accelopt_nb.evaluation.backends.simulator import trace_profile
        from accelopt_nb.sim import load_kernel

        task = nkibench.get_problem(problem).task(preset)
        profile = trace_profile(load_kernel(source=source), task.to_nki(task.get_inputs(seed=0)), hw)
        d.use_style()
        return profile.timeline()

    # ---- sessions ----------------------------------------------------------------------------------
    def _cmd_open(self, args, cell) -> d.Shown:
        from accelopt_nb.notebook.session import open_for_notebook

        if self.session is not None:
            self._need_writable()        # never close a session the panel is running
        given = {k: getattr(args, k) for k in endpoint.ENV_VARS}
        chosen = endpoint.resolve(given, self.endpoint_defaults())
        if not chosen.names_a_model and not args.resume:
            raise MagicUsageError("%accelopt open needs a model: --model-preset P, or --base-url URL and --model NAME "
                                  "(or set a default: %config AccelOptMagics.base_url = ..., $ACCELOPT_BASE_URL, "
                                  "or `%accelopt fake-model` for the offline fake model)")
        for k in endpoint.ENV_VARS:
            setattr(args, k, chosen.settings.get(k))
        # Open the new session first: if it fails (a typo in the URL, a dead endpoint) the one you
        # were working in stays open.
        new = open_for_notebook(args, progress=LiveProgress())
        if self.session is not None:
            self.session.close()
        self.session, self.panel = new, None
        if self.shell is not None:
            self.shell.user_ns[SESSION_NAME] = self.session
        view = d.session_view(self.session)
        warning = getattr(self.session, "endpoint_warning", "")
        if warning:   # e.g. the model is not listed by the server: its calls may be refused
            view = d.Shown(f"{warning}\n{view.text}", f"<div style='color:{d.FAIL_COLOR}'>{d.esc(warning)}</div>"
                           f"{view.html}", view.value)
        if chosen.source not in ("the command line", "none"):
            model = self.session.clients.get("planner")
            name = model.config.model if model is not None else chosen.settings.get("model")
            view = d.Shown(f"model {name} (from {chosen.source})\n{view.text}",
                           f"<small>model <code>{d.esc(name)}</code> from {d.esc(chosen.source)}</small><br>"
                           f"{view.html}", view.value)
        return view

    def _need_session(self) -> Any:
        if self.session is None:
            raise MagicUsageError("no open session: start one with %accelopt open PROBLEM --base-url URL --model NAME")
        return self.session

    def _need_writable(self) -> Any:
        """The session, if no other thread (the panel) is running a step of it: one writer at a time.

        Refused rather than waited for: a cell waiting here would hold the kernel, and the panel's
        Stop button (a widget message) could not reach it until the step ended anyway.
        """
        s = self._need_session()
        if s.busy:
            raise MagicUsageError(f"the session is busy: {s.busy} is running (the panel?); wait for it to finish "
                                  "or press the panel's Stop, then run this cell again")
        return s

    def _drive(self, action: Callable[[Any], Any]) -> tuple[Any, Any]:
        """Run a session action with live progress; returns (its result, the failures it left)."""
        s = self._need_writable()
        progress = LiveProgress()
        progress.show()
        mark = len(s.step_stats)
        previous, s.progress = s.progress, progress
        try:
            out = action(s)
        finally:
            s.progress = previous
            progress.finish()
            if self.panel is not None:
                self.panel.refresh()  # a panel shown elsewhere follows what the magic did
        return out, StepOutcome.since(s, mark)

    def _cmd_step(self, args, cell: str | None):
        settings = StepSettings.from_yaml(cell) if cell is not None and cell.strip() else StepSettings()
        if args.phase is not None:
            if settings.phase not in (None, args.phase):
                raise MagicUsageError(f"%%accelopt step {args.phase}: the cell says phase {settings.phase!r}")
            settings.phase = args.phase
        out, outcome = self._drive(lambda s: run_step(s, settings))
        if settings.phase is None:
            return d.session_view(self.session, outcome)
        return _with_outcome(d.views_table(settings.phase, out), outcome)

    def _cmd_plan(self, args, cell: str | None):
        manual = None
        if cell is not None and cell.strip():
            manual = [part.strip() for part in cell.split("\n---\n") if part.strip()]
        out, outcome = self._drive(lambda s: s.plan(manual=manual))
        return _with_outcome(d.views_table("plan", out), outcome)

    def _cmd_kernel(self, args, cell: str | None):
        if not cell or not cell.strip():
            raise MagicUsageError("usage: %%accelopt kernel PLAN_ID, with the kernel source as the cell body")
        out, outcome = self._drive(lambda s: s.execute(manual={args.plan_id: cell}, llm=not args.only))
        return _with_outcome(d.views_table("execute", out), outcome)

    def _cmd_run(self, args, cell):
        report, outcome = self._drive(lambda s: s.run(args.iterations))
        facts = d.run_facts(self.session.store, report.run_id)
        return _with_outcome(d.report_view(report, write_run_files(self.session, report, facts), facts), outcome)

    def _cmd_report(self, args, cell) -> d.Shown:
        from accelopt_nb.search.report import build_report
        s = self._need_session()
        report = build_report(s)
        facts = d.run_facts(s.store, report.run_id)
        return d.report_view(report, None if args.no_files else write_run_files(s, report, facts), facts)

    def _cmd_status(self, args, cell) -> d.Shown:
        return d.session_view(self._need_session())

    def _cmd_beam(self, args, cell) -> d.Shown:
        return d.views_table("beam", self._need_session().beam_kernels())

    def _cmd_leaderboard(self, args, cell) -> d.Shown:
        return d.leaderboard(self._need_session(), args.top)

    def _cmd_plans(self, args, cell) -> d.Shown:
        s = self._need_session()
        it = args.iteration
        if it is None:  # the latest iteration that has plans
            it = max((p.iteration for p in list(s.plans.values())), default=s.iteration)
        return d.plans_view(s, it)

    def _cmd_diff(self, args, cell) -> d.KernelDiff:
        s = self._need_session()
        a = args.a or "baseline"
        b = args.b or s.best.kernel_id
        for k in (a, b):
            if k not in s.kernels:
                raise MagicUsageError(f"no kernel {k!r} in this run; e.g. {', '.join(sorted(s.kernels)[:6])}")
        return d.KernelDiff(a, s.kernels[a].source, b, s.kernels[b].source)

    def _cmd_plot(self, args, cell):
        import matplotlib.pyplot as plt
        from IPython.display import display
        fig = d.plot_progress(self._need_session())
        display(fig)
        plt.close(fig)

    def _cmd_memory(self, args, cell) -> d.Shown:
        from accelopt_nb.search.memory import OptimizationMemory

        s = self._need_session()
        if args.action == "show":
            return d.memory_view(s.memory)
        if args.path is None:
            raise MagicUsageError(f"%accelopt memory {args.action} needs a PATH")
        if args.action == "save":
            path = s.memory.save(args.path)
            return d.Shown(f"saved {len(s.memory)} memory items to {path}", value=path)
        self._need_writable()
        loaded = OptimizationMemory.load(args.path, capacity=s.memory.capacity)
        s.memory.clear()
        s.memory.add(list(loaded))
        return d.memory_view(s.memory)

    def _cmd_panel(self, args, cell):
        from accelopt_nb.notebook.panel import SessionPanel
        self.panel = SessionPanel(self._need_session())
        return self.panel

    def _cmd_show(self, args, cell) -> d.Shown:
        s = self._need_session()
        if args.kernel_id not in s.kernels:
            raise MagicUsageError(f"no kernel {args.kernel_id!r} in this run; e.g. {', '.join(sorted(s.kernels)[:6])}")
        return d.kernel_view(s, s.kernels[args.kernel_id])

    def _cmd_best(self, args, cell) -> d.Shown:
        s = self._need_session()
        view = d.kernel_view(s, s.best)
        if args.save is None:
            return view
        path = args.save / f"best_kernel-{s.run_id}.py" if args.save.is_dir() else args.save
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(s.best.source)
        return d.Shown(f"saved {s.best.kernel_id} to {path}\n{view.text}",
                       f"saved <code>{d.esc(s.best.kernel_id)}</code> to <code>{d.esc(path)}</code>{view.html}", path)

    def _cmd_close(self, args, cell) -> d.Shown:
        if self.session is None:
            return d.Shown("no open session")
        self._need_writable()
        s, self.session, self.panel = self.session, None, None
        s.close()
        if self.shell is not None and self.shell.user_ns.get(SESSION_NAME) is s:
            del self.shell.user_ns[SESSION_NAME]
        return d.Shown(f"closed run {s.run_id} of {s.problem.name}; {reopen_hint(s)}")

    def _cmd_llm(self, args, cell) -> d.Shown:
        if args.action == "presets":
            from accelopt_nb.llm.config import load_model_presets
            rows = [{"preset": name, "model": p.get("model"), "base_url": p.get("base_url"), "price": p.get("price"),
                     "api key from": p.get("api_key_env")} for name, p in sorted(load_model_presets().items())]
            return d.table_view("model presets (%accelopt open --model-preset NAME)", rows, list(rows[0]), rows)
        if args.action == "prices":
            from accelopt_nb.llm.prices import PriceTable
            table = PriceTable.default()
            rows = [{"price key": k, "input": table.get(k).input, "output": table.get(k).output,
                     "rule": table.get(k).rule} for k in table.keys()]
            return d.table_view(f"prices as of {table.as_of}, USD per 1M tokens", rows, list(rows[0]), rows)
        return self._llm_check(args)

    def _llm_check(self, args) -> d.Shown:
        from accelopt_nb.llm.check import check_endpoint
        from accelopt_nb.llm.loop_thread import LoopThread
        from accelopt_nb.search.launch import model_config

        given = {k: getattr(args, k) for k in ("base_url", "model", "model_preset", "api_key_env")}
        if any(given.values()) or self.session is None or "planner" not in self.session.clients:
            chosen = endpoint.resolve(given, self.endpoint_defaults())
            if not chosen.names_a_model:
                raise MagicUsageError("%accelopt llm check: which endpoint? give --model-preset, or --base-url and "
                                      "--model (or open a session, or set a default endpoint)")
            config = model_config(**chosen.settings)
        else:
            config = self.session.clients["planner"].config
        loop = LoopThread(name="accelopt-llm-check")
        try:
            report = loop.run(check_endpoint(config, max_tokens=args.max_tokens))
        finally:
            loop.close()
        text = "\n".join(report.lines())
        color = d.OK_COLOR if report.ok else d.FAIL_COLOR
        return d.Shown(text, f"<pre style='color:{color}'>{d.esc(text)}</pre>", report)

    def _cmd_fake_model(self, args, cell) -> d.Shown:
        from accelopt_nb.fake_model import FAKE_MODEL_LABEL

        if args.stop:
            if self.fake_model is None:
                return d.Shown("the fake model is not running")
            url = self.fake_model.url
            self.fake_model.stop()
            self.fake_model = None
            for k in endpoint.ENV_VARS:
                setattr(self, k, None)
            return d.Shown(f"stopped the fake model at {url}; %accelopt open needs a model again")
        if self.fake_model is None:
            self.fake_model = endpoint.FakeModelServer()
        if args.latency is not None:
            if args.latency < 0:
                raise MagicUsageError("%accelopt fake-model --latency: seconds must be >= 0")
            self.fake_model.latency_s = args.latency
        for k, v in self.fake_model.settings().items():
            setattr(self, k, v)
        self.model_preset = None
        slow = f", {self.fake_model.latency_s:g} s per answer" if self.fake_model.latency_s else ""
        text = (f"{FAKE_MODEL_LABEL}: serving {endpoint.FAKE_MODEL} at {self.fake_model.url}{slow} for this kernel. "
                f"`%accelopt open PROBLEM` now uses it; its plans and kernels are canned (matmul gets two rewrites), "
                f"so results show the machinery, not what a model achieves.")
        return d.Shown(text, f"<b style='color:#8a6d00'>{d.esc(FAKE_MODEL_LABEL)}</b>: {d.esc(text.split(': ', 1)[1])}",
                       self.fake_model.url)

    # ---- tab completion ---------------------------------------------------------------------------
    def complete(self, line: str) -> list[str]:
        """Candidates for the word being typed after ``%accelopt`` (subcommands, problems, kernel and plan ids)."""
        words = line.split()
        if line.endswith(" "):
            words.append("")
        words = words[1:]  # drop %accelopt / %%accelopt
        if len(words) <= 1:
            return sorted(PARSERS)
        sub, prev = words[0], words[-2]
        s = self.session
        if sub == "help":
            return sorted(PARSERS)
        if (sub == "open" and len(words) == 2) or prev == "--problem":
            import nkibench
            return sorted(nkibench.list_problems())
        if sub == "step":
            from accelopt_nb.search.state import PHASES
            return list(PHASES)
        if sub == "kernel" and s is not None:
            return [p.plan_id for p in s.iteration_plans()]
        if sub in ("diff", "show") and s is not None:
            return sorted(s.kernels)
        if sub == "llm" and len(words) == 2:
            return ["check", "presets", "prices"]
        if sub == "memory":
            return ["show", "save", "load"]
        if words[-1].startswith("-"):
            p = PARSERS.get(sub)
            if p is not None:
                return sorted(o for a in p()._actions for o in a.option_strings if o.startswith("--"))
        return []


def _with_outcome(shown: d.Shown, outcome: Any) -> d.Shown:
    """Put a step's failures above its result, in red, where nobody can miss them."""
    if not outcome.problem:
        return shown
    return d.Shown(outcome.text() + "\n" + shown.text, outcome.html() + (shown.html or ""), shown.value)


def load_ipython_extension(ipython) -> None:
    from accelopt_nb.pyutil import guard_ipython

    guard_ipython(ipython)  # cells parse under the package's AST lock (LLM threads parse answers meanwhile)
    magics = AccelOptMagics(ipython)
    ipython.register_magics(magics)
    if magics not in ipython.configurables:  # `%config AccelOptMagics.base_url = ...`
        ipython.configurables.append(magics)
    d.register_formatters(ipython)

    def completer(_shell, event) -> list[str]:
        prefix = event.symbol
        return [c for c in magics.complete(event.line) if c.startswith(prefix)]

    for key in ("%accelopt", "%%accelopt"):
        ipython.set_hook("complete_command", completer, str_key=key)


__all__ = ["AccelOptMagics", "AccelOptUsageError", "MagicUsageError", "PARSERS", "load_ipython_extension", "write_run_files"]
