"""The trailing tool round of a chat request, as the messages the proxy stores (pure)."""

from __future__ import annotations

from typing import Any

from app.proxy.schemas import ChatMessage
from app.proxy.tool_rounds import tool_round


def msgs(*raw: dict[str, Any]) -> list[ChatMessage]:
    return [ChatMessage.model_validate(m) for m in raw]


def call(cid: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_only_the_trailing_round_is_stored() -> None:
    request = msgs(
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "tool_calls": [call("a", "weather", '{"city":"Oslo"}')]},
        {"role": "tool", "tool_call_id": "a", "content": "-3 C"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                call("b", "weather", '{"city":"Paris"}'),
                call("c", "weather", '{"city":"Rome"}'),
            ],
        },
        {"role": "tool", "tool_call_id": "b", "content": "18 C"},
        {"role": "tool", "tool_call_id": "c", "content": [{"type": "text", "text": "24 C"}]},
    )
    stored = tool_round(request)
    assert [m.content for m in stored] == [
        'Tool call: weather({"city":"Paris"})\nTool call: weather({"city":"Rome"})',
        "Tool weather returned: 18 C",
        "Tool weather returned: 24 C",
    ]
    assert all(m.role == "assistant" for m in stored)
    assert [m.metadata.get("tool_call_id") for m in stored] == [None, "b", "c"]


def test_no_round_when_the_request_ends_otherwise() -> None:
    assert tool_round(msgs({"role": "user", "content": "hi"})) == []
    assert tool_round(msgs({"role": "tool", "tool_call_id": "x", "content": "orphan"})) == []
    ends_with_answer = msgs(
        {"role": "assistant", "tool_calls": [call("a", "t", "{}")]},
        {"role": "tool", "tool_call_id": "a", "content": "r"},
        {"role": "user", "content": "thanks"},
    )
    assert tool_round(ends_with_answer) == []


def test_legacy_function_call_and_an_empty_result_are_kept() -> None:
    request = msgs(
        {"role": "assistant", "function_call": {"name": "lookup", "arguments": "{}"}},
        {"role": "function", "name": "lookup", "content": "   "},
    )
    stored = tool_round(request)
    assert [m.content for m in stored] == ["Tool call: lookup({})", "Tool lookup returned:    "]
