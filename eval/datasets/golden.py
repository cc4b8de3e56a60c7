"""Loader for the hand-written memory golden set (eval/memory_golden_dataset.json).

Format: the Memory v1 spec's (`version`, `description`, `cases[]`), with the fields
documented in tests/eval/test_golden_dataset.py. Timestamps are relative to the dataset's
reference date ("today" for expiry), named in its description.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_PATH",
    "GoldenCase",
    "GoldenDataset",
    "GoldenMemory",
    "GoldenMessage",
    "GoldenSpace",
    "GoldenToolCall",
    "OtherUser",
    "load_golden",
]

DEFAULT_PATH = Path(__file__).resolve().parents[1] / "memory_golden_dataset.json"
# Used when the file names no reference date.
DEFAULT_REFERENCE = datetime(2026, 11, 26, tzinfo=UTC)
_REFERENCE_IN_TEXT = re.compile(r"reference date[^0-9]{0,40}(\d{4}-\d{2}-\d{2})", re.IGNORECASE)


@dataclass(frozen=True)
class GoldenMemory:
    content: str
    type: str
    importance: float | None = None
    created_at: datetime | None = None
    expires_at: datetime | None = None
    deleted: bool = False


@dataclass(frozen=True)
class GoldenMessage:
    role: str
    content: str
    speaker: str | None = None  # stored as the message's metadata.speaker (a participant)

    def body(self) -> dict[str, object]:
        """The message as the import API takes it."""
        out: dict[str, object] = {"role": self.role, "content": self.content}
        if self.speaker is not None:
            out["metadata"] = {"speaker": self.speaker}
        return out


@dataclass(frozen=True)
class GoldenToolCall:
    """An agent write made through the HTTP tools after seeding, as the case's user.

    An argument given as {"ref": "<text>"} names the case user's memory or message with that
    content (a setup item or an earlier save); `expect_action` checks save_memory's answer.
    """

    tool: str
    args: Mapping[str, Any]
    expect_action: str | None = None


@dataclass(frozen=True)
class GoldenSpace:
    """A shared space the case's query reads (X-Spaces): its memories, and the case user's
    grant on it (`read`, `write`, or None: not a member, so nothing of it may come back)."""

    name: str
    access: str | None
    memories: tuple[GoldenMemory, ...]


@dataclass(frozen=True)
class OtherUser:
    memories: tuple[GoldenMemory, ...]
    messages: tuple[GoldenMessage, ...]


@dataclass(frozen=True)
class GoldenCase:
    id: str
    category: str
    query: str
    types: tuple[str, ...] | None
    expected: tuple[str, ...]
    memories: tuple[GoldenMemory, ...]
    messages: tuple[GoldenMessage, ...]
    other_users: tuple[OtherUser, ...]
    rubric: str
    # Time filters of the query (time_from / time_to / as_of), shifted like the memories' times.
    time_filter: Mapping[str, datetime] = field(default_factory=dict)
    # Further conversations of the case's user, each stored as a conversation of its own.
    conversations: tuple[tuple[GoldenMessage, ...], ...] = ()
    tool_calls: tuple[GoldenToolCall, ...] = ()
    # Shared spaces the query names (issue 43): their memories are the space's, not the user's.
    spaces: tuple[GoldenSpace, ...] = ()


@dataclass(frozen=True)
class GoldenDataset:
    path: Path
    version: str
    description: str
    reference: datetime
    cases: tuple[GoldenCase, ...]


def _timestamp(value: str | None) -> datetime | None:
    if value is None:
        return None
    parsed = datetime.fromisoformat(value)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _memory(raw: Mapping[str, Any]) -> GoldenMemory:
    return GoldenMemory(
        content=raw["content"],
        type=raw["type"],
        importance=raw.get("importance"),
        created_at=_timestamp(raw.get("created_at")),
        expires_at=_timestamp(raw.get("expires_at")),
        deleted=bool(raw.get("deleted", False)),
    )


def _messages(raw: Sequence[Mapping[str, Any]]) -> tuple[GoldenMessage, ...]:
    return tuple(GoldenMessage(m["role"], m["content"], m.get("speaker")) for m in raw)


def _case(raw: Mapping[str, Any]) -> GoldenCase:
    types = raw.get("types")
    return GoldenCase(
        id=raw["id"],
        category=raw["category"],
        query=raw["query"],
        types=tuple(types) if types else None,
        expected=tuple(raw["expected_retrievals"]),
        memories=tuple(_memory(m) for m in raw["setup_memories"]),
        messages=_messages(raw.get("setup_messages", [])),
        other_users=tuple(
            OtherUser(
                tuple(_memory(m) for m in o.get("memories", [])), _messages(o.get("messages", []))
            )
            for o in raw.get("other_users", [])
        ),
        rubric=raw["rubric"],
        time_filter={
            name: stamp
            for name, value in raw.get("time_filter", {}).items()
            if (stamp := _timestamp(value)) is not None
        },
        conversations=tuple(_messages(c) for c in raw.get("setup_conversations", [])),
        tool_calls=tuple(
            GoldenToolCall(c["tool"], c["args"], c.get("expect_action"))
            for c in raw.get("setup_tool_calls", [])
        ),
        spaces=tuple(
            GoldenSpace(
                sp["name"], sp.get("access"), tuple(_memory(m) for m in sp.get("memories", []))
            )
            for sp in raw.get("setup_spaces", [])
        ),
    )


def _reference(data: Mapping[str, Any]) -> datetime:
    explicit = data.get("reference_date")
    found = _REFERENCE_IN_TEXT.search(data.get("description", ""))
    text = explicit or (found.group(1) if found else None)
    if text is None:
        return DEFAULT_REFERENCE
    parsed = datetime.fromisoformat(text)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def load_golden(path: Path | str = DEFAULT_PATH) -> GoldenDataset:
    """Parse the golden dataset file into typed cases."""
    path = Path(path)
    data = json.loads(path.read_text(encoding="utf-8"))
    return GoldenDataset(
        path=path,
        version=str(data["version"]),
        description=data.get("description", ""),
        reference=_reference(data),
        cases=tuple(_case(c) for c in data["cases"]),
    )
