"""LLM access for accelopt_nb: client, per-model settings, prices, ledger, cassettes, serving.

Typical use::

    from accelopt_nb.llm import LLMClient, ModelConfig, Ledger, Cassette

    config = ModelConfig.from_preset("gpt-oss-120b")          # vLLM on localhost:8000
    ledger = Ledger(cap_usd=5.0)                              # shipped, dated price table
    with LLMClient(config, ledger, concurrency=8) as client:
        c = client.complete_sync("Say hi", role="planner", run_id="demo", iteration=0)
    ledger.summary()

See ``docs/llm_and_store.md`` and the error contract in :mod:`accelopt_nb.llm.client`.
"""
from accelopt_nb.errors import (BudgetExceededError, LLMEndpointError, LLMError, ReplayMissError,
                                UnusableOutputError)
from accelopt_nb.llm.cassette import Cassette, request_key
from accelopt_nb.llm.client import LLMClient
from accelopt_nb.llm.completion import Completion, Rejection
from accelopt_nb.llm.config import ModelConfig, load_model_presets
from accelopt_nb.llm.ledger import JsonlLedgerSink, Ledger, LLMCallRecord, summarize_calls
from accelopt_nb.llm.prices import Price, PriceTable
from accelopt_nb.llm.response import Usage, extract_usage, parse_chat_response
from accelopt_nb.llm.retry import RetryPolicy

__all__ = [
    "BudgetExceededError", "Cassette", "Completion", "JsonlLedgerSink", "LLMCallRecord", "LLMClient",
    "LLMEndpointError", "LLMError", "Ledger", "ModelConfig", "Price", "PriceTable", "Rejection",
    "ReplayMissError", "RetryPolicy", "UnusableOutputError", "Usage", "extract_usage",
    "load_model_presets", "parse_chat_response", "request_key", "summarize_calls",
]
