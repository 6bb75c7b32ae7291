"""The one place a search run is put together: problem, store, prices, ledger, cassette, client,
evaluation executor, memory, endpoint check, and the session.

The CLI (``accelopt optimize``), the magics (``%accelopt open``) and the batch experiments
(papermill) fill a :class:`LaunchSpec` and call :func:`open_session`, so they cannot drift on
what resuming means or which model a resumed run talks to::

    spec = LaunchSpec("silu", run_dir="runs/silu", preset="paper",
                      model={"base_url": "http://localhost:8000/v1", "model": "openai/gpt-oss-120b"})
    with open_session(spec) as session:
        report = session.run()

Resume modes: ``new`` starts a run; ``resume`` continues the given (or the latest) run and
fails if there is none; ``auto`` continues one if it exists and starts one otherwise. A resumed
run keeps its search settings, its price snapshot and its model (explicit model settings
override single fields); only the ``runtime`` settings (concurrency, pipelining) may change.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Mapping

from accelopt_nb.errors import ConfigError, EndpointUnreachableError

if TYPE_CHECKING:
    from accelopt_nb.evaluation.executors import Evaluator
    from accelopt_nb.llm import LLMClient, ModelConfig, PriceTable
    from accelopt_nb.search.config import SearchConfig
    from accelopt_nb.search.events import ProgressFn
    from accelopt_nb.search.problem import SearchProblem
    from accelopt_nb.search.session import Session
    from accelopt_nb.store import RunStore

__all__ = ["LaunchSpec", "ResumeMode", "model_config", "open_session", "preflight"]

ResumeMode = Literal["new", "resume", "auto"]
RUNTIME_KEYS = ("llm_concurrency", "eval_workers", "pipeline", "transport_failures_allowed")


@dataclass
class LaunchSpec:
    """Everything needed to open (or reopen) a search run. Only ``problem`` is required."""

    problem: str                                   # NKIBench name, or a label with task/kernel
    run_dir: str | Path | None = None              # default: runs/<problem>
    store: str | Path | None = None                # default: <run_dir>/accelopt.sqlite; or a postgresql:// URL
    task: str | Path | None = None                 # an NKIBench-format task file ...
    kernel: str | Path | None = None               # ... and its baseline kernel
    run_id: str | None = None
    resume: ResumeMode = "new"
    preset: str | Path = "paper"                   # search preset name or YAML file
    overrides: dict[str, Any] = field(default_factory=dict)  # dotted SearchConfig overrides
    model: "ModelConfig | Mapping[str, Any] | None" = None  # a ModelConfig, or base_url/model/model_preset/...
    prices: "str | Path | PriceTable | None" = None  # a price YAML overriding the shipped table
    cap_usd: float | None = None
    unpriced_ok: bool = True                       # False: refuse a model without a price (cost experiments)
    cassette: str | Path | None = None
    cassette_mode: str = "auto"
    llm_concurrency: int | None = None             # overrides runtime.llm_concurrency
    eval_workers: int | None = None                # overrides runtime.eval_workers
    pipeline: bool | None = None                   # overrides runtime.pipeline
    transport_failures_allowed: float | None = None  # overrides runtime.transport_failures_allowed
    scheduler: str | None = None                   # Dask scheduler address for evaluations
    eval_executor: "Evaluator | None" = None       # an evaluator the caller owns
    eval_cache: Any = True
    memory_in: str | Path | None = None            # start from this memory JSON
    prompts_dir: str | Path | None = None
    progress: "ProgressFn | None" = None
    check_endpoint: bool = True
    allow_model_change: bool = False               # resume a run with another model than it was made with

    @property
    def directory(self) -> Path:
        return Path(self.run_dir) if self.run_dir is not None else Path("runs") / self.problem

    def runtime_overrides(self) -> dict[str, Any]:
        values = {"llm_concurrency": self.llm_concurrency, "eval_workers": self.eval_workers,
                  "pipeline": self.pipeline, "transport_failures_allowed": self.transport_failures_allowed}
        return {k: v for k, v in values.items() if v is not None}


def model_config(stored: Mapping[str, Any] | None = None, **settings: Any) -> "ModelConfig":
    """The model of a run: a preset (a shipped name, or a YAML file of one's own), or the stored
    model of a resumed run, or an explicit ``base_url`` + ``model``; given settings override single
    fields of the first two. ``extra_body`` may be JSON text (``--extra-body``); ``retry_for_s``
    sets how long transient failures are retried (``--retry-for``)."""
    import dataclasses

    from accelopt_nb.llm import ModelConfig

    preset = settings.pop("model_preset", None)
    retry_for_s = settings.pop("retry_for_s", None)
    if isinstance(settings.get("extra_body"), str):
        settings["extra_body"] = _json_object(settings["extra_body"], "--extra-body")
    given = {k: v for k, v in settings.items() if v is not None}
    if preset:
        model = ModelConfig.from_preset(preset, **given)
    elif stored:
        model = ModelConfig.from_dict({**stored, **given})
    elif not (given.get("base_url") and given.get("model")):
        raise ConfigError("give a model preset (--model-preset NAME or FILE.yaml), or both --base-url and --model "
                          "(for a local vLLM: --base-url http://localhost:8000/v1 --model openai/gpt-oss-120b)")
    else:
        model = ModelConfig.from_dict(given)
    if retry_for_s is not None:
        model = model.replace(retry=dataclasses.replace(model.retry, retry_for_s=float(retry_for_s)))
    return model


def _json_object(text: str, option: str) -> dict[str, Any]:
    import json

    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{option} takes a JSON object, e.g. '{{\"top_k\": 20}}': {exc}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{option} takes a JSON object (settings sent in the request body), got {text!r}")
    return value


def preflight(model: "ModelConfig") -> str:
    """Fail in seconds when the endpoint does not answer (``GET /models``, nothing billed).

    Returns a warning (e.g. an unlisted model) or ""; raises :class:`EndpointUnreachableError`
    naming the URL and the reason. Works inside a running event loop (Jupyter)."""
    from accelopt_nb.llm.check import preflight as check
    from accelopt_nb.llm.loop_thread import LoopThread

    loop = LoopThread(name="accelopt-preflight")
    try:
        reachable, message = loop.run(check(model))
    finally:
        loop.close()
    if not reachable:
        raise EndpointUnreachableError(message + " (start the server, fix the base URL, or skip the check; "
                                       "`accelopt llm check` diagnoses the endpoint)")
    return message


def open_session(spec: LaunchSpec) -> "Session":
    """Open the run described by ``spec`` (see the module docstring); the session owns and closes
    the LLM client and any evaluator made here."""
    from accelopt_nb.store import RunStore

    _validate(spec)
    store, run_id, record = _find_run(spec)
    model, warning, change = _model(spec, record)
    prices = _prices(spec, record)
    problem, config, run_id = _search_setup(spec, record, run_id)
    store = store or RunStore.open(spec.directory)   # one connection: the ledger's and the session's
    client = _client(spec, store, run_id, model, prices, record, config)
    try:
        session = _session(spec, store, run_id, record, problem, config, client, model, prices)
    except BaseException:
        client.close()
        raise
    session.endpoint_warning = warning
    if change:
        store.add_run_note(run_id, change)
    return session


def _validate(spec: LaunchSpec) -> None:
    if not isinstance(spec, LaunchSpec):
        raise ConfigError(f"open_session takes a LaunchSpec, got {type(spec).__name__}")
    if spec.resume not in ("new", "resume", "auto"):
        raise ConfigError(f"resume must be new, resume or auto, got {spec.resume!r}")
    if (spec.task is None) != (spec.kernel is None):
        raise ConfigError("--task and --kernel go together (a task file and its baseline kernel)")


def _find_run(spec: LaunchSpec) -> tuple["RunStore | None", str | None, dict[str, Any] | None]:
    """The run store of the run directory (if there is one), the run id, and the record of the
    run to resume (None: a new run)."""
    from accelopt_nb.store import DEFAULT_FILENAME, RunStore

    from accelopt_nb.store.backends import is_database_url

    run_dir = spec.directory
    shared = spec.store is not None and is_database_url(spec.store)
    if spec.store is not None:
        store: RunStore | None = RunStore(spec.store)
    else:
        store = RunStore.open(run_dir) if (run_dir / DEFAULT_FILENAME).is_file() else None
    where = store.location if spec.store is not None and store is not None else str(run_dir)
    run_id, record = spec.run_id, None
    if spec.resume != "new" and store is not None:
        if run_id is None and shared and spec.resume == "resume":
            raise ConfigError(f"{where} holds everyone's runs: name the run to resume (--run-id)")
        # In a shared database, the latest run may be anyone's: "auto" resumes only a named run there.
        run_id = run_id or (None if shared else store.latest_run_id())
        if run_id is not None and run_id in store.run_ids():
            record = store.get_run(run_id)
    if spec.resume == "resume" and record is None:
        raise ConfigError(f"no run store in {run_dir}: nothing to resume" if store is None else
                          f"nothing to resume in {where}: " + (f"no run {spec.run_id!r}" if spec.run_id else "no runs"))
    return store, run_id, record


def _model(spec: LaunchSpec, record: dict[str, Any] | None) -> tuple["ModelConfig", str, str]:
    """The run's model (a resumed run's stored one, with given fields overriding), checked; what the
    endpoint check warned about; and the note to record when a resumed run changes its model (refused
    unless ``spec.allow_model_change``)."""
    stored = (record["config"].get("llm") or {}).get("model") if record else None
    if spec.model is None or isinstance(spec.model, Mapping):
        model = model_config(stored, **dict(spec.model or {}))
    else:
        model = spec.model
    change = _model_change(stored, model, record.get("run_id") if record else None, spec.allow_model_change)
    require_price(model, spec.unpriced_ok)
    replaying = spec.cassette is not None and spec.cassette_mode == "replay"
    warning = ""
    if spec.check_endpoint and not replaying:
        warning = preflight(model)
        if warning and spec.progress is None:
            import sys
            print(warning, file=sys.stderr)
    return model, warning, change


def _model_change(stored: Mapping[str, Any] | None, model: "ModelConfig", run_id: str | None,
                  allowed: bool) -> str:
    """'' when a resumed run keeps its model; the note to record when it may change; else refused."""
    if not stored or not stored.get("model") or stored.get("model") == model.model:
        return ""
    was = f"{stored['model']!r}" + (f" at {stored['base_url']}" if stored.get("base_url") else "")
    if not allowed:
        raise ConfigError(f"run {run_id} was made with model {was}; resuming it with {model.model!r} would mix two "
                          "models in one run. Resume with the run's own model (give no model settings), start a new "
                          "run, or allow it (--allow-model-change; allow_model_change=True) and it is recorded")
    from datetime import datetime, timezone

    return (f"{datetime.now(timezone.utc).isoformat(timespec='seconds')}: model changed from {was} to "
            f"{model.model!r} at {model.base_url} (allowed on resume)")


def _prices(spec: LaunchSpec, record: dict[str, Any] | None) -> "PriceTable":
    """A resumed run's price snapshot; else the shipped table, updated from a price YAML if given."""
    from accelopt_nb.llm import PriceTable

    if record is not None and record.get("prices"):
        return PriceTable.from_snapshot(record["prices"])
    if isinstance(spec.prices, (str, Path)):
        return PriceTable.load(spec.prices, base=PriceTable.default())
    return spec.prices or PriceTable.default()


def _search_setup(spec: LaunchSpec, record: dict[str, Any] | None, run_id: str | None
                  ) -> tuple["SearchProblem | None", "SearchConfig | None", str]:
    """The problem (from files, or for a new run by name), a new run's config, and the run id.
    A resumed run keeps its config and, unless files are given, its stored problem."""
    from accelopt_nb.search.config import SearchConfig
    from accelopt_nb.search.problem import SearchProblem
    from accelopt_nb.search.state import new_run_id

    problem = None
    if spec.task is not None:
        problem = SearchProblem.from_files(spec.task, spec.kernel, name=spec.problem)
    if record is not None:
        assert run_id is not None
        return problem, None, run_id
    config = SearchConfig.from_preset(spec.preset, **dict(spec.overrides))
    config = config.with_overrides(**{f"runtime.{k}": v for k, v in spec.runtime_overrides().items()})
    if problem is None:
        problem = SearchProblem.from_nkibench(spec.problem, config.evaluation.shape_preset)
    return problem, config, run_id or new_run_id(problem.name)


def _client(spec: LaunchSpec, store: "RunStore", run_id: str, model: "ModelConfig", prices: "PriceTable",
            record: dict[str, Any] | None, config: "SearchConfig | None") -> "LLMClient":
    """The LLM client, with the run's ledger (and spending cap) and the cassette, if any."""
    from accelopt_nb.llm import Cassette, Ledger, LLMClient

    if config is not None:
        concurrency = config.runtime.llm_concurrency
    else:
        stored_runtime = dict((record or {})["config"]["search"].get("runtime") or {})
        concurrency = spec.llm_concurrency or stored_runtime.get("llm_concurrency", 16)
    ledger = Ledger.for_store(store, run_id, prices=prices, cap_usd=spec.cap_usd)
    cassette = Cassette(spec.cassette, spec.cassette_mode) if spec.cassette is not None else None  # type: ignore[arg-type]
    return LLMClient(model, ledger, cassette, concurrency=concurrency)


def _session(spec: LaunchSpec, store: "RunStore", run_id: str, record: dict[str, Any] | None,
             problem: "SearchProblem | None", config: "SearchConfig | None", client: "LLMClient",
             model: "ModelConfig", prices: "PriceTable") -> "Session":
    """Create or resume the session; it closes the client and any evaluator made here."""
    from accelopt_nb.agents.prompts import PromptSet
    from accelopt_nb.search.memory import OptimizationMemory
    from accelopt_nb.search.session import Session

    executor = spec.eval_executor
    owned_executor = None
    if executor is None and spec.scheduler:
        from accelopt_nb.evaluation import DaskEvaluator
        executor = owned_executor = DaskEvaluator(spec.scheduler)
    memory = OptimizationMemory.load(spec.memory_in) if spec.memory_in else None
    # A run keeps the prompt directory it started with: a resume without --prompts-dir uses it again.
    prompts_dir = spec.prompts_dir or ((record["config"].get("llm") or {}).get("prompts_dir") if record else None)
    prompts = PromptSet(prompts_dir) if prompts_dir else None
    common: dict[str, Any] = dict(llm=client, memory=memory, progress=spec.progress, eval_executor=executor,
                                  eval_cache=spec.eval_cache, store=store, prompts=prompts)
    try:
        if record is not None:
            session = Session.resume(spec.directory, run_id=run_id, problem=problem,
                                     runtime=spec.runtime_overrides(), **common)
        else:
            assert config is not None
            if memory is not None:
                memory.capacity = config.memory.capacity
            llm_settings = {"model": model.to_dict(), "prompts": (prompts or PromptSet()).source,
                            "prompts_dir": str(Path(prompts_dir).resolve()) if prompts_dir else None}
            session = Session.create(problem, run_dir=spec.directory, config=config, run_id=run_id,
                                     llm_settings=llm_settings, prices=prices.snapshot(), **common)
    except BaseException:
        if owned_executor is not None:
            owned_executor.shutdown()
        raise
    session.on_close.append(client.close)
    if owned_executor is not None:
        session.on_close.append(owned_executor.shutdown)
    return session


def require_price(model: "ModelConfig", unpriced_ok: bool) -> None:
    """A cost experiment (``unpriced_ok=False``) refuses a model without a price: it would count as free."""
    if model.price is None and not unpriced_ok:
        raise ConfigError(f"model {model.model!r} has no price: a cost experiment would report it as free. "
                          "Give it a price key (see `accelopt llm prices`) or allow unpriced models "
                          "(`accelopt reproduce --unpriced-ok`, `unpriced_ok: true` in the papermill config); "
                          "its figures then say 'unpriced'")
