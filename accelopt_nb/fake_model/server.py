"""A FAKE OpenAI-compatible HTTP server (no model behind it): a real server on 127.0.0.1, ephemeral port.

For tests and offline smoke runs only.

It speaks just enough of the Chat Completions API (``POST /v1/chat/completions``, ``GET
/v1/models``) for the LLM client, the ledger, record/replay and the agents to be tested
end to end over real HTTP, without any model. Behaviour is scripted:

* a FIFO queue of scripted actions (:class:`Reply`, :class:`Fail`, :class:`Slow`,
  :class:`Malformed`, :class:`Disconnect`), consumed one per chat request; then
* an optional ``responder(request_json) -> action`` callback; then
* a default reply (``"OK"``).

Every chat request body is kept in :attr:`FakeOpenAIServer.requests` (headers in
:attr:`FakeOpenAIServer.request_headers`) so tests can assert on what was sent.

Usage::

    with FakeOpenAIServer(models=["openai/gpt-oss-120b"]) as srv:
        srv.enqueue(Fail(500), Fail(429, retry_after=0.01), Reply("```python\\nx = 1\\n```"))
        client = LLMClient(ModelConfig(model="openai/gpt-oss-120b", base_url=srv.url, ...))
"""
from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Union

__all__ = ["FakeOpenAIServer", "Reply", "Fail", "Slow", "Malformed", "Disconnect", "Action",
           "count_tokens"]


def count_tokens(text: str) -> int:
    """The fake's tokenizer: whitespace-separated words (deterministic, good enough for tests)."""
    return len(text.split())


@dataclass
class Reply:
    """A successful chat completion.

    Token counts default to word counts of the request messages and of ``content`` +
    ``reasoning``; pass explicit numbers to script usage exactly.
    """

    content: "str | list[Any]" = "OK"  # a list is sent as content parts, as some gateways do
    reasoning: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    reasoning_tokens: int | None = None
    cached_tokens: int = 0
    finish_reason: str = "stop"
    # vLLM has used both names for the reasoning text over time; tests can choose.
    reasoning_field: str = "reasoning_content"
    include_usage: bool = True


@dataclass
class Fail:
    """An HTTP error response (e.g. 500, 503, 429 with ``retry_after`` seconds, 401, 400)."""

    status: int = 500
    message: str = "scripted failure"
    retry_after: float | None = None


@dataclass
class Slow:
    """Wait ``delay`` seconds, then perform ``then`` (a client timeout fires first if shorter)."""

    delay: float
    then: "Action" = field(default_factory=Reply)


@dataclass
class Malformed:
    """A 200 response whose body is not valid chat-completion JSON."""

    body: str = '{"id": "broken", "choices": [ {"message": '


@dataclass
class Disconnect:
    """Close the connection without sending any response."""


Action = Union[Reply, Fail, Slow, Malformed, Disconnect]
Responder = Callable[[dict], Action]


class FakeOpenAIServer:
    """A scriptable OpenAI-compatible server on loopback; use as a context manager."""

    def __init__(self, models: list[str] | None = None, *, api_key: str | None = None,
                 responder: Responder | None = None) -> None:
        self.models = list(models or ["fake-model"])
        self.api_key = api_key  # when set, requests must carry "Authorization: Bearer <key>"
        self.responder = responder
        self.requests: list[dict] = []
        self.request_headers: list[dict[str, str]] = []
        self.models_requests = 0
        self.served: list[dict] = []  # the usage of every completion sent in full (what a ledger must match)
        self._queue: deque[Action] = deque()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._counter = 0
        self._port = 0
        self._down = False   # in an outage (outage()): not listening, kept-alive connections dropped

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> "FakeOpenAIServer":
        """Serve (again: a restarted server takes its old port, so clients reach it at the same URL)."""
        handler = _make_handler(self)
        self._stop.clear()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", self._port or 0), handler)
        self._port = self._httpd.server_address[1]
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()  # wakes sleeping Slow actions
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> "FakeOpenAIServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def outage(self, seconds: float) -> threading.Thread:
        """Stop serving now and come back on the same port after ``seconds`` (in the background):
        an endpoint that goes down for a while. Returns the thread that restarts it."""
        self._down = True
        self.stop()

        def come_back() -> None:
            time.sleep(seconds)
            self._down = False
            self.start()
        restart = threading.Thread(target=come_back, daemon=True)
        restart.start()
        return restart

    @property
    def port(self) -> int:
        assert self._port, "server not started"
        return self._port

    @property
    def url(self) -> str:
        """Base URL to give an OpenAI client (ends in ``/v1``)."""
        return f"http://127.0.0.1:{self.port}/v1"

    # -- scripting ---------------------------------------------------------------------
    def enqueue(self, *actions: Action) -> None:
        with self._lock:
            self._queue.extend(actions)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    @property
    def chat_requests(self) -> int:
        with self._lock:
            return len(self.requests)

    def _next_action(self, body: dict) -> Action:
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        if self.responder is not None:
            return self.responder(body)
        return Reply()

    def _next_id(self) -> str:
        with self._lock:
            self._counter += 1
            return f"chatcmpl-fake-{self._counter}"

    def _record(self, body: dict, headers: dict[str, str]) -> None:
        with self._lock:
            self.requests.append(body)
            self.request_headers.append(headers)

    def _sleep(self, seconds: float) -> bool:
        """Sleep unless the server is stopping; returns False if interrupted."""
        return not self._stop.wait(seconds)


def _part_text(content: Any) -> str:
    if isinstance(content, list):
        return " ".join(p if isinstance(p, str) else str(p.get("text", "")) for p in content)
    return content


def _completion_body(srv: FakeOpenAIServer, request: dict, reply: Reply) -> dict:
    prompt_text = " ".join(str(m.get("content", "")) for m in request.get("messages", []))
    reasoning_tokens = (reply.reasoning_tokens if reply.reasoning_tokens is not None
                        else count_tokens(reply.reasoning or ""))
    completion_tokens = (reply.completion_tokens if reply.completion_tokens is not None
                         else count_tokens(_part_text(reply.content)) + reasoning_tokens)
    prompt_tokens = (reply.prompt_tokens if reply.prompt_tokens is not None
                     else count_tokens(prompt_text))
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.reasoning is not None:
        message[reply.reasoning_field] = reply.reasoning
    body: dict[str, Any] = {
        "id": srv._next_id(),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model", srv.models[0]),
        "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason}],
    }
    if reply.include_usage:
        body["usage"] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "completion_tokens_details": {"reasoning_tokens": reasoning_tokens},
            "prompt_tokens_details": {"cached_tokens": reply.cached_tokens},
        }
    return body


def _make_handler(srv: FakeOpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            # Headers and body go out in separate writes: without NODELAY, Nagle's algorithm and
            # the client's delayed ACK add ~40 ms to every keep-alive request.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
            pass

        def _send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(payload).encode()
            self._send_raw(status, data, headers)

        def _send_raw(self, status: int, data: bytes, headers: dict[str, str] | None = None) -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout); nothing to do

        def _authorized(self) -> bool:
            if srv.api_key is None:
                return True
            if self.headers.get("Authorization") == f"Bearer {srv.api_key}":
                return True
            self._send_json(401, {"error": {"message": "invalid api key", "type": "auth_error"}})
            return False

        def _down(self) -> bool:
            """During an outage a kept-alive connection drops the request unanswered, as a dead server's would."""
            if srv._down:
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
            return srv._down

        def do_GET(self) -> None:
            if self._down() or not self._authorized():
                return
            if self.path.rstrip("/") == "/v1/models":
                with srv._lock:
                    srv.models_requests += 1
                self._send_json(200, {"object": "list", "data": [
                    {"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in srv.models]})
            else:
                self._send_json(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if self._down() or not self._authorized():
                return
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._send_json(404, {"error": {"message": f"no route {self.path}"}})
                return
            try:
                body = json.loads(raw)
            except json.JSONDecodeError:
                self._send_json(400, {"error": {"message": "request body is not JSON"}})
                return
            srv._record(body, {k.lower(): v for k, v in self.headers.items()})
            if body.get("model") not in srv.models:
                self._send_json(404, {"error": {"message": f"model {body.get('model')!r} not found",
                                                "type": "NotFoundError"}})
                return
            self._perform(srv._next_action(body), body)

        def _perform(self, action: Action, body: dict) -> None:
            if isinstance(action, Slow):
                if not srv._sleep(action.delay):
                    return
                self._perform(action.then, body)
            elif isinstance(action, Reply):
                completion = _completion_body(srv, body, action)
                self._send_json(200, completion)
                with srv._lock:
                    srv.served.append(dict(completion.get("usage") or {}))
            elif isinstance(action, Fail):
                headers = {}
                if action.retry_after is not None:
                    headers["Retry-After"] = f"{action.retry_after:g}"
                self._send_json(action.status, {"error": {"message": action.message,
                                                          "type": "scripted", "code": action.status}},
                                headers)
            elif isinstance(action, Malformed):
                self._send_raw(200, action.body.encode())
            elif isinstance(action, Disconnect):
                self.close_connection = True
                try:
                    self.connection.shutdown(2)
                except OSError:
                    pass
            else:  # pragma: no cover - a test scripted something unknown
                raise TypeError(f"unknown fake server action {action!r}")

    return Handler


def fake_openai_fixture(models: list[str] | None = None):
    """Build a pytest fixture yielding a started server, e.g. in a test module::

        fake_server = fake_openai_fixture(["openai/gpt-oss-120b"])
    """
    import pytest

    @pytest.fixture
    def _fixture():
        with FakeOpenAIServer(models=models) as srv:
            yield srv

    return _fixture
