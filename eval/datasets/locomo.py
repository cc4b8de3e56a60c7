"""Loader for LoCoMo (Maharana et al., ACL 2024) in its own JSON format.

Protocol (see /work/shared/datasets/locomo/README.md): one conversation is one
user, every dialog turn is one stored item ``"<speaker>: <text>"`` created at
its session's date, every QA pair of categories 1-4 is one query whose relevant
items are the turns named in its (normalised) ``evidence``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

__all__ = [
    "CATEGORY_NAMES",
    "Conversation",
    "Question",
    "Turn",
    "load_locomo",
    "normalise_evidence",
    "parse_session_datetime",
]

CATEGORY_NAMES: dict[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
}


@dataclass(frozen=True)
class Turn:
    """One dialog turn, stored as one memory item."""

    dia_id: str
    speaker: str
    text: str
    session: int
    created_at: datetime
    content: str  # f"{speaker}: {text}", the text the service stores


@dataclass(frozen=True)
class Question:
    """One QA pair, used as one retrieval query."""

    qa_index: int  # position in the file's qa list, stable under category filtering
    question: str
    answer: str
    category: int
    evidence: tuple[str, ...]  # normalised dia_ids, all present in the conversation


@dataclass(frozen=True)
class Conversation:
    """One LoCoMo sample: one user with all of their turns and queries."""

    sample_id: str
    user_id: str
    turns: tuple[Turn, ...]
    questions: tuple[Question, ...]


_SESSION_KEY = re.compile(r"^session_(\d+)$")

# "1:56 pm on 8 May, 2023" (the only shape in the file); spaces and the comma are
# matched loosely in case the other half of the data set is less tidy.
_SESSION_DATE = re.compile(
    r"^\s*(\d{1,2}):(\d{2})\s*([ap])\.?m\.?\s+on\s+(\d{1,2})\s+([a-z]+),?\s+(\d{4})\s*$",
    re.IGNORECASE,
)
_MONTH_NAMES = (
    "january", "february", "march", "april", "may", "june",
    "july", "august", "september", "october", "november", "december",
)  # fmt: skip
# Full names plus the usual abbreviations ("May", "Sep", "Sept"), but not any prefix.
_MONTHS = {
    **{name: number for number, name in enumerate(_MONTH_NAMES, start=1)},
    **{name[:3]: number for number, name in enumerate(_MONTH_NAMES, start=1)},
    "sept": 9,
}

# One evidence reference: "D8:6", "D:11:26" (stray colon), "D30:05" (leading zero).
# Lists separated by ";", "," or spaces fall out of finditer naturally.
_EVIDENCE_ID = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)", re.IGNORECASE)


def parse_session_datetime(raw: str) -> datetime:
    """Parse LoCoMo's "1:56 pm on 8 May, 2023" into an aware UTC datetime."""
    # Parsed by hand rather than strptime because %B and %p depend on the locale.
    match = _SESSION_DATE.match(raw)
    if match is None:
        raise ValueError(f"unrecognised LoCoMo session date: {raw!r}")
    hour, minute, meridiem, day, month_name, year = match.groups()
    month = _MONTHS.get(month_name.lower())
    if month is None:
        raise ValueError(f"unrecognised month in LoCoMo session date: {raw!r}")
    if not 1 <= int(hour) <= 12:
        raise ValueError(f"hour out of range in LoCoMo session date: {raw!r}")
    hour_24 = int(hour) % 12 + (12 if meridiem.lower() == "p" else 0)
    return datetime(int(year), month, int(day), hour_24, int(minute), tzinfo=UTC)


def normalise_evidence(raw: Iterable[str], known: Collection[str]) -> tuple[str, ...]:
    """Normalise evidence strings to known "D<session>:<turn>" ids, deduplicated in order."""
    result: list[str] = []
    for entry in raw:
        for match in _EVIDENCE_ID.finditer(str(entry)):
            dia_id = f"D{int(match.group(1))}:{int(match.group(2))}"
            # Unknown ids (e.g. "D10:19" past the session's end) can never be retrieved.
            if dia_id in known and dia_id not in result:
                result.append(dia_id)
    return tuple(result)


def _session_numbers(conversation: Mapping[str, Any]) -> list[int]:
    # session_N_date_time keys exist for sessions that have no turns (conv-26 has
    # dates up to 35 but turns up to 19), so sessions are found by their turn lists.
    numbers = []
    for key, value in conversation.items():
        match = _SESSION_KEY.match(key)
        if match and isinstance(value, list):
            numbers.append(int(match.group(1)))
    return sorted(numbers)


def _load_turns(conversation: Mapping[str, Any]) -> tuple[Turn, ...]:
    turns: list[Turn] = []
    for number in _session_numbers(conversation):
        date_key = f"session_{number}_date_time"
        if date_key not in conversation:
            raise ValueError(f"session_{number} has no {date_key}")
        started = parse_session_datetime(conversation[date_key])
        for index, raw in enumerate(conversation[f"session_{number}"]):
            speaker, text = str(raw["speaker"]), str(raw["text"])
            turns.append(
                Turn(
                    dia_id=str(raw["dia_id"]),
                    speaker=speaker,
                    text=text,
                    session=number,
                    # Dates have minute resolution; a second per turn keeps their order.
                    created_at=started + timedelta(seconds=index),
                    content=f"{speaker}: {text}",
                )
            )
    return tuple(turns)


def _load_questions(
    qa: Iterable[Mapping[str, Any]],
    known: Collection[str],
    categories: Collection[int],
    require_evidence: bool,
) -> tuple[Question, ...]:
    questions: list[Question] = []
    for index, raw in enumerate(qa):
        category = int(raw["category"])
        if category not in categories:
            continue
        evidence = normalise_evidence(raw.get("evidence") or (), known)
        if require_evidence and not evidence:
            continue
        answer = raw.get("answer")
        questions.append(
            Question(
                qa_index=index,
                question=str(raw["question"]),
                # Some answers are ints (e.g. 2022) and adversarial ones have none.
                answer="" if answer is None else str(answer),
                category=category,
                evidence=evidence,
            )
        )
    return tuple(questions)


def load_locomo(
    path: Path | str,
    categories: Collection[int] = (1, 2, 3, 4),
    *,
    require_evidence: bool = True,
) -> list[Conversation]:
    """Load LoCoMo conversations with their queries of the given categories.

    With require_evidence (the default, as in the README's reference numbers),
    queries whose evidence normalises to nothing are dropped: they have no
    relevant turn, so they cannot measure retrieval.
    """
    with Path(path).open(encoding="utf-8") as handle:
        samples = json.load(handle)
    wanted = frozenset(int(c) for c in categories)
    conversations: list[Conversation] = []
    for sample in samples:
        sample_id = str(sample["sample_id"])
        turns = _load_turns(sample["conversation"])
        known = frozenset(turn.dia_id for turn in turns)
        if len(known) != len(turns):
            raise ValueError(f"{sample_id}: duplicate dia_id among its turns")
        conversations.append(
            Conversation(
                sample_id=sample_id,
                user_id=f"locomo-{sample_id}",
                turns=turns,
                questions=_load_questions(sample["qa"], known, wanted, require_evidence),
            )
        )
    return conversations
