"""Token usage and chat-completion response parsing, on plain JSON dicts.

Live calls and cassette replays both go through :func:`parse_chat_response`, so a replayed
response yields exactly the same text, reasoning and usage as the original.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping

__all__ = ["Usage", "ParsedResponse", "MalformedResponse", "extract_usage", "parse_chat_response"]


@dataclass(frozen=True)
class Usage:
    """Token counts of one or more responses.

    ``completion_tokens`` includes ``reasoning_tokens`` and ``prompt_tokens`` includes
    ``cached_tokens``, as in the Chat Completions API.
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    cached_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(self.prompt_tokens + other.prompt_tokens,
                     self.completion_tokens + other.completion_tokens,
                     self.reasoning_tokens + other.reasoning_tokens,
                     self.cached_tokens + other.cached_tokens)

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


class MalformedResponse(ValueError):
    """A 200 response whose body is not a usable chat completion (the client retries it)."""


def _int(value: Any) -> int:
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError):
        return 0


def _get(mapping: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(mapping, Mapping):
            return None
        mapping = mapping.get(key)
    return mapping


def extract_usage(usage: Mapping[str, Any] | None) -> Usage:
    """Read a ``usage`` object whatever API dialect produced it; never raises.

    Chat Completions uses ``prompt_tokens``/``completion_tokens``; the Responses API and
    Anthropic use ``input_tokens``/``output_tokens``. Missing fields count as 0.
    """
    if not isinstance(usage, Mapping):
        return Usage()
    prompt = usage.get("prompt_tokens", usage.get("input_tokens"))
    completion = usage.get("completion_tokens", usage.get("output_tokens"))
    reasoning = (_get(usage, "completion_tokens_details", "reasoning_tokens")
                 or _get(usage, "output_tokens_details", "reasoning_tokens"))
    cached = (_get(usage, "prompt_tokens_details", "cached_tokens")
              or _get(usage, "input_tokens_details", "cached_tokens")
              or usage.get("cache_read_input_tokens"))
    return Usage(_int(prompt), _int(completion), _int(reasoning), _int(cached))


# Part types of a ``content`` list (some gateways send content as parts, as the Responses API
# and Anthropic do): text parts make the answer, reasoning/thinking parts the reasoning.
_TEXT_PARTS = {"text", "output_text"}
_REASONING_PARTS = {"reasoning", "thinking", "reasoning_text", "summary_text"}


def _content_text(content: Any) -> tuple[str, str | None]:
    """(answer text, reasoning from parts) of a message ``content``: a string, or a list of parts
    (``{"type": "text", "text": ...}``, plain strings, reasoning/thinking parts). Parts of other
    types (images, tool calls, refusals) carry no answer text and are skipped; content of any
    other shape is malformed."""
    if content is None:
        return "", None
    if isinstance(content, str):
        return content, None
    parts = [content] if isinstance(content, Mapping) else content
    if not isinstance(parts, list):
        raise MalformedResponse(f"message content is {type(content).__name__}, not text or a list of parts")
    texts: list[str] = []
    reasoning: list[str] = []
    for part in parts:
        if isinstance(part, str):
            texts.append(part)
            continue
        if not isinstance(part, Mapping):
            raise MalformedResponse(f"a message content part is {type(part).__name__}, not an object")
        kind = part.get("type", "text")
        value = part.get("text")
        if value is None and kind in _REASONING_PARTS:
            value = part.get(kind) or part.get("reasoning") or part.get("thinking")
        if not isinstance(value, str):
            continue
        if kind in _TEXT_PARTS:
            texts.append(value)
        elif kind in _REASONING_PARTS:
            reasoning.append(value)
    return "".join(texts), ("\n\n".join(reasoning) or None)


@dataclass(frozen=True)
class ParsedResponse:
    text: str
    reasoning: str | None
    finish_reason: str | None
    usage: Usage
    response_id: str | None
    model: str | None


def parse_chat_response(data: Any) -> ParsedResponse:
    """Turn a chat-completion JSON body into text, reasoning and usage.

    Raises :class:`MalformedResponse` when the body has no ``choices[0].message``.
    Reasoning text is read from ``reasoning_content`` (vLLM with a reasoning parser, older
    releases) or ``reasoning`` (newer vLLM, several hosted providers). ``content`` may be a
    string or a list of parts (see :func:`_content_text`).
    """
    if not isinstance(data, Mapping):
        raise MalformedResponse(f"response body is {type(data).__name__}, not a JSON object")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        raise MalformedResponse("response has no choices")
    message = choices[0].get("message")
    if not isinstance(message, Mapping):
        raise MalformedResponse("response choice has no message")
    text, part_reasoning = _content_text(message.get("content"))
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if reasoning is not None and not isinstance(reasoning, str):
        reasoning = str(reasoning)
    if part_reasoning:
        reasoning = part_reasoning if not reasoning else reasoning + "\n\n" + part_reasoning
    return ParsedResponse(text=text, reasoning=reasoning,
                          finish_reason=choices[0].get("finish_reason"),
                          usage=extract_usage(data.get("usage")),
                          response_id=data.get("id"), model=data.get("model"))
