"""The LLM client: OpenAI-compatible chat completions with retries, a ledger and cassettes.

Error contract (what callers, e.g. the agents, must handle):

* :meth:`LLMClient.complete` **returns** a :class:`Completion` for every per-call failure,
  so one bad call never aborts a step: ``status == "error"`` (no response after transport
  retries, or a request the server refused such as a too-long prompt) or
  ``status == "unusable"`` (every response rejected by ``validate``; a validator that
  raises anything, not only :class:`UnusableOutputError`, rejects that one answer). Check
  ``completion.ok``, or call ``completion.raise_for_status()``.
* It **raises** only when continuing makes no sense: :class:`BudgetExceededError` (the
  spending cap is reached: stop the run), :class:`LLMEndpointError` (bad API key, unknown
  model or URL: every call would fail), :class:`ReplayMissError` (the cassette does not
  match this run), :class:`ConfigError` (a missing API key variable).
* :meth:`LLMClient.complete_many` never raises for the cap: calls refused by it come back
  with ``status == "budget_exceeded"``, so the answers already paid for are kept.
* :meth:`LLMClient.complete_each` streams: it hands each answer to a callback as it arrives
  (the callback may add follow-up calls), stops starting calls when asked to, and raises the
  first fatal error only after the calls in flight have finished and been handed over.

Every call, failed or not, is recorded in the ledger with its tokens and cost.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import json
import random
import time
import uuid
import weakref
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Mapping, Sequence

import openai

from accelopt_nb.errors import (BudgetExceededError, ConfigError, LLMEndpointError, LLMError,
                                UnusableOutputError)
from accelopt_nb.llm.cassette import Cassette, request_key
from accelopt_nb.llm.completion import Completion, Rejection
from accelopt_nb.llm.config import ModelConfig
from accelopt_nb.llm.ledger import Ledger, LLMCallRecord
from accelopt_nb.llm.loop_thread import LoopThread
from accelopt_nb.llm.prices import PriceTable
from accelopt_nb.llm.response import MalformedResponse, ParsedResponse, Usage, parse_chat_response
from accelopt_nb.llm.retry import Failure, classify_failure

__all__ = ["CallRequest", "LLMClient", "Messages", "OnDone", "Validator"]

Messages = str | Sequence[Mapping[str, Any]]

# Standard Chat Completions settings the SDK accepts as keyword arguments; any other setting
# goes into extra_body.
_SDK_PARAMS = {"temperature", "top_p", "max_tokens", "max_completion_tokens", "reasoning_effort", "seed",
               "stop", "frequency_penalty", "presence_penalty", "response_format", "logprobs",
               "top_logprobs", "logit_bias", "user", "extra_body", "tools", "tool_choice"}
_UNSUPPORTED_PARAMS = {"n", "stream", "stream_options", "model", "messages"}
Validator = Callable[[str], Any]


@dataclass
class CallRequest:
    """One logical call for :meth:`LLMClient.complete_each`.

    ``key`` is the caller's name for the answer (handed back with it). ``slot`` names the call
    within its run (e.g. the kernel id it will produce); it makes the cassette key exact, so a
    replay pairs each answer with the same call however the calls were scheduled. ``client``
    routes the call to another model (e.g. the executor's) on the same fan-out.
    """

    messages: Messages
    role: str
    key: Any = None
    validate: Validator | None = None
    sample: int | None = None
    slot: str | None = None
    params: Mapping[str, Any] | None = None
    run_id: str | None = None
    iteration: int | None = None
    unusable_retries: int | None = None
    client: "LLMClient | None" = None


# Called with each finished call; may return follow-up calls to start (pipelining).
OnDone = Callable[[CallRequest, "Completion"], "Iterable[CallRequest] | None"]
_FATAL = (BudgetExceededError, LLMError, ConfigError)


@dataclass
class _Response:
    """One response obtained for one request (live or replayed)."""

    data: dict[str, Any]
    parsed: ParsedResponse
    latency_s: float
    attempts: int
    failures: list[str]
    replayed: bool


@dataclass
class _Failed:
    """No usable response for one request after its transport retries."""

    failure: Failure
    latency_s: float
    attempts: int
    failures: list[str]


@dataclass
class _CallState:
    """What one logical call has consumed so far (for the ledger and the cap)."""

    usage: Usage = field(default_factory=Usage)
    cost: float | None = 0.0
    attempts: int = 0
    failures: list[str] = field(default_factory=list)
    rejections: list[Rejection] = field(default_factory=list)
    replayed: bool = False
    latency_s: float = 0.0

    def add(self, got: "_Response | _Failed") -> None:
        self.attempts += got.attempts
        self.failures.extend(got.failures)
        self.latency_s += got.latency_s


def _validated(validate: Validator, text: str) -> tuple[bool, Any, str]:
    """(ok, parsed value, rejection reason) of one answer.

    :class:`UnusableOutputError` rejects the answer. Any other exception is the validator's
    failure on this answer, never the step's: it is run once more on the same text (a race in a
    parser can pass the second time) and, if it fails again, the answer is rejected with the
    exception named, so one odd answer cannot abort the calls around it.
    """
    for attempt in (1, 2):
        try:
            return True, validate(text), ""
        except UnusableOutputError as exc:
            return False, None, str(exc) or "unusable output"
        except Exception as exc:  # noqa: BLE001 - any validator failure makes this one answer unusable
            if attempt == 2:
                return False, None, f"the answer check failed: {type(exc).__name__}: {exc}"
    raise AssertionError("unreachable")  # pragma: no cover


def _now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _normalize_messages(messages: Messages) -> list[dict[str, Any]]:
    if isinstance(messages, str):
        return [{"role": "user", "content": messages}]
    out = []
    for m in messages:
        if not isinstance(m, Mapping) or "role" not in m or "content" not in m:
            raise ConfigError(f"each message must be a mapping with 'role' and 'content', got {m!r}")
        out.append(dict(m))
    return out


class LLMClient:
    """Chat completions against one model (see the module docstring for the error contract).

    ``concurrency`` bounds the requests in flight per event loop. The async methods run on
    the caller's loop; the ``*_sync`` methods run on a private worker loop, so they also work
    inside Jupyter, whose own loop is already running.
    """

    def __init__(self, config: ModelConfig, ledger: Ledger | None = None,
                 cassette: Cassette | None = None, concurrency: int = 8, *,
                 prices: PriceTable | None = None, seed: int | None = None) -> None:
        if concurrency < 1:
            raise ConfigError(f"concurrency must be >= 1, got {concurrency}")
        self.config = config
        self.ledger = ledger
        self.cassette = cassette
        self.concurrency = concurrency
        self.prices = ledger.prices if ledger is not None else (prices or PriceTable.default())
        if config.price is not None:
            self.prices.get(config.price)  # an unknown price key fails now, not after a paid call
        if ledger is not None:
            ledger.require_price(config.price, config.model)
        self._rng = random.Random(seed)
        self._longest_output = 0  # completion tokens of the longest answer so far (cost estimates)
        # One SDK client and one semaphore per event loop: both bind to the loop they first run on.
        self._clients: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, openai.AsyncOpenAI]" = \
            weakref.WeakKeyDictionary()
        self._semaphores: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore]" = \
            weakref.WeakKeyDictionary()
        self._worker = LoopThread()

    # -- plumbing ----------------------------------------------------------------------
    def _sdk(self) -> openai.AsyncOpenAI:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            client = openai.AsyncOpenAI(api_key=self.config.api_key(), base_url=self.config.base_url,
                                        max_retries=0, timeout=self.config.timeout_s)
            self._clients[loop] = client
        return client

    def _semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        sem = self._semaphores.get(loop)
        if sem is None:
            sem = asyncio.Semaphore(self.concurrency)
            self._semaphores[loop] = sem
        return sem

    def build_request(self, messages: Messages, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The request body sent (and hashed for cassettes): model, messages, settings."""
        request: dict[str, Any] = {"model": self.config.model, "messages": _normalize_messages(messages)}
        request.update(self.config.request_params())
        for key, value in (params or {}).items():
            if key in _UNSUPPORTED_PARAMS:
                raise ConfigError(f"request setting {key!r} is not supported: the client reads one "
                                  "non-streamed choice per request (use complete_many for several)")
            if key not in _SDK_PARAMS:
                # Server-specific settings (vLLM's top_k, min_p...) travel in the JSON body.
                request.setdefault("extra_body", {})[key] = value
            elif value is None:
                request.pop(key, None)
            else:
                request[key] = value
        return request

    def _cost(self, usage: Usage) -> float | None:
        return None if self.config.price is None else self.prices.cost(self.config.price, usage)

    def _estimate(self, request: Mapping[str, Any]) -> float:
        """A call's likely cost, held against the cap while it runs: about 3 characters per
        prompt token, and ``max_tokens`` of output; with no ``max_tokens`` (the gpt-oss presets
        leave the limit to the server), the larger of ``config.reserve_output_tokens`` and the
        longest answer seen so far."""
        if self.config.price is None:
            return 0.0
        prompt = sum(len(str(m.get("content", ""))) for m in request.get("messages", [])) // 3
        output = request.get("max_tokens") or request.get("max_completion_tokens") \
            or max(self.config.reserve_output_tokens, self._longest_output)
        return self.prices.cost(self.config.price, Usage(prompt_tokens=prompt, completion_tokens=int(output)))

    def _check_budget(self, state: _CallState) -> None:
        if self.ledger is not None:
            self.ledger.check_budget(pending_usd=state.cost or 0.0)

    # -- one response, with transport retries --------------------------------------------
    async def _obtain(self, request: dict[str, Any], key: str, state: _CallState, *,
                      sample: int | None, retry: int, slot: str | None = None) -> _Response | _Failed:
        cassette = self.cassette
        if cassette is not None and cassette.replays:
            self._check_budget(state)
            legacy = request_key(request, sample=sample, retry=retry) if slot is not None else None
            entry = cassette.lookup(key, request, fallback=legacy)
            if entry is not None:
                return _Response(entry.response, parse_chat_response(entry.response), entry.latency_s,
                                 entry.attempts, list(entry.transport_failures), replayed=True)
        policy = self.config.retry
        failures: list[str] = []
        started = time.monotonic()
        last: Failure | None = None
        attempt = 0
        while True:
            attempt += 1
            self._check_budget(state)
            try:
                raw = await self._sdk().chat.completions.with_raw_response.create(
                    **request, timeout=self.config.timeout_s)
                data = json.loads(raw.http_response.text)
                parsed = parse_chat_response(data)
            except (openai.APIError, MalformedResponse, json.JSONDecodeError, UnicodeDecodeError) as exc:
                failure = classify_failure(exc)
                if failure is None:  # pragma: no cover - classify covers every caught type
                    raise
                failures.append(failure.kind)
                last = failure
                if failure.fatal:
                    state.attempts += len(failures)  # so the ledger row shows the refused request
                    state.failures.extend(failures)
                    raise LLMEndpointError(f"{self.config.base_url} refused model {self.config.model!r}: "
                                           f"{failure.message}") from exc
                if not failure.transient or policy.gives_up(attempt, time.monotonic() - started):
                    break
                await asyncio.sleep(policy.delay(attempt, failure.retry_after, self._rng))
                continue
            latency = time.monotonic() - started
            if cassette is not None and cassette.records:
                cassette.record(key, request, data, latency_s=latency, attempts=attempt,
                                transport_failures=failures, sample=sample, retry=retry, slot=slot)
            return _Response(data, parsed, latency, attempt, failures, replayed=False)
        assert last is not None
        return _Failed(last, time.monotonic() - started, len(failures), failures)

    # -- one logical call ----------------------------------------------------------------
    async def complete(self, messages: Messages, *, role: str, run_id: str | None = None,
                       iteration: int | None = None, validate: Validator | None = None,
                       sample: int | None = None, params: Mapping[str, Any] | None = None,
                       slot: str | None = None, unusable_retries: int | None = None) -> Completion:
        """Ask the model once (plus bounded retries); see the module docstring for errors.

        ``validate(text)`` returns the parsed value (stored in ``Completion.parsed``) or
        raises :class:`UnusableOutputError`, which re-asks the model up to
        ``config.max_unusable_retries`` times. ``params`` overrides request settings for
        this call (a ``None`` value removes a setting). ``sample`` is the sample index: with a
        configured ``seed`` the request carries ``seed + sample`` (so N samples of one prompt
        differ), and it distinguishes repeated identical requests in a cassette. ``slot``
        names the call within its run for the cassette (see :class:`CallRequest`).
        ``unusable_retries`` overrides ``config.max_unusable_retries`` for this call.

        An answer cut off by the token limit (``finish_reason == "length"``) is never
        accepted: it counts as an unusable answer.
        """
        request = self.build_request(messages, params)
        if sample is not None and isinstance(request.get("seed"), int) and not isinstance(request["seed"], bool):
            request["seed"] = request["seed"] + sample
        retries = self.config.max_unusable_retries if unusable_retries is None else unusable_retries
        if retries < 0:
            raise ConfigError(f"unusable_retries must be >= 0, got {retries}")
        call = Completion(call_id=uuid.uuid4().hex, status="error", model=self.config.model, role=role,
                          run_id=run_id, iteration=iteration, sample=sample,
                          request_hash=request_key(request, sample=sample, slot=slot), started_at=_now_iso())
        state = _CallState()
        held = 0.0
        try:
            async with self._semaphore():
                # Reserve only once admitted, so calls queued behind the concurrency limit hold nothing.
                held = self.ledger.reserve(self._estimate(request)) if self.ledger is not None else 0.0
                try:
                    await self._run_call(call, request, state, validate, sample, slot, retries)
                finally:
                    if self.ledger is not None:
                        self.ledger.release(held)
        except BudgetExceededError as exc:
            call.status, call.error = "budget_exceeded", str(exc)
            # A call refused before its first request cost nothing and is not a call;
            # one stopped between unusable-output retries has billed responses to record.
            self._finish(call, state, record=state.attempts > 0)
            raise
        except BaseException as exc:  # a fatal endpoint error, a cancellation, a bug
            call.status, call.error = "error", f"{type(exc).__name__}: {exc}"
            # Record what reached the server; a config error or replay miss sent nothing.
            self._finish(call, state, record=state.attempts > 0)
            raise
        self._finish(call, state)
        return call

    async def _run_call(self, call: Completion, request: dict[str, Any], state: _CallState,
                        validate: Validator | None, sample: int | None, slot: str | None,
                        retries: int) -> None:
        for retry in range(retries + 1):
            key = request_key(request, sample=sample, retry=retry, slot=slot)
            got = await self._obtain(request, key, state, sample=sample, retry=retry, slot=slot)
            state.add(got)
            if isinstance(got, _Failed):
                call.status, call.error = "error", got.failure.message
                return
            state.replayed = state.replayed or got.replayed
            state.usage = state.usage + got.parsed.usage
            self._longest_output = max(self._longest_output, got.parsed.usage.completion_tokens)
            cost = self._cost(got.parsed.usage)
            state.cost = None if cost is None or state.cost is None else state.cost + cost
            call.text, call.reasoning = got.parsed.text, got.parsed.reasoning
            call.finish_reason = got.parsed.finish_reason
            if got.parsed.finish_reason == "length":
                # Whatever parses in a cut-off answer is not what the model meant to say.
                state.rejections.append(Rejection(got.parsed.text, "truncated: finish_reason=length",
                                                  got.parsed.reasoning))
                continue
            if validate is None:
                call.status = "ok"
                return
            ok, value, reason = _validated(validate, got.parsed.text)
            if not ok:
                state.rejections.append(Rejection(got.parsed.text, reason, got.parsed.reasoning))
                continue
            call.parsed = value
            call.status = "ok"
            return
        call.status = "unusable"
        call.error = f"{len(state.rejections)} unusable response(s): {state.rejections[-1].reason}"

    def _finish(self, call: Completion, state: _CallState, record: bool = True) -> None:
        call.usage, call.cost_usd = state.usage, state.cost
        call.attempts, call.transport_failures = state.attempts, list(state.failures)
        call.rejections, call.replayed = list(state.rejections), state.replayed
        # Time spent on requests (not queued behind the concurrency limit); replayed
        # responses contribute their recorded latency, so a replay reproduces the original.
        call.latency_s = state.latency_s
        if record and self.ledger is not None:
            self.ledger.record(LLMCallRecord.from_completion(call, self.config.price))

    # -- batches and sync wrappers -------------------------------------------------------
    async def complete_many(self, requests: Iterable[Mapping[str, Any]]) -> list[Completion]:
        """Run several calls concurrently (each a dict of :meth:`complete` arguments).

        Per-call failures come back as failed Completions; calls refused by the spending
        cap come back with ``status == "budget_exceeded"``. Endpoint, replay and config
        errors are raised after every call has finished.
        """
        specs = [dict(r) for r in requests]
        results = await asyncio.gather(*(self.complete(**s) for s in specs), return_exceptions=True)
        out: list[Completion] = []
        fatal: BaseException | None = None
        for spec, res in zip(specs, results):
            if isinstance(res, Completion):
                out.append(res)
            elif isinstance(res, BudgetExceededError):
                out.append(Completion(call_id=uuid.uuid4().hex, status="budget_exceeded",
                                      model=self.config.model, role=spec.get("role", "?"),
                                      run_id=spec.get("run_id"), iteration=spec.get("iteration"),
                                      sample=spec.get("sample"), error=str(res), cost_usd=0.0))
            else:
                if isinstance(res, _FATAL) or not isinstance(res, Exception):
                    fatal = fatal or res  # a bug in one call (any other Exception) fails that call only
                out.append(Completion(call_id=uuid.uuid4().hex, status="error", model=self.config.model,
                                      role=spec.get("role", "?"), run_id=spec.get("run_id"),
                                      iteration=spec.get("iteration"), sample=spec.get("sample"),
                                      error=f"{type(res).__name__}: {res}"))
        if fatal is not None:
            raise fatal
        return out

    async def complete_each_async(self, requests: Iterable[CallRequest], on_done: OnDone, *,
                                  stop: Callable[[], bool] | None = None) -> list[CallRequest]:
        """Stream calls: ``on_done(request, completion)`` runs as each call finishes, on this loop.

        At most ``concurrency`` calls are in flight; follow-up calls returned by ``on_done``
        join the queue. Once ``stop()`` is true, or a fatal error (spending cap, endpoint,
        replay miss, config) has occurred, no new call starts; the calls in flight finish and
        are handed over. Returns the requests never started; then raises the fatal error, if any.
        """
        queue = list(requests)[::-1]  # popped from the end: first in, first started
        running: dict[asyncio.Future, CallRequest] = {}
        not_started: list[CallRequest] = []
        fatal: BaseException | None = None

        def launch() -> None:
            while queue and len(running) < self.concurrency:
                if fatal is not None or (stop is not None and stop()):
                    not_started.extend(reversed(queue))
                    queue.clear()
                    return
                req = queue.pop()
                client = req.client or self
                task = asyncio.ensure_future(client.complete(
                    req.messages, role=req.role, run_id=req.run_id, iteration=req.iteration,
                    validate=req.validate, sample=req.sample, params=req.params, slot=req.slot,
                    unusable_retries=req.unusable_retries))
                running[task] = req

        try:
            launch()
            while running:
                finished, _ = await asyncio.wait(list(running), return_when=asyncio.FIRST_COMPLETED)
                for task in finished:
                    req = running.pop(task)
                    try:
                        completion = task.result()
                    except _FATAL as exc:
                        fatal = fatal or exc
                        continue
                    except Exception as exc:  # noqa: BLE001 - a bug in one call fails that call only
                        completion = Completion(
                            call_id=uuid.uuid4().hex, status="error", model=(req.client or self).config.model,
                            role=req.role, run_id=req.run_id, iteration=req.iteration, sample=req.sample,
                            error=f"{type(exc).__name__}: {exc}")
                    more = on_done(req, completion)
                    if more:
                        queue[:0] = list(more)[::-1]
                launch()
        finally:
            for task in running:  # only on an error in on_done or a cancellation
                task.cancel()
        if fatal is not None:
            raise fatal
        return not_started

    def complete_each(self, requests: Iterable[CallRequest], on_done: OnDone, *,
                      stop: Callable[[], bool] | None = None) -> list[CallRequest]:
        """:meth:`complete_each_async` for sync code and notebooks (``on_done`` runs on the
        client's worker thread)."""
        return self._worker.run(self.complete_each_async(list(requests), on_done, stop=stop))

    def submit_each(self, requests: Iterable[CallRequest], on_done: OnDone, *,
                    stop: Callable[[], bool] | None = None) -> "concurrent.futures.Future[list[CallRequest]]":
        """Start :meth:`complete_each_async` on the worker thread and return at once."""
        return self._worker.submit(self.complete_each_async(list(requests), on_done, stop=stop))

    def complete_sync(self, messages: Messages, **kwargs: Any) -> Completion:
        """:meth:`complete` for sync code and notebooks (runs on a worker thread's loop)."""
        return self._worker.run(self.complete(messages, **kwargs))

    def complete_many_sync(self, requests: Iterable[Mapping[str, Any]]) -> list[Completion]:
        return self._worker.run(self.complete_many(list(requests)))

    async def list_models(self) -> list[str]:
        """Model ids the endpoint serves (``GET /models``); raises the SDK's error if unreachable."""
        page = await self._sdk().models.list(timeout=min(self.config.timeout_s, 30.0))
        return [m.id for m in page.data]

    # -- lifecycle -----------------------------------------------------------------------
    async def aclose(self) -> None:
        """Close the SDK client of the running loop."""
        loop = asyncio.get_running_loop()
        client = self._clients.pop(loop, None)
        if client is not None:
            await client.close()

    def close(self) -> None:
        """Stop the sync worker loop (closing its SDK client)."""
        self._worker.close(cleanup=self.aclose())

    def __enter__(self) -> "LLMClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> "LLMClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
