"""Run the reproduction and teaching notebooks with papermill and write an index of what they made.

The notebooks and their parameter files live in a source checkout (``notebooks/``,
``papermill_configs/<stem>_smoke.yaml`` and ``<stem>_paper.yaml``). A parameter file is the notebook's
papermill parameters plus two keys the runner reads itself:

* ``notebook``: the notebook file it belongs to;
* ``endpoint``: ``fake`` (start the package's offline fake model and point the notebook at it),
  or absent (the file names the endpoint, or the notebook needs none).

The runner adds ``out_dir`` (this notebook's folder under ``--out``) and ``runs_dir`` (run stores
shared by all notebooks of one output folder, so a second run resumes instead of starting over).
Before any notebook runs, every endpoint the chosen configs will call is checked (``GET /models``):
a dead one fails the command at second 0, naming the config and the reason.
Teaching notebooks run with the reference answers filled into their exercise cells.
A failing notebook does not stop the others; the run fails at the end naming each notebook and cell.
"""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import yaml

from accelopt_nb.errors import AccelOptError, ConfigError
from accelopt_nb.renamed import warn_renamed
from accelopt_nb.reproduce.figures import Provenance

MODES = ("smoke", "paper")
RUNNER_KEYS = ("notebook", "endpoint")


class NotebookFailedError(AccelOptError):
    """One or more notebooks of a reproduction run raised; the message names each notebook and cell."""

    def __init__(self, message: str, outcomes: "Sequence[Outcome]" = ()) -> None:
        super().__init__(message)
        self.outcomes = list(outcomes)


# Exit statuses of `accelopt reproduce`, by what to fix first (the first that applies).
EXIT_OK, EXIT_NOTEBOOK, EXIT_TRANSPORT, EXIT_MODEL = 0, 2, 3, 4
EXIT_HELP = ("exit status: 0 every notebook ran and every search run is complete; 2 a notebook failed (or the "
             "configs or endpoints are wrong: nothing ran); 3 search runs lost LLM calls to the transport (no answer "
             "after retries, or calls not made): run the same command again, it resumes and makes only those; "
             "4 the model refused calls (HTTP 4xx: a wrong model name, a bad request or key): fix the model settings")


@dataclass(frozen=True)
class NotebookSpec:
    file: str      # e.g. "21_beam_vs_sampling.ipynb"
    kind: str      # "teaching" | "tool" | "reproduction"
    title: str
    modes: tuple[str, ...] = MODES   # the sets (--smoke, --paper) it belongs to
    own_model: str | None = None     # the model the notebook starts itself, if any (for the index)

    @property
    def name(self) -> str:
        """The short name ``--only`` takes: the file stem without its number."""
        return self.stem.split("_", 1)[1]

    @property
    def stem(self) -> str:
        return self.file.removesuffix(".ipynb")


NOTEBOOKS: tuple[NotebookSpec, ...] = (
    NotebookSpec("01_nki_basics.ipynb", "teaching", "NKI basics: tiles, SBUF/PSUM, load-compute-store, both NKI styles"),
    NotebookSpec("02_memory_and_roofline.ipynb", "teaching", "Moving data: HBM, DMA transfer sizes, the roofline"),
    NotebookSpec("03_matmul_step_by_step.ipynb", "teaching", "TensorE: stationary/moving, transposes, fp32 vs bf16, blocking"),
    NotebookSpec("04_fusion_and_overlap.ipynb", "teaching", "Overlap: loop kinds, double buffering, engine balance, fusion"),
    NotebookSpec("05_agent_step_by_hand.ipynb", "teaching", "One agent step by hand with the magics"),
    NotebookSpec("06_sbuf_capacity_and_spills.ipynb", "teaching", "SBUF capacity and spills"),
    NotebookSpec("07_trn2.ipynb", "teaching", "trn2: what changes from trn1, kernel by kernel"),
    NotebookSpec("08_model_limits.ipynb", "teaching", "Where the performance model is wrong, and by how much"),
    # the tools, smoke only: at paper size their work is the reproduction notebooks' (20-25)
    NotebookSpec("10_search_experiments.ipynb", "tool", "Search experiments: your own arms, problems and models",
                 ("smoke",)),
    NotebookSpec("11_magics_and_panel.ipynb", "tool", "The %accelopt magics and the session panel",
                 ("smoke",), own_model="offline fake model \u2014 not a real LLM (started by the notebook: "
                                       "%accelopt fake-model)"),
    NotebookSpec("20_beam_vs_sampling.ipynb", "reproduction", "Beam search vs repeated sampling"),
    NotebookSpec("21_memory_ablation.ipynb", "reproduction", "Optimization memory: on/off, ExpN and TopK"),
    NotebookSpec("22_cost.ipynb", "reproduction", "Cost: open vs proprietary models"),
    # after the search notebooks: these read the best kernels of the run stores those wrote
    NotebookSpec("23_nkibench_table.ipynb", "reproduction", "NKIBench: % of peak, baselines and best, trn1 and trn2"),
    NotebookSpec("24_human_experts.ipynb", "reproduction", "Mamba: human experts vs the agent"),
    NotebookSpec("25_saturation.ipynb", "reproduction", "Where search saturates"),
)


@dataclass
class Job:
    spec: NotebookSpec
    config: Path
    params: dict[str, Any]
    endpoint: str | None = None


@dataclass
class Outcome:
    job: Job
    ok: bool
    seconds: float
    executed: Path
    error: str = ""
    figures: list[dict[str, Any]] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)     # the search runs it made or read (runs.jsonl)

    @property
    def incomplete_runs(self) -> list[dict[str, Any]]:
        return [r for r in self.runs if not r.get("complete")]


def exit_status(outcomes: Sequence[Outcome]) -> tuple[int, str]:
    """The command's exit status and its reason (see :data:`EXIT_HELP`)."""
    from accelopt_nb.notebook.causes import MODEL_ERROR, Failures

    incomplete = [(o, r) for o in outcomes for r in o.incomplete_runs]
    refused = [(o, r) for o, r in incomplete if Failures.from_dict(r.get("failures") or {}).llm[MODEL_ERROR]
               or "LLMEndpointError" in str(r.get("error") or "")]
    if refused:
        return EXIT_MODEL, (f"the model refused LLM calls in {len(refused)} run(s) (model error), e.g. "
                            f"{refused[0][1]['arm']} / {refused[0][1]['problem']}")
    if incomplete:
        return EXIT_TRANSPORT, (f"{len(incomplete)} search run(s) lost LLM calls (LLM transport or not made), e.g. "
                                f"{incomplete[0][1]['arm']} / {incomplete[0][1]['problem']}: run the same command "
                                "again to resume them")
    if any(not o.ok for o in outcomes):
        return EXIT_NOTEBOOK, "a notebook failed"
    return EXIT_OK, ""


def find_checkout(start: str | Path | None = None) -> Path:
    """The source checkout holding ``notebooks/`` and ``papermill_configs/`` (default: the one this
    package was installed from)."""
    root = Path(start) if start else Path(__file__).resolve().parents[2]
    if not ((root / "notebooks").is_dir() and (root / "papermill_configs").is_dir()):
        raise ConfigError(f"{root} is not an accelopt_nb source checkout (no notebooks/ and papermill_configs/); "
                          "accelopt reproduce runs the checkout's notebooks: pass --checkout DIR")
    return root


def spec_of(notebook: str) -> NotebookSpec:
    for spec in NOTEBOOKS:
        if notebook in (spec.file, spec.stem, spec.name):
            return spec
    raise ConfigError(f"unknown notebook {notebook!r}; known: {', '.join(s.name for s in NOTEBOOKS)}")


def load_job(path: str | Path) -> Job:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"papermill config not found: {path}")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"papermill config {path} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict) or "notebook" not in data:
        raise ConfigError(f"papermill config {path} must be a mapping with a 'notebook' key")
    endpoint = data.get("endpoint")
    if endpoint not in (None, "fake"):
        raise ConfigError(f"{path}: endpoint must be 'fake' or absent, got {endpoint!r}")
    params = {k: v for k, v in data.items() if k not in RUNNER_KEYS}
    if "preset" in params:   # the shape preset's old name (an arm's search preset is nested, not here)
        warn_renamed("preset", "shape_preset", where=str(path))
        params.setdefault("shape_preset", params.pop("preset"))
    return Job(spec_of(str(data["notebook"])), path, params, endpoint)


def plan(mode: str | None, *, only: Sequence[str] = (), configs: Sequence[str | Path] = (),
         checkout: Path) -> list[Job]:
    """The jobs to run: the given CONFIG files, else every notebook's ``<stem>_<mode>.yaml``."""
    if configs:
        jobs = [load_job(c) for c in configs]
    else:
        if mode not in MODES:
            raise ConfigError(f"choose --smoke or --paper (or give CONFIG files), not {mode!r}")
        jobs = []
        for spec in (s for s in NOTEBOOKS if mode in s.modes):
            path = checkout / "papermill_configs" / f"{spec.stem}_{mode}.yaml"
            if not path.is_file():
                raise ConfigError(f"missing papermill config {path} for notebook {spec.file}")
            jobs.append(load_job(path))
    if only:
        wanted = {spec_of(o).file for o in only}
        jobs = [j for j in jobs if j.spec.file in wanted]
    return jobs


def allow_unpriced(jobs: Sequence[Job]) -> None:
    """Let the cost experiments among ``jobs`` (configs that set ``unpriced_ok``) run unpriced models."""
    for job in jobs:
        if "unpriced_ok" in job.params:
            job.params["unpriced_ok"] = True


MODEL_KEYS = ("base_url", "model", "model_preset", "price", "api_key_env")


def job_models(job: Job) -> list[dict[str, Any]]:
    """The model settings of every search ``job`` will run (none: it only reads run stores, or uses the fake).

    Mirrors the notebooks: a search runs when the config names an endpoint or a model preset, for itself
    or for one of its arms; an arm naming its own preset owns its endpoint, else it refines the default.
    """
    from accelopt_nb.experiments import Arm, arm_model

    if job.endpoint == "fake":
        return []
    p = job.params
    default = {k: p[k] for k in MODEL_KEYS if p.get(k)}
    arms = [Arm.from_dict(a) for a in p.get("arms") or []]
    if not (p.get("base_url") or p.get("model_preset") or any("model_preset" in a.model for a in arms)):
        return []
    return [arm_model(a, default) for a in arms] if arms else [default]


@dataclass
class Preflight:
    """What the endpoint check before a reproduction found: per endpoint, a warning or nothing."""

    endpoints: dict[tuple[str, str], str] = field(default_factory=dict)   # (base_url, model) -> warning

    def lines(self) -> list[str]:
        return [f"{model} at {url}" + (f" ({warning})" if warning else "")
                for (url, model), warning in self.endpoints.items()]


def preflight_jobs(jobs: Sequence[Job], log: Callable[[str], None] = print) -> Preflight:
    """Check every endpoint ``jobs`` will call before anything runs; raises naming each dead one."""
    from accelopt_nb.errors import EndpointUnreachableError
    from accelopt_nb.search.launch import model_config, preflight

    found = Preflight()
    dead: list[str] = []
    seen: set[tuple[str, str]] = set()
    for job in jobs:
        for settings in job_models(job):
            try:
                model = model_config(**settings)
            except AccelOptError as exc:
                raise ConfigError(f"{job.config.name}: {exc}") from None
            key = (model.base_url, model.model)
            if key in seen:
                continue
            seen.add(key)
            try:
                warning = preflight(model)
            except AccelOptError as exc:  # down, a wrong URL, or no API key in the environment
                dead.append(f"{job.config.name}: model {model.model}: {exc}")
                continue
            found.endpoints[key] = warning
            log(f"endpoint {model.model} at {model.base_url}: " + (warning or "reachable"))
    if dead:
        raise EndpointUnreachableError("nothing was run: " + "; ".join(dead))
    return found


def reproduce(jobs: Sequence[Job], out: str | Path, *, checkout: Path, mode: str | None = None,
              log: Callable[[str], None] = print, check_endpoints: bool = True) -> list[Outcome]:
    """Execute ``jobs`` into ``out``; writes ``out/index.md``. Raises NotebookFailedError if any failed.

    Every endpoint the jobs call is checked first (``check_endpoints``): a dead one raises
    :class:`EndpointUnreachableError` before any notebook runs.
    """
    checked = preflight_jobs(jobs, log) if check_endpoints else Preflight()
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    outcomes = []
    with ExitStack() as stack:
        fake: dict[str, str] | None = None
        for job in jobs:
            if job.endpoint == "fake" and fake is None:
                from accelopt_nb.reproduce.offline import fake_endpoint
                fake = stack.enter_context(fake_endpoint())
                log(f"offline fake model listening on {fake['base_url']} (NOT a real LLM)")
            # one folder per notebook; a notebook run with several configs gets one per config
            twice = sum(j.spec.file == job.spec.file for j in jobs) > 1
            folder = out / (f"{job.spec.stem}-{job.config.stem}" if twice else job.spec.stem)
            outcomes.append(_execute(job, folder, out, checkout, fake if job.endpoint == "fake" else None, log))
    write_index(outcomes, out, mode=mode, seconds=time.monotonic() - t0, checkout=checkout, preflight=checked)
    failed = [o for o in outcomes if not o.ok]
    if failed:
        raise NotebookFailedError("; ".join(f"{o.job.spec.file}: {o.error}" for o in failed)
                                  + f" (executed notebooks and index in {out})", outcomes)
    return outcomes


def _execute(job: Job, out_dir: Path, out: Path, checkout: Path, fake: dict[str, str] | None,
             log: Callable[[str], None]) -> Outcome:
    import papermill
    from papermill.exceptions import PapermillExecutionError

    from accelopt_nb.reproduce.figures import read_manifest
    from accelopt_nb.reproduce.notebook import RUNS_MANIFEST, read_runs

    nb_dir = checkout / "notebooks"
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in (out_dir / "figures.jsonl", out_dir / RUNS_MANIFEST):
        stale.unlink(missing_ok=True)
    params = {**job.params, "out_dir": str(out_dir), "runs_dir": str(out / "runs"), **(fake or {})}
    source = nb_dir / job.spec.file
    tmp = None
    if job.spec.kind == "teaching":
        tmp = tempfile.TemporaryDirectory(prefix="accelopt_answers_")
        source = _with_reference_answers(source, Path(tmp.name))
    executed = out_dir / job.spec.file
    log(f"running {job.spec.file} ({job.config.name})")
    t = time.monotonic()
    error = ""
    try:
        papermill.execute_notebook(str(source), str(executed), parameters=params, cwd=str(nb_dir),
                                   kernel_name="python3", progress_bar=False, log_output=False,
                                   kernel_manager_class=quiet_kernel_manager(),
                                   extra_arguments=[f"--IPKernelApp.log_level={KERNEL_LOG_LEVEL}"])
    except PapermillExecutionError as exc:
        # papermill numbers cells from 0 including the injected-parameters cell; people count from 1
        error = f"cell {exc.cell_index + 1} (execution count {exc.exec_count}) raised {exc.ename}: {exc.evalue}"
    except Exception as exc:  # a kernel that died or could not start is still this notebook's failure
        error = f"{type(exc).__name__}: {exc}"
    finally:
        if tmp is not None:
            tmp.cleanup()
    seconds = time.monotonic() - t
    outcome = Outcome(job, not error, seconds, executed, error, read_manifest(out_dir), read_runs(out_dir))
    lost = outcome.incomplete_runs
    log(f"  {'FAILED: ' + error if error else 'ok'} ({seconds:.1f} s)"
        + (f"; {len(lost)} search run(s) NOT COMPLETE" if lost else ""))
    return outcome


# The kernel's own log goes to the command's stderr: warnings there are about the kernel's transport, not
# about the notebook (whose errors papermill reports with the cell); errors still show.
KERNEL_LOG_LEVEL = "ERROR"


def quiet_kernel_manager() -> type:
    """A kernel manager that does not interrupt a kernel it is about to shut down.

    jupyter_client sends SIGINT before every shutdown; papermill shuts a kernel down only after its
    notebook finished, so the interrupt can only land in an idle kernel's message handler, which logs
    ``KeyboardInterrupt caught in kernel`` into every reproduction log.
    """
    from jupyter_client.manager import AsyncKernelManager

    class QuietShutdownKernelManager(AsyncKernelManager):
        async def _async_interrupt_kernel(self) -> None:
            if self.shutting_down:
                return
            await super()._async_interrupt_kernel()

    return QuietShutdownKernelManager


def _with_reference_answers(source: Path, folder: Path) -> Path:
    import nbformat

    from accelopt_nb.teaching.answers import REFERENCE_ANSWERS
    from accelopt_nb.teaching.notebook import fill_exercises

    nb = fill_exercises(nbformat.read(source, as_version=4), REFERENCE_ANSWERS)
    filled = folder / source.name
    nbformat.write(nb, filled)
    return filled


# ------------------------------------------------------------------------------------------- index
def write_index(outcomes: Sequence[Outcome], out: Path, *, mode: str | None, seconds: float,
                checkout: Path, preflight: Preflight | None = None) -> Path:
    """``out/index.md``: what was made, from which notebook, with which model, prices and settings."""
    from accelopt_nb.llm import PriceTable

    table = PriceTable.default()
    status, why = exit_status(outcomes)
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    lines = [f"# accelopt reproduce{' --' + mode if mode else ''}", "",
             f"- made: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, in {seconds:.0f} s on {os.cpu_count()} CPU(s)"
             + (f", load average {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}" if load else ""),
             f"- checkout: {checkout} ({_commit(checkout)})",
             f"- notebooks: {sum(o.ok for o in outcomes)} of {len(outcomes)} ran to the end",
             f"- search runs: {sum(len(o.runs) - len(o.incomplete_runs) for o in outcomes)} of "
             f"{sum(len(o.runs) for o in outcomes)} complete" + (f"; exit status {status}: {why}" if status else ""),
             f"- prices: the dated table as of {table.as_of} (USD per 1M tokens), as recorded with each run"]
    if preflight is not None and preflight.endpoints:
        lines.append("- endpoints checked before the run: " + "; ".join(preflight.lines()))
    lines.append("")
    if any(o.job.endpoint == "fake" for o in outcomes):
        from accelopt_nb.fake_model import FAKE_MODEL_LABEL
        lines += [f"**Figures marked fake were made with the package's {FAKE_MODEL_LABEL}: they show that the "
                  "machinery runs end to end, not what any model achieves.**", ""]
    for o in outcomes:
        spec = o.job.spec
        lines += [f"## {spec.file}: {spec.title}", "",
                  f"- {spec.kind} notebook, config `{o.job.config.name}`, "
                  f"{'ok' if o.ok else 'FAILED: ' + o.error}, {o.seconds:.1f} s",
                  f"- executed notebook: [{o.executed.relative_to(out)}]({o.executed.relative_to(out)})",
                  f"- model: {_model_text(o)}"]
        prices = _prices_text(o.job.params, table)
        if prices:
            lines.append(f"- prices: {prices}")
        if spec.kind == "teaching":
            lines.append("- exercises: run with the reference answers filled in")
        if o.runs:
            lines.append(_runs_text(o))
        lines.append(f"- settings: `{json.dumps(_settings(o.job.params), default=str)}`")
        for f in o.figures:
            rel = Path(f["dir"]).relative_to(out)
            lines.append(f"- figure **{f['name']}**: {f.get('caption') or ''} "
                         f"[png]({rel / f['png']}) [svg]({rel / f['svg']}) [csv]({rel / f['csv']})")
            if f.get("provenance"):
                lines.append(f"  - {Provenance(**f['provenance']).text()}")
        lines.append("")
    path = out / "index.md"
    path.write_text("\n".join(lines))
    return path


def _runs_text(o: Outcome) -> str:
    from accelopt_nb.experiments import ArmOutcome

    bad = [ArmOutcome(**r) for r in o.incomplete_runs]
    text = f"- search runs: {len(o.runs) - len(bad)} of {len(o.runs)} complete"
    if bad:
        text += "; **NOT COMPLETE**: " + "; ".join(f"{b.where()}: {b.reason()}" for b in bad)
    return text


def _model_text(o: Outcome) -> str:
    """The model(s) behind a notebook's results: its figures' provenance when it made figures (a figure
    of baselines only says none, whatever the config names), else what its config points at."""
    stated = sorted({f["provenance"]["model"] for f in o.figures if f.get("provenance")})
    if stated:
        return ", ".join(stated)
    if o.job.endpoint == "fake":
        from accelopt_nb.fake_model import FAKE_MODEL_LABEL
        return FAKE_MODEL_LABEL
    p = o.job.params
    if o.job.spec.own_model:
        return o.job.spec.own_model
    models = {a.get("model", {}).get("model_preset") or a.get("model", {}).get("model")
              for a in p.get("arms") or [] if a.get("model")} - {None}
    named = p.get("model_preset") or p.get("model")
    return ", ".join(sorted(models | ({named} if named else set()))) or "none (simulator and performance model only)"


def _prices_text(params: dict[str, Any], table: Any) -> str:
    keys = {params.get("price")} | {(a.get("model") or {}).get("price") for a in params.get("arms") or []}
    parts = []
    for key in sorted(k for k in keys if k):
        try:
            price = table.get(key)
            parts.append(f"{key} {price.input:g}/{price.output:g} in/out")
        except AccelOptError:
            parts.append(f"{key} (not in the shipped table)")
    return ", ".join(parts)


def _settings(params: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in params.items() if k not in ("out_dir", "runs_dir", "base_url", "model_label")}


def _commit(checkout: Path) -> str:
    try:
        return subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip() or "not a git checkout"
    except (OSError, subprocess.SubprocessError):
        return "git unavailable"
