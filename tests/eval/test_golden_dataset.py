"""Structural checks for the hand-written retrieval golden dataset.

These tests only validate the shape and internal consistency of
``eval/memory_golden_dataset.json``; they do not run any retrieval.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

DATASET_PATH = Path(__file__).resolve().parents[2] / "eval" / "memory_golden_dataset.json"

# "Today" for the dataset: anything expiring before this instant is expired.
REFERENCE_NOW = datetime(2026, 11, 26, tzinfo=UTC)

MEMORY_TYPES = {"fact", "preference", "decision", "note"}
MESSAGE_ROLES = {"user", "assistant"}

MIN_PER_CATEGORY = {
    "exact_keyword": 10,
    "paraphrase": 10,
    "synthesis": 10,
    "type_filter": 6,
    "no_relevant": 6,
    "expired": 6,
    "deleted": 6,
    "budget": 6,
    "near_duplicate": 6,
    "messages": 6,
    "security": 10,
    "time": 6,
    "multi_hop": 3,
    "agent_writes": 6,
    "speakers": 2,
    "spaces": 6,
}
CATEGORIES = set(MIN_PER_CATEGORY)

REQUIRED_CASE_FIELDS = {
    "id": str,
    "category": str,
    "setup_memories": list,
    "query": str,
    "expected_retrievals": list,
    "rubric": str,
}
OPTIONAL_CASE_FIELDS = {
    "types",
    "setup_messages",
    "other_users",
    "time_filter",
    "setup_conversations",
    "setup_tool_calls",
    "setup_spaces",
}
TIME_FILTER_FIELDS = {"time_from", "time_to", "as_of"}
TOOLS = {"save_memory", "forget_memory", "rate_message"}
MEMORY_FIELDS = {"content", "type", "importance", "created_at", "expires_at", "deleted"}

# Rough token estimate (words * 1.3) that the budget cases' memories must exceed.
BUDGET_TOKENS = 1000

_STOPWORD_TEXT = """
    a about after all am an and any are as at be been before but by can can't current currently
    did do does don't for from has have how i i'm in is it its me my now of on or our should so
    that the their them they this to up us use user user's was we what what's when where which
    who why will with you your
"""
_STOPWORDS = set(_STOPWORD_TEXT.split())


def _load() -> dict[str, Any]:
    return json.loads(DATASET_PATH.read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def _cases() -> tuple[dict[str, Any], ...]:
    return tuple(_load()["cases"])


def _parse_ts(value: str) -> datetime:
    assert isinstance(value, str) and value.endswith("Z"), f"need ISO 8601 with Z: {value!r}"
    ts = datetime.fromisoformat(value)
    assert ts.tzinfo is not None, value
    return ts


def _is_expired(memory: dict[str, Any]) -> bool:
    expires_at = memory.get("expires_at")
    return expires_at is not None and _parse_ts(expires_at) <= REFERENCE_NOW


def _is_live(memory: dict[str, Any]) -> bool:
    return not memory.get("deleted", False) and not _is_expired(memory)


def _rating_note(case: dict[str, Any], message: str) -> str:
    """The note an upvote of `message` stores (app/services/agent_memory.py::rate)."""
    messages = case.get("setup_messages", [])
    index = next(i for i, m in enumerate(messages) if m["content"] == message)
    before = messages[index - 1] if index > 0 else None
    if messages[index]["role"] == "assistant" and before and before["role"] == "user":
        return f"User: {before['content']}\nAssistant: {message}"
    return message


def _own_live_contents(case: dict[str, Any]) -> set[str]:
    contents = {m["content"] for m in case["setup_memories"] if _is_live(m)}
    contents |= {m["content"] for m in case.get("setup_messages", [])}
    contents |= {m["content"] for c in case.get("setup_conversations", []) for m in c}
    # A shared space the user reads (issue 43): its memories answer as the user's own do.
    contents |= {
        m["content"]
        for space in case.get("setup_spaces", [])
        if space.get("access") in ("read", "write")
        for m in space["memories"]
        if _is_live(m)
    }
    # The agent writes, in order: what they add and what they take away. They happen at the
    # reference time; as of an earlier moment, a superseded memory was still valid and its
    # replacement not yet stated.
    as_of = case.get("time_filter", {}).get("as_of")
    before_writes = as_of is not None and _parse_ts(as_of) < REFERENCE_NOW
    for call in case.get("setup_tool_calls", []):
        args = call["args"]
        if call["tool"] == "save_memory" and before_writes:
            continue
        if call["tool"] == "save_memory":
            contents.add(args["content"])
            if "supersedes" in args:
                contents.discard(args["supersedes"]["ref"])
        elif call["tool"] == "forget_memory":
            contents.discard(args["id"]["ref"])
        elif args["vote"] == "up":
            contents.add(_rating_note(case, args["message_id"]["ref"]))
        elif _rating_note(case, args["message_id"]["ref"]) != args["message_id"]["ref"]:
            contents.discard(_rating_note(case, args["message_id"]["ref"]))
    return contents


def _other_user_contents(case: dict[str, Any]) -> set[str]:
    contents: set[str] = set()
    for other in case.get("other_users", []):
        contents |= {m["content"] for m in other.get("memories", [])}
        contents |= {m["content"] for m in other.get("messages", [])}
    return contents


def _stems(text: str) -> set[str]:
    """Crude content-word stems, good enough to catch a shared word between query and memory."""
    stems = set()
    for word in re.findall(r"[a-z][a-z']*", text.lower()):
        word = word.strip("'")
        if word in _STOPWORDS or len(word) < 3:
            continue
        if word.endswith("'s"):
            word = word[:-2]
        for suffix in ("ing", "ies", "ed", "es", "s", "e", "y"):
            if word.endswith(suffix) and len(word) - len(suffix) >= 3:
                word = word[: -len(suffix)]
                break
        stems.add(word[:5])
    return stems


def _words(text: str) -> int:
    return len(text.split())


# --------------------------------------------------------------------------- top level


def test_top_level_fields() -> None:
    data = _load()
    assert isinstance(data.get("version"), str) and data["version"]
    assert isinstance(data.get("description"), str) and data["description"].strip()
    assert isinstance(data.get("cases"), list)


def test_file_is_pretty_printed_utf8() -> None:
    raw = DATASET_PATH.read_text(encoding="utf-8")
    assert raw == json.dumps(json.loads(raw), indent=2, ensure_ascii=False) + "\n"


def test_case_count() -> None:
    assert len(_cases()) >= 80


def test_unique_ids() -> None:
    ids = [c["id"] for c in _cases()]
    duplicates = [i for i, n in Counter(ids).items() if n > 1]
    assert not duplicates, duplicates


def test_minimum_cases_per_category() -> None:
    counts = Counter(c["category"] for c in _cases())
    for category, minimum in MIN_PER_CATEGORY.items():
        assert counts[category] >= minimum, (category, counts[category], minimum)


# --------------------------------------------------------------------------- per-case shape


def test_case_fields_and_types() -> None:
    allowed = set(REQUIRED_CASE_FIELDS) | OPTIONAL_CASE_FIELDS
    for case in _cases():
        cid = case.get("id")
        for field, kind in REQUIRED_CASE_FIELDS.items():
            assert isinstance(case.get(field), kind), (cid, field)
        assert set(case) <= allowed, (cid, set(case) - allowed)
        assert case["category"] in CATEGORIES, (cid, case["category"])
        assert case["query"].strip(), cid
        assert case["rubric"].strip(), cid
        assert all(isinstance(e, str) and e for e in case["expected_retrievals"]), cid
        assert len(set(case["expected_retrievals"])) == len(case["expected_retrievals"]), cid


def test_memories_are_well_formed() -> None:
    for case in _cases():
        cid = case["id"]
        own = case["setup_memories"]
        assert 4 <= len(own) <= 12, (cid, len(own))
        others = [m for o in case.get("other_users", []) for m in o.get("memories", [])]
        for memory in [*own, *others]:
            assert set(memory) <= MEMORY_FIELDS, (cid, set(memory) - MEMORY_FIELDS)
            assert isinstance(memory.get("content"), str) and memory["content"].strip(), cid
            assert memory.get("type") in MEMORY_TYPES, (cid, memory.get("type"))
            if "importance" in memory:
                importance = memory["importance"]
                assert isinstance(importance, int | float) and not isinstance(importance, bool), cid
                assert 0.0 <= importance <= 1.0, (cid, importance)
            for field in ("created_at", "expires_at"):
                if field in memory:
                    _parse_ts(memory[field])
            if "deleted" in memory:
                assert isinstance(memory["deleted"], bool), cid
        contents = [m["content"] for m in own]
        assert len(set(contents)) == len(contents), f"{cid}: duplicate own memory content"


def test_messages_are_well_formed() -> None:
    for case in _cases():
        cid = case["id"]
        if "setup_messages" in case:
            assert isinstance(case["setup_messages"], list) and case["setup_messages"], cid
        messages = list(case.get("setup_messages", []))
        for conversation in case.get("setup_conversations", []):
            assert isinstance(conversation, list) and conversation, cid
            messages.extend(conversation)
        for other in case.get("other_users", []):
            assert set(other) <= {"memories", "messages"}, cid
            assert isinstance(other.get("memories", []), list), cid
            assert isinstance(other.get("messages", []), list), cid
            messages.extend(other.get("messages", []))
        for message in messages:
            assert {"role", "content"} <= set(message) <= {"role", "content", "speaker"}, cid
            if "speaker" in message:  # a participant's name, stored as metadata.speaker
                assert isinstance(message["speaker"], str) and message["speaker"].strip(), cid
            assert message["role"] in MESSAGE_ROLES, (cid, message["role"])
            assert isinstance(message["content"], str) and message["content"].strip(), cid


def test_time_filters_are_well_formed() -> None:
    for case in _cases():
        if "time_filter" not in case:
            continue
        window = case["time_filter"]
        assert isinstance(window, dict) and window, case["id"]
        assert set(window) <= TIME_FILTER_FIELDS, case["id"]
        stamps = {name: _parse_ts(value) for name, value in window.items()}
        if "time_from" in stamps and "time_to" in stamps:
            assert stamps["time_from"] <= stamps["time_to"], case["id"]


def test_time_filtered_expectations_lie_inside_the_filter() -> None:
    for case in _cases():
        window = {k: _parse_ts(v) for k, v in case.get("time_filter", {}).items()}
        if not window:
            continue
        created = {m["content"]: m.get("created_at") for m in case["setup_memories"]}
        for expected in case["expected_retrievals"]:
            stamp = created.get(expected)
            assert stamp is not None, (case["id"], "time cases expect dated memories")
            moment = _parse_ts(stamp)
            assert moment >= window.get("time_from", moment), case["id"]
            assert moment <= window.get("time_to", moment), case["id"]
            assert moment <= window.get("as_of", moment), case["id"]


def test_types_filter_values() -> None:
    for case in _cases():
        if "types" in case:
            types = case["types"]
            assert isinstance(types, list) and types, case["id"]
            assert set(types) <= MEMORY_TYPES, (case["id"], types)
            assert len(set(types)) == len(types), case["id"]


# --------------------------------------------------------------------------- expectations


def test_expected_retrievals_are_own_live_content() -> None:
    for case in _cases():
        live = _own_live_contents(case)
        for expected in case["expected_retrievals"]:
            assert expected in live, f"{case['id']}: not own live content: {expected[:60]!r}"


def test_expected_retrievals_respect_type_filter() -> None:
    for case in _cases():
        if "types" not in case:
            continue
        allowed = set(case["types"])
        by_content = {m["content"]: m for m in case["setup_memories"]}
        for expected in case["expected_retrievals"]:
            if expected in by_content:
                assert by_content[expected]["type"] in allowed, (case["id"], expected)


def test_expected_retrievals_never_come_from_other_users() -> None:
    for case in _cases():
        others = _other_user_contents(case)
        own = _own_live_contents(case)
        for expected in case["expected_retrievals"]:
            if expected in others:
                # Identical content is allowed only when the case's own user holds it too
                # (the expectation is about the own copy) and the case tests isolation.
                assert expected in own and case["category"] == "security", (case["id"], expected)


# --------------------------------------------------------------------------- categories


def _by_category(category: str) -> list[dict[str, Any]]:
    return [c for c in _cases() if c["category"] == category]


def test_no_relevant_cases_expect_nothing() -> None:
    for case in _by_category("no_relevant"):
        assert case["expected_retrievals"] == [], case["id"]
        assert case["setup_memories"], case["id"]


def test_paraphrase_cases_share_no_content_word() -> None:
    for case in _by_category("paraphrase"):
        assert len(case["expected_retrievals"]) >= 1, case["id"]
        query_stems = _stems(case["query"])
        for expected in case["expected_retrievals"]:
            shared = query_stems & _stems(expected)
            assert not shared, (case["id"], shared)


def test_synthesis_cases_expect_two_to_four() -> None:
    for case in _by_category("synthesis"):
        assert 2 <= len(case["expected_retrievals"]) <= 4, case["id"]


def test_exact_keyword_cases_share_a_word() -> None:
    for case in _by_category("exact_keyword"):
        assert case["expected_retrievals"], case["id"]
        query_stems = _stems(case["query"])
        for expected in case["expected_retrievals"]:
            assert query_stems & _stems(expected), case["id"]


def test_type_filter_cases_exclude_a_same_topic_memory() -> None:
    for case in _by_category("type_filter"):
        assert "types" in case, case["id"]
        assert case["expected_retrievals"], case["id"]
        filtered_out = [m for m in case["setup_memories"] if m["type"] not in case["types"]]
        assert filtered_out, f"{case['id']}: no memory of a filtered-out type"


def test_expired_cases_have_an_expired_memory() -> None:
    for case in _by_category("expired"):
        expired = [m for m in case["setup_memories"] if _is_expired(m)]
        assert expired, case["id"]
        expired_contents = {m["content"] for m in expired}
        assert not expired_contents & set(case["expected_retrievals"]), case["id"]
    # Valid memories may carry a future expiry; make sure those are actually in the future.
    for case in _cases():
        for memory in case["setup_memories"]:
            if memory["content"] in case["expected_retrievals"] and "expires_at" in memory:
                assert _parse_ts(memory["expires_at"]) > REFERENCE_NOW, case["id"]


def test_deleted_cases_have_a_deleted_memory() -> None:
    for case in _by_category("deleted"):
        deleted = [m for m in case["setup_memories"] if m.get("deleted")]
        assert deleted, case["id"]
        assert not {m["content"] for m in deleted} & set(case["expected_retrievals"]), case["id"]


def test_budget_cases_overflow_the_token_budget() -> None:
    for case in _by_category("budget"):
        memories = [m for m in case["setup_memories"] if _is_live(m)]
        assert 6 <= len(memories) <= 12, case["id"]
        assert 1 <= len(case["expected_retrievals"]) <= 2, case["id"]
        for memory in memories:
            assert 150 <= _words(memory["content"]) <= 300, (case["id"], _words(memory["content"]))
        total_words = sum(_words(m["content"]) for m in memories)
        assert total_words * 1.3 > BUDGET_TOKENS, (case["id"], total_words)


def test_near_duplicate_cases_have_several_expected() -> None:
    for case in _by_category("near_duplicate"):
        assert len(case["expected_retrievals"]) >= 2, case["id"]


def test_messages_cases_expect_message_content_only() -> None:
    for case in _by_category("messages"):
        messages = {m["content"] for m in case.get("setup_messages", [])}
        memories = {m["content"] for m in case["setup_memories"]}
        assert messages, case["id"]
        assert case["expected_retrievals"], case["id"]
        for expected in case["expected_retrievals"]:
            assert expected in messages and expected not in memories, (case["id"], expected)


def test_agent_write_cases_make_well_formed_tool_calls() -> None:
    for case in _by_category("agent_writes"):
        calls = case.get("setup_tool_calls")
        assert isinstance(calls, list) and calls, case["id"]
        setup = {m["content"] for m in case["setup_memories"]}
        messages = {m["content"] for m in case.get("setup_messages", [])}
        saved: set[str] = set()
        for call in calls:
            assert set(call) <= {"tool", "args", "expect_action"}, case["id"]
            assert call["tool"] in TOOLS, case["id"]
            refs = [v["ref"] for v in call["args"].values() if isinstance(v, dict)]
            for ref in refs:
                assert ref in setup | messages | saved, (case["id"], ref)
            if call["tool"] == "save_memory":
                assert call["args"]["type"] in MEMORY_TYPES, case["id"]
                saved.add(call["args"]["content"])
            elif call["tool"] == "rate_message":
                assert call["args"]["vote"] in {"up", "down"}, case["id"]
                assert call["args"]["message_id"]["ref"] in messages, case["id"]
    for case in _cases():
        if case["category"] != "agent_writes":
            assert "setup_tool_calls" not in case, case["id"]


def test_security_cases_have_other_users() -> None:
    for case in _by_category("security"):
        others = case.get("other_users", [])
        assert others, case["id"]
        assert _other_user_contents(case), case["id"]
