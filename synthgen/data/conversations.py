"""Reading one input record into a conversation, and the prompts each regeneration mode makes of it.

Accepted records (one JSON object each):

    {"messages": [{"role": ..., "content": ...}, ...], "tools": [...] (optional)}
    {"conversations": [{"from": "system|human|gpt|tool", "value": ...}, ...]}
    {"conversations": [{"role": ..., "content": ...}, ...]}
    {"prompt": "...", "system": "..." (optional)}
    {"instruction": "...", "input": "..." (optional), "output": "..." (optional), "system": (optional)}

``messages``, ``conversations``, ``input_ids`` and ``tools`` may also be a JSON string of their value
(a parquet column often holds one). An Alpaca record is one user turn, ``instruction`` and then, when
it is not empty, ``input`` on the next line (``"\n".join``, as LLaMA-Factory's Alpaca converter does),
and ``output``, when given, the assistant's reply after it: the reference answer, which ``last`` cuts
(never sent), ``each`` regenerates as turn 0 and ``all`` regenerates; the same conversation, id and
hash as the ``messages`` record of those turns.

Messages may be OpenAI-style agent turns: an assistant turn with ``tool_calls``
(``[{id, type, function: {name, arguments}}]``, arguments a JSON string or an object) and empty or
null content, a ``tool`` turn answering one call by ``tool_call_id``, and ``reasoning_content`` on
earlier assistant turns. Every field of a message is kept as given; only the role/content keys are
normalised (``from``/``value`` and role aliases), list-of-text content is joined, and empty system
turns are dropped (counted). ``tools`` may also be a JSON string of the list.

Regeneration modes, as prompts built from a :class:`Conversation`:

- ``last``: the trailing assistant turns are cut; the prompt is what precedes them.
- ``each``: one prompt per assistant turn k (history before it, as given), id ``<id>#<k>``.
- ``all``: every assistant turn regenerated in order, each on a history carrying the model's own
  earlier replies; impossible when tool results follow calls the model would make anew.

Nothing here does I/O; errors are :class:`ConversationError` with a short message (the caller adds
``file:line``).
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

ROLE_ALIASES = {
    "system": "system",
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "gpt": "assistant",
    "tool": "tool",
}

# The message keys a chat template reads besides role/content; they enter ids and prompt hashes.
RENDERED_KEYS = ("tool_calls", "tool_call_id", "name", "reasoning_content")


class ConversationError(ValueError):
    """One record's problem, without the location (the caller adds file:line)."""


@dataclass(frozen=True, slots=True)
class Conversation:
    """A whole conversation (trailing assistant turns included) and the tools it may call."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    dropped_empty_system: int = 0
    input_ids: tuple[int, ...] | None = None  # a prompt already rendered: sent as it is (``--regenerate last``)

    def assistant_positions(self) -> list[int]:
        """Message indices of the assistant turns, in order (turn k is the k-th of these)."""
        return [i for i, m in enumerate(self.messages) if m["role"] == "assistant"]

    def last_prompt(self) -> list[dict[str, Any]]:
        """Mode ``last``: everything before the trailing assistant turns."""
        end = len(self.messages)
        while end and self.messages[end - 1]["role"] == "assistant":
            end -= 1
        return self.messages[:end]

    def each_prompts(self) -> list[tuple[int, list[dict[str, Any]]]]:
        """Mode ``each``: (k, history before assistant turn k) for every turn with a user turn before it."""
        prompts = []
        for k, position in enumerate(self.assistant_positions()):
            history = self.messages[:position]
            if any(m["role"] == "user" for m in history):
                prompts.append((k, history))
        return prompts

    def all_blocker(self) -> str | None:
        """Why mode ``all`` cannot regenerate this conversation, or None when it can."""
        if any(m["role"] == "tool" or m.get("tool_calls") for m in self.messages):
            return (
                "it has tool calls and results: a regenerated turn would make different calls, "
                "so the recorded results would not answer them; use --regenerate each or last"
            )
        return None

    def all_positions(self) -> list[int]:
        """Mode ``all``: where each generated turn goes, in order: the assistant turns after the first user
        turn, and one more after the last message when the conversation ends on a user turn."""
        first_user = next(i for i, m in enumerate(self.messages) if m["role"] == "user")
        positions = [i for i in self.assistant_positions() if i > first_user]
        if self.messages[-1]["role"] != "assistant":
            positions.append(len(self.messages))
        return positions

    def all_prompt(self, position: int, replies: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Mode ``all``: the history before the assistant turn at ``position``, with the earlier
        regenerated turns (``all_positions()`` order) replaced by ``replies`` - the model's own
        assistant messages, e.g. ``{"role": "assistant", "content": ..., "reasoning_content": ...}``."""
        blocker = self.all_blocker()
        if blocker:
            raise ConversationError(f"cannot regenerate every turn: {blocker}")
        earlier = [p for p in self.all_positions() if p < position]
        if len(replies) != len(earlier):
            raise ValueError(f"turn at {position} needs {len(earlier)} earlier replies, got {len(replies)}")
        history = list(self.messages[:position])
        for p, reply in zip(earlier, replies, strict=True):
            history[p] = reply
        return history


def each_id(record_id: str, k: int) -> str:
    return f"{record_id}#{k}"


def stable_id(messages: list[dict[str, Any]]) -> str:
    """An id for a record without one: sha256 of the messages (byte-compatible with earlier releases)."""
    digest = hashlib.sha256(orjson.dumps(messages, option=orjson.OPT_SORT_KEYS)).hexdigest()
    return f"auto-{digest[:20]}"


def _input_ids(value: Any) -> tuple[int, ...]:
    """A prompt line's ``input_ids``: the token ids of a prompt already rendered with the model's template."""
    if not isinstance(value, list) or not value:
        raise ConversationError("'input_ids' must be a non-empty list of token ids")
    if not all(type(i) is int and i >= 0 for i in value):
        raise ConversationError("'input_ids' must hold token ids (whole numbers, 0 or more)")
    return tuple(value)


def conversation_id(conversation: Conversation) -> str:
    """The stable id of a record without one. A plain chat hashes its ``last`` prompt's role/content
    exactly as before, so old ids do not change; agent data adds the keys templates read and tools."""
    if conversation.input_ids is not None:
        return stable_id([{"input_ids": list(conversation.input_ids)}])
    prompt = conversation.last_prompt()
    basis = [{k: m[k] for k in ("role", "content", *RENDERED_KEYS) if k in m} for m in prompt]
    if conversation.tools is None:
        return stable_id(basis)
    digest = hashlib.sha256(
        orjson.dumps({"messages": basis, "tools": conversation.tools}, option=orjson.OPT_SORT_KEYS)
    ).hexdigest()
    return f"auto-{digest[:20]}"


def prompt_hash(
    messages: Sequence[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    template_kwargs: dict[str, Any] | None = None,
) -> str:
    """A stable hash of a prompt as it will be rendered, to tell whether a done row answers this prompt."""
    payload = {"messages": list(messages), "tools": tools, "template_kwargs": template_kwargs or {}}
    return hashlib.sha256(orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)).hexdigest()


def conversation_hash(conversation: Conversation) -> str:
    """The prompt hash of a conversation's own id (modes ``last`` and ``all``), the same in both modes:
    what either mode's rows depend on, the conversation before its trailing assistant turns, and
    its tools. (A change of mode is a change of settings, found by ``provenance``, not of prompts.)
    It is the hash ``last`` rows have always carried."""
    if conversation.input_ids is not None:
        return prompt_hash([{"input_ids": list(conversation.input_ids)}])
    return prompt_hash(conversation.last_prompt(), conversation.tools)


def legacy_all_hash(conversation: Conversation) -> str:
    """The hash rows of ``--regenerate all`` carried before it was mode-independent: the whole
    conversation. Old folders' rows are still matched against it."""
    return prompt_hash(conversation.messages, conversation.tools)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _text(value: Any, what: str, allow_empty: bool = False) -> str:
    """Message content as a string: plain text, or a list of OpenAI-style text parts."""
    if isinstance(value, list):
        parts = []
        for part in value:
            if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
                raise ConversationError(f"{what} has a content part that is not text; only text prompts are supported")
            parts.append(part["text"])
        value = "".join(parts)
    if not isinstance(value, str):
        raise ConversationError(f"{what} is {type(value).__name__}, expected a string")
    if not allow_empty and not value.strip():
        raise ConversationError(f"{what} is empty")
    return value


def _tools(value: Any) -> list[dict[str, Any]] | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            # orjson, as for the file itself: the tools go into ids and hashes, which orjson writes.
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            raise ConversationError("'tools' is a string that is not valid JSON") from None
    if not isinstance(value, list) or not all(isinstance(tool, dict) for tool in value):
        raise ConversationError("'tools' must be a list of objects (or a JSON string of one)")
    return value


def _tool_calls(value: Any, where: str) -> list[str]:
    """Validate an assistant turn's tool_calls; returns their ids."""
    if not isinstance(value, list) or not value:
        raise ConversationError(f"{where} tool_calls must be a non-empty list of calls")
    ids = []
    for j, call in enumerate(value):
        at = f"{where} tool_calls[{j}]"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            raise ConversationError(f"{at} has no 'function' object")
        if not isinstance(function.get("name"), str) or not function["name"].strip():
            raise ConversationError(f"{at} has no function name")
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except (ValueError, RecursionError):
                raise ConversationError(f"{at} arguments are not valid JSON") from None
        if not isinstance(arguments, dict):
            raise ConversationError(f"{at} arguments must be a JSON object (or a string of one)")
        call_id = call.get("id")
        if call_id is not None:
            if not isinstance(call_id, str):
                raise ConversationError(f"{at} id is {type(call_id).__name__}, expected a string")
            ids.append(call_id)
    return ids


def _message(message: Any, where: str) -> dict[str, Any]:
    """One message with role/content normalised and every other field kept."""
    if not isinstance(message, dict):
        raise ConversationError(f"{where} is {type(message).__name__}, expected an object")
    role_key, content_key = ("from", "value") if "from" in message else ("role", "content")
    role = message.get(role_key)
    if not isinstance(role, str) or role.lower() not in ROLE_ALIASES:
        raise ConversationError(f"{where} has unknown role {_shown(role)} (expected one of {', '.join(ROLE_ALIASES)})")
    role = ROLE_ALIASES[role.lower()]
    normalised = {"role": role, "content": None}
    normalised.update({k: v for k, v in message.items() if k not in (role_key, content_key, "role", "content")})
    content = message.get(content_key)
    calls = message.get("tool_calls")
    if role == "assistant" and calls is not None and content is None:
        normalised["content"] = None
    else:
        # A turn that only calls tools, or a tool that printed nothing, may be empty; a user turn may not.
        empty_ok = role in ("system", "tool") or (role == "assistant" and calls is not None)
        normalised["content"] = _text(content, f"{where} content", allow_empty=empty_ok)
    return normalised


def _check_tool_flow(messages: list[dict[str, Any]], key: str) -> None:
    """Each tool turn answers a call made earlier; each assistant turn's calls are well formed."""
    open_ids: set[str] = set()
    any_call = False
    for i, message in enumerate(messages):
        where = f"{key}[{i}]"
        role = message["role"]
        if role == "assistant" and message.get("tool_calls") is not None:
            open_ids.update(_tool_calls(message["tool_calls"], where))
            any_call = True
        elif role == "tool":
            if not any_call:
                raise ConversationError(f"{where} is a tool result with no tool call before it")
            call_id = message.get("tool_call_id")
            if call_id is not None and not isinstance(call_id, str):
                raise ConversationError(f"{where} tool_call_id is {type(call_id).__name__}, expected a string")
            if call_id is not None and call_id not in open_ids:
                raise ConversationError(f"{where} answers unknown tool_call_id {_shown(call_id)}")
        elif role != "assistant" and "tool_calls" in message:
            raise ConversationError(f"{where} is a {role} turn with tool_calls; only assistant turns call tools")


def _json_value(value: Any, key: str) -> Any:
    """A field's value, read from JSON when it is a string of a list (a parquet column of JSON strings)."""
    if isinstance(value, str) and value.lstrip().startswith("["):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            raise ConversationError(f"'{key}' is a string that is not valid JSON") from None
    return value


def _alpaca(record: dict[str, Any]) -> Conversation:
    """An Alpaca record: [system], the user turn of instruction (+ input), [the output as the assistant's reply]."""
    messages = []
    dropped = 0
    if record.get("system") is not None:
        system = _text(record["system"], "'system'", allow_empty=True)
        if system.strip():
            messages.append({"role": "system", "content": system})
        else:
            dropped = 1
    parts = [_text(record["instruction"], "'instruction'")]
    if record.get("input") is not None and _text(record["input"], "'input'", allow_empty=True).strip():
        parts.append(record["input"])
    messages.append({"role": "user", "content": "\n".join(parts)})
    if record.get("output") is not None and _text(record["output"], "'output'", allow_empty=True).strip():
        messages.append({"role": "assistant", "content": record["output"]})
    return Conversation(messages, _tools(record.get("tools")), dropped)


def parse_record(record: dict[str, Any]) -> Conversation:
    """The conversation of one input record; raises ConversationError naming what is wrong."""
    if "messages" in record:
        raw, key = _json_value(record["messages"], "messages"), "messages"
    elif "conversations" in record:
        raw, key = _json_value(record["conversations"], "conversations"), "conversations"
    elif "input_ids" in record:
        return Conversation([], input_ids=_input_ids(_json_value(record["input_ids"], "input_ids")))
    elif "instruction" in record and "prompt" not in record:
        return _alpaca(record)
    elif "prompt" in record:
        messages = []
        dropped = 0
        if record.get("system") is not None:
            system = _text(record["system"], "'system'", allow_empty=True)
            if system.strip():
                messages.append({"role": "system", "content": system})
            else:
                dropped = 1
        messages.append({"role": "user", "content": _text(record["prompt"], "'prompt'")})
        return Conversation(messages, _tools(record.get("tools")), dropped)
    else:
        raise ConversationError("no 'messages', 'conversations', 'prompt', 'instruction' or 'input_ids' field")
    if not isinstance(raw, list) or not raw:
        raise ConversationError(f"'{key}' must be a non-empty list of messages")
    messages = []
    dropped = 0
    for i, item in enumerate(raw):
        message = _message(item, f"{key}[{i}]")
        if message["role"] == "system" and not (message["content"] or "").strip():
            dropped += 1
            continue
        messages.append(message)
    _check_tool_flow(messages, key)
    if not any(m["role"] == "user" for m in messages):
        raise ConversationError(f"'{key}' has no user turn to answer")
    return Conversation(messages, _tools(record.get("tools")), dropped)


def template_messages(
    messages: Sequence[dict[str, Any]], arguments: str = "object", null_content: str | None = ""
) -> list[dict[str, Any]]:
    """The messages in the shape a chat template reads: tool-call arguments as objects (the
    transformers convention SGLang and vLLM follow) or as JSON strings (DeepSeek-R1's template
    concatenates them), and a tool-calling turn's null content as ``null_content``. The input is
    not changed."""
    shaped = []
    for message in messages:
        if message.get("role") != "assistant" or not message.get("tool_calls"):
            shaped.append(message)
            continue
        message = copy.deepcopy(message)
        if message.get("content") is None:
            message["content"] = null_content
        for call in message["tool_calls"]:
            function = call["function"]
            value = function.get("arguments")
            if arguments == "object" and isinstance(value, str):
                function["arguments"] = json.loads(value)
            elif arguments == "string" and not isinstance(value, str):
                function["arguments"] = json.dumps(value, ensure_ascii=False)
        shaped.append(message)
    return shaped
