"""Open a search session with its LLM client, ledger and price table in one call.

The magics and the batch experiments share this; the CLI keeps its own richer option set.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from accelopt_nb.errors import ConfigError


def model_config(*, base_url: str | None = None, model: str | None = None, model_preset: str | None = None,
                 **overrides: Any):
    """A ModelConfig from a preset name, or from an explicit endpoint and model name."""
    from accelopt_nb.llm import ModelConfig

    given = {k: v for k, v in dict(overrides, base_url=base_url, model=model).items() if v is not None}
    if model_preset:
        return ModelConfig.from_preset(model_preset, **given)
    if not (base_url and model):
        raise ConfigError("give model_preset, or both base_url and model")
    return ModelConfig.from_dict(given)


def open_session(problem: str, run_dir: str | Path, *, model: Any, preset: str | Path = "smoke",
                 overrides: Mapping[str, Any] | None = None, run_id: str | None = None, resume: bool = False,
                 cap_usd: float | None = None, prices: Any = None, **session_kwargs: Any):
    """Create (or, with ``resume``, reopen the latest or the given) run of ``problem`` in ``run_dir``.

    ``model``: a ModelConfig. ``overrides``: dotted SearchConfig overrides (e.g. ``{"iterations": 4,
    "memory.enabled": False}``). A resumed run prices its calls with the snapshot it recorded.
    """
    from accelopt_nb.llm import Ledger, LLMClient, PriceTable
    from accelopt_nb.search.config import SearchConfig
    from accelopt_nb.search.session import Session, _new_run_id
    from accelopt_nb.store import DEFAULT_FILENAME, RunStore

    run_dir = Path(run_dir)
    if resume and (run_dir / DEFAULT_FILENAME).is_file():
        store = RunStore.open(run_dir)
        run_id = run_id or store.latest_run_id()
        if run_id is not None:
            snapshot = store.get_run(run_id)["prices"]
            table = PriceTable.from_snapshot(snapshot) if snapshot else (prices or PriceTable.default())
            client = LLMClient(model, Ledger.for_store(store, run_id, prices=table, cap_usd=cap_usd))
            return Session.resume(run_dir, run_id=run_id, llm=client, **session_kwargs)
    config = SearchConfig.from_preset(preset, **dict(overrides or {}))
    store = RunStore.open(run_dir)
    run_id = run_id or _new_run_id(problem)
    table = prices or PriceTable.default()
    client = LLMClient(model, Ledger.for_store(store, run_id, prices=table, cap_usd=cap_usd))
    return Session.create(problem, run_dir=run_dir, config=config, run_id=run_id, llm=client,
                          llm_settings={"model": model.to_dict()}, prices=table.snapshot(), **session_kwargs)
