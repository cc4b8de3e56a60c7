"""The tool round of a chat request, as messages to store (issue 26).

A tool-call loop sends the model's tool calls back with their results: `[..., user,
assistant{tool_calls}, tool, tool]`. The trailing round (the assistant message with the calls
and the tool messages after it) is new in this request (the next round's request ends with
the next round), so storing it here stores each round once, in order, before the answer.

Stored roles are the service's (user, assistant, system): the calls are an assistant message
("Tool call: name(arguments)"), each result an assistant message ("Tool name returned: ...")
whose metadata names the call (`tool_call_id`, `tool`), so what the tool said is recalled.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from app.proxy.schemas import ChatMessage, message_text
from app.schemas.common import MAX_CONTENT_CHARS
from app.schemas.conversation import MessageCreate

SOURCE = "chat_proxy"
# Names and ids only in metadata (its size is limited); the arguments go in the text.
MAX_CALLS = 32


def _message(content: str, metadata: dict[str, Any]) -> MessageCreate | None:
    if len(content) > MAX_CONTENT_CHARS:
        content, metadata["cut"] = content[:MAX_CONTENT_CHARS], True
    try:
        return MessageCreate(role="assistant", content=content, metadata=metadata)
    except ValidationError:  # blank or not storable text: nothing to keep
        return None


def _calls(message: ChatMessage) -> list[dict[str, str]]:
    """The (id, name, arguments) of an assistant message's tool calls (or legacy
    function_call)."""
    extra = message.model_extra or {}
    raw = extra.get("tool_calls")
    if not isinstance(raw, list):
        legacy = extra.get("function_call")
        raw = [{"id": "", "function": legacy}] if isinstance(legacy, dict) else []
    calls: list[dict[str, str]] = []
    for call in raw[:MAX_CALLS]:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            continue
        arguments = function.get("arguments", "")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        calls.append(
            {
                "id": str(call.get("id") or ""),
                "name": str(function.get("name") or "tool"),
                "arguments": arguments,
            }
        )
    return calls


def tool_round(messages: list[ChatMessage]) -> list[MessageCreate]:
    """The request's trailing tool round as messages to store; [] when it has none."""
    start = len(messages)
    while start > 0 and messages[start - 1].role in ("tool", "function"):
        start -= 1
    if start == len(messages) or start == 0 or messages[start - 1].role != "assistant":
        return []
    calls = _calls(messages[start - 1])
    names = {c["id"]: c["name"] for c in calls}
    stored: list[MessageCreate] = []
    if calls:
        text = "\n".join(f"Tool call: {c['name']}({c['arguments']})" for c in calls)
        meta = {"source": SOURCE, "tool_calls": [{"id": c["id"], "name": c["name"]} for c in calls]}
        call_message = _message(text, meta)
        if call_message is not None:
            stored.append(call_message)
    for result in messages[start:]:
        extra = result.model_extra or {}
        call_id = str(extra.get("tool_call_id") or "")
        name = str(extra.get("name") or names.get(call_id) or "tool")
        meta = {"source": SOURCE, "tool": name}
        if call_id:
            meta["tool_call_id"] = call_id
        result_message = _message(f"Tool {name} returned: {message_text(result)}", meta)
        if result_message is not None:
            stored.append(result_message)
    return stored
