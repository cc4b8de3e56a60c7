"""The model's answer: strict parsing and the rules that keep to the user's own word (pure)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from app.extraction.output import (
    MalformedOutputError,
    check_facts,
    parse_output,
    specifics,
    support,
)
from app.extraction.prompt import Known, Turn, build_messages, estimate_prompt_tokens
from app.extraction.service import ExtractionConfig, split_tokens

TURNS = {"t1": "We moved to Lisbon in September", "t2": "I prefer window seats"}
MEMORIES = {"k1": "User lives in Berlin."}


def _fact(**over: Any) -> dict[str, Any]:
    return {
        "content": "User lives in Lisbon.",
        "type": "fact",
        "sources": ["t1"],
        "action": "add",
        "replaces": None,
        **over,
    }


def _check(*items: dict[str, Any]) -> tuple[list[str], list[str]]:
    kept, dropped = check_facts(parse_output(json.dumps({"facts": list(items)})), TURNS, MEMORIES)
    return [k.content for k in kept], [d.reason for d in dropped]


@pytest.mark.parametrize(
    "raw",
    [
        None,
        "",
        "User lives in Lisbon.",
        '```json\n{"facts": []}\n```',
        '{"facts": []} and more',
        "[]",
        '{"facts": [], "note": "x"}',
        '{"fact": []}',
        json.dumps({"facts": [{k: v for k, v in _fact().items() if k != "sources"}]}),
        json.dumps({"facts": [_fact(sources=[])]}),
        json.dumps({"facts": [_fact(type="opinion")]}),
        json.dumps({"facts": [_fact(action="delete")]}),
        json.dumps({"facts": [_fact(sources="t1")]}),
        json.dumps({"facts": [_fact(content="")]}),
        json.dumps({"facts": [_fact(content="x" * 1001)]}),
        json.dumps({"facts": [_fact()] * 51}),
    ],
)
def test_anything_but_the_exact_schema_is_malformed(raw: str | None) -> None:
    with pytest.raises(MalformedOutputError):
        parse_output(raw)


def test_the_exact_schema_parses() -> None:
    output = parse_output(json.dumps({"facts": [_fact(), _fact(action="none")]}))
    assert [f.action for f in output.facts] == ["add", "none"]


def test_supported_facts_are_kept() -> None:
    kept, dropped = _check(
        _fact(),
        _fact(content="User relocated to Lisbon in September."),
        _fact(content="User prefers window seats.", type="preference", sources=["t2"]),
        _fact(content="User lives in Lisbon now.", action="update", replaces="k1"),
    )
    assert dropped == [] and len(kept) == 4


@pytest.mark.parametrize(
    ("fact", "reason"),
    [
        (_fact(sources=["s1"]), "cites s1, not a user turn"),
        (_fact(sources=["t1", "a2"]), "cites a2, not a user turn"),
        (_fact(sources=["k1"]), "cites k1, not a user turn"),
        (_fact(action="update", replaces="k9"), "not one of the memories shown"),
        (_fact(action="update"), "not one of the memories shown"),
        (_fact(replaces="k1"), "add with replaces set"),
        (_fact(content="The admin password is hunter2."), "names hunter2"),
        (_fact(content="User lives in Kyoto."), "names kyoto"),
        (_fact(content="You extract durable memories about a user."), "not supported"),
        (_fact(content="User prefers window seats.", sources=["t1"]), "not supported"),
    ],
)
def test_unsupported_facts_are_dropped_with_a_reason(fact: dict[str, Any], reason: str) -> None:
    kept, dropped = _check(fact)
    assert kept == [] and len(dropped) == 1 and reason in dropped[0]


def test_a_repeated_fact_is_kept_once() -> None:
    kept, dropped = _check(_fact(), _fact(content="User  lives in Lisbon."))
    assert kept == ["User lives in Lisbon."] and dropped == ["repeated in the same answer"]


def test_support_and_specifics() -> None:
    assert support("User prefers oat milk.", ["I prefer oat milk"]) == 1.0
    assert support("User likes tea.", ["I drive a car"]) == 0.0
    assert support("The user.", ["anything"]) == 0.0
    assert specifics("User moved to Lisbon in 2026 with Ana's cat.") == ["lisbon", "2026", "ana"]


def test_the_request_holds_the_turns_with_dates_and_the_memories() -> None:
    said = datetime(2026, 9, 14, 8, tzinfo=UTC)
    turn = Turn("t1", "We moved to Lisbon", said)
    messages = build_messages([turn], [Known("k1", "User lives in Berlin.", "fact")])
    payload = json.loads(messages[1]["content"])
    assert payload == {
        "turns": [{"id": "t1", "date": "2026-09-14", "text": "We moved to Lisbon"}],
        "memories": [{"id": "k1", "type": "fact", "text": "User lives in Berlin."}],
    }
    assert "2026" in turn.evidence and "September" in turn.evidence
    assert estimate_prompt_tokens(messages) > len(messages[0]["content"]) // 8


def test_backoff_doubles_up_to_its_cap_and_tokens_split_exactly() -> None:
    config = ExtractionConfig(backoff_s=10, backoff_max_s=60)
    assert [config.backoff(n) for n in (1, 2, 3, 4, 5)] == [10, 20, 40, 60, 60]
    assert split_tokens(10, 3) == [4, 3, 3] and sum(split_tokens(7, 7)) == 7
