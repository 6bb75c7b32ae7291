"""Is an LLM endpoint usable? Reachability, model listed, one tiny completion, tokens/s."""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import openai

from accelopt_nb.errors import AccelOptError
from accelopt_nb.llm.client import LLMClient
from accelopt_nb.llm.config import ModelConfig
from accelopt_nb.llm.retry import RetryPolicy, classify_failure

__all__ = ["CheckReport", "check_endpoint", "check_endpoint_sync", "preflight"]

CHECK_PROMPT = "Reply with the single word: ready"


@dataclass
class CheckReport:
    base_url: str
    model: str
    reachable: bool = False
    models: list[str] = field(default_factory=list)
    model_listed: bool = False
    completion_ok: bool = False
    reply: str | None = None
    latency_s: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    tokens_per_s: float | None = None
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.reachable and self.model_listed and self.completion_ok

    def lines(self) -> list[str]:
        def mark(flag: bool) -> str:
            return "ok  " if flag else "FAIL"

        listed = ", ".join(self.models[:8]) + (" ..." if len(self.models) > 8 else "")
        out = [f"endpoint   {self.base_url}",
               f"[{mark(self.reachable)}] reachable (GET /models)",
               f"[{mark(self.model_listed)}] model {self.model!r} listed"
               + (f" (served: {listed})" if self.reachable else "")]
        line = f"[{mark(self.completion_ok)}] tiny completion"
        if self.completion_ok and self.latency_s is not None:
            line += (f": {self.latency_s:.2f} s, {self.prompt_tokens} prompt + {self.completion_tokens} "
                     f"completion tokens ({self.reasoning_tokens} reasoning)")
            if self.tokens_per_s is not None:
                line += f", {self.tokens_per_s:.1f} tokens/s"
            line += f", reply {(self.reply or '').strip()[:60]!r}"
        out.append(line)
        out += [f"error: {e}" for e in self.errors]
        return out


def _describe(exc: BaseException) -> str:
    failure = classify_failure(exc)
    return failure.message if failure is not None else str(exc)


async def check_endpoint(config: ModelConfig, *, max_tokens: int | None = 512,
                         prompt: str = CHECK_PROMPT) -> CheckReport:
    """Run the checks; never raises for endpoint problems (they land in ``errors``).

    ``tokens_per_s`` is completion tokens over the whole request time, prefill included, so
    it underestimates pure decode speed for long prompts (here the prompt is tiny).
    """
    # Two attempts at most: a check should answer quickly, not ride out an outage.
    config = config.replace(retry=RetryPolicy(max_attempts=2, base_delay_s=0.5), max_unusable_retries=0)
    report = CheckReport(base_url=config.base_url, model=config.model)
    client = LLMClient(config, concurrency=1)
    try:
        try:
            report.models = await client.list_models()
            report.reachable = True
            report.model_listed = config.model in report.models
            if not report.model_listed:
                report.errors.append(f"model {config.model!r} is not served here")
        except (openai.APIError, AccelOptError) as exc:
            report.errors.append(f"GET /models failed: {_describe(exc)}")
        if report.reachable:
            started = time.monotonic()
            try:
                c = await client.complete(prompt, role="check", params={"max_tokens": max_tokens})
            except (openai.APIError, AccelOptError) as exc:
                report.errors.append(f"completion failed: {_describe(exc)}")
            else:
                wall = time.monotonic() - started
                report.completion_ok = c.ok and bool((c.text or "").strip() or c.reasoning)
                report.reply = c.text
                report.latency_s = c.latency_s or wall
                report.prompt_tokens = c.usage.prompt_tokens
                report.completion_tokens = c.usage.completion_tokens
                report.reasoning_tokens = c.usage.reasoning_tokens
                if report.latency_s > 0 and c.usage.completion_tokens:
                    report.tokens_per_s = c.usage.completion_tokens / report.latency_s
                if not c.ok:
                    report.errors.append(f"completion failed: {c.error}")
                elif not report.completion_ok:
                    report.errors.append("completion returned no text")
    finally:
        await client.aclose()
    return report


async def preflight(config: ModelConfig) -> tuple[bool, str]:
    """Cheap reachability check before a long run: ``GET /models`` only, no completion billed.

    Returns (reachable, message); an unlisted model is reachable with a warning message, since some
    OpenAI-compatible gateways do not list every model they serve.
    """
    config = config.replace(retry=RetryPolicy(max_attempts=2, base_delay_s=0.5), max_unusable_retries=0)
    client = LLMClient(config, concurrency=1)
    try:
        models = await client.list_models()
    except (openai.APIError, AccelOptError) as exc:
        return False, f"cannot reach the LLM endpoint {config.base_url}: {_describe(exc)}"
    finally:
        await client.aclose()
    if config.model not in models:
        listed = ", ".join(models[:8]) or "none"
        return True, f"warning: model {config.model!r} is not listed by {config.base_url} (served: {listed})"
    return True, ""


def check_endpoint_sync(config: ModelConfig, **kwargs: object) -> CheckReport:
    """:func:`check_endpoint` for scripts (no running event loop in this thread)."""
    return asyncio.run(check_endpoint(config, **kwargs))  # type: ignore[arg-type]
