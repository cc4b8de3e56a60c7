"""Loader for the hand-written curated-memory development set (eval/curated_dev.json).

Six people outside the walks of life the project is measured on, ~40 short memories each
(facts, preferences, decisions, notes) and questions in their own words, each labelled with a
shape (see SHAPES) and the keys of the memories that answer it. Memory times are relative:
`age_days` before the file's `reference_date`, so a run can shift them onto its own clock.

`load_curated` checks the schema and the labels' internal rules (keys exist, newer_wins names
a newer answer and an older stale memory, ...) and raises ValueError naming the bad entry. The
lexical rules of the shapes (paraphrases share no English stem with their answer) need
Postgres' stemmer: tests/eval/test_curated_dataset.py checks them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

__all__ = [
    "ANSWERABLE_SHAPES",
    "CORPUS_PATH",
    "DEFAULT_PATH",
    "MEMORY_TYPES",
    "SHAPES",
    "SPLITS",
    "CuratedDataset",
    "CuratedMemory",
    "CuratedQuestion",
    "CuratedUser",
    "load_curated",
]

DEFAULT_PATH = Path(__file__).resolve().parents[1] / "curated_dev.json"
# The training and evaluation corpus (issue 45): persona files split by person.
CORPUS_PATH = Path(__file__).resolve().parents[1] / "corpus"
MEMORY_TYPES = frozenset({"fact", "preference", "decision", "note"})
SHAPES = (
    "paraphrase",  # answered by a memory it shares no stem with
    "shared_word",  # answered by a memory it shares at least one stem with
    "no_answer",  # nothing stored answers it
    "name_trap",  # about a stored person; unanswerable, or only one of look-alikes answers
    "newer_wins",  # the answer replaced an older memory (no link): it must rank first
    "two_memories",  # needs every answer key
)
# A corpus person's split (eval/corpus); "" in a development file without splits.
# A person's split: "train" people are fitted on (the embedder and the models), "calibration"
# people only by the models that read the embedder's cosines (the question model: the
# embedder never saw them, so their cosines are as a new user's), "validation" people choose,
# "test" people are read once after the choice ("" a file without splits).
SPLITS = frozenset({"", "train", "calibration", "validation", "test"})
# Shapes whose questions always have an answer; name_trap may or may not.
ANSWERABLE_SHAPES = frozenset({"paraphrase", "shared_word", "newer_wins", "two_memories"})


@dataclass(frozen=True)
class CuratedMemory:
    key: str
    content: str
    type: str
    importance: float
    age_days: int

    def created_at(self, now: datetime) -> datetime:
        """When the memory was written, on a clock whose "today" is `now`."""
        return now - timedelta(days=self.age_days)


@dataclass(frozen=True)
class CuratedQuestion:
    id: str
    query: str
    shape: str
    answers: tuple[str, ...]
    stale: tuple[str, ...] = ()
    note: str = ""

    @property
    def answerable(self) -> bool:
        return bool(self.answers)


@dataclass(frozen=True)
class CuratedUser:
    id: str
    persona: str
    memories: tuple[CuratedMemory, ...]
    questions: tuple[CuratedQuestion, ...]
    # The person's own name, as memories written in the third person use it ("" where none
    # does), and the corpus split the person belongs to (eval/corpus: train, validation, test).
    name: str = ""
    split: str = ""

    def memory(self, key: str) -> CuratedMemory:
        return next(m for m in self.memories if m.key == key)


@dataclass(frozen=True)
class CuratedDataset:
    version: str
    description: str
    reference_date: date
    users: tuple[CuratedUser, ...]

    @property
    def reference_now(self) -> datetime:
        """Noon UTC of the reference date: "today" for the memories' ages."""
        day = self.reference_date
        return datetime(day.year, day.month, day.day, 12, tzinfo=UTC)

    def questions(self) -> list[tuple[CuratedUser, CuratedQuestion]]:
        return [(user, q) for user in self.users for q in user.questions]


def _field(obj: Mapping[str, Any], name: str, kind: type | tuple[type, ...], where: str) -> Any:
    if name not in obj:
        raise ValueError(f"{where}: missing field {name!r}")
    value = obj[name]
    # bool is an int: never accept it where a number is meant
    if isinstance(value, bool) or not isinstance(value, kind):
        raise ValueError(f"{where}: field {name!r} has the wrong type ({type(value).__name__})")
    return value


def _keys(values: Sequence[Any], known: set[str], where: str, name: str) -> tuple[str, ...]:
    keys = tuple(values)
    unknown = [k for k in keys if k not in known]
    if unknown:
        raise ValueError(f"{where}: {name} names unknown memory keys {unknown}")
    if len(set(keys)) != len(keys):
        raise ValueError(f"{where}: {name} repeats a key")
    return keys


def _memory(raw: Mapping[str, Any], where: str) -> CuratedMemory:
    memory = CuratedMemory(
        key=_field(raw, "key", str, where),
        content=_field(raw, "content", str, where).strip(),
        type=_field(raw, "type", str, where),
        importance=float(_field(raw, "importance", (int, float), where)),
        age_days=_field(raw, "age_days", int, where),
    )
    if not memory.content:
        raise ValueError(f"{where}: empty content")
    if memory.type not in MEMORY_TYPES:
        raise ValueError(f"{where}: type {memory.type!r} is not one of {sorted(MEMORY_TYPES)}")
    if not 0.0 <= memory.importance <= 1.0:
        raise ValueError(f"{where}: importance {memory.importance} outside [0, 1]")
    if memory.age_days < 0:
        raise ValueError(f"{where}: negative age_days")
    return memory


def _question(
    raw: Mapping[str, Any], memories: Mapping[str, CuratedMemory], where: str
) -> CuratedQuestion:
    known = set(memories)
    question = CuratedQuestion(
        id=_field(raw, "id", str, where),
        query=_field(raw, "query", str, where).strip(),
        shape=_field(raw, "shape", str, where),
        answers=_keys(_field(raw, "answers", list, where), known, where, "answers"),
        stale=_keys(raw.get("stale", []), known, where, "stale"),
        note=str(raw.get("note", "")),
    )
    where = f"{where} ({question.id})"
    if not question.query:
        raise ValueError(f"{where}: empty query")
    if question.shape not in SHAPES:
        raise ValueError(f"{where}: shape {question.shape!r} is not one of {list(SHAPES)}")
    if question.shape in ANSWERABLE_SHAPES and not question.answers:
        raise ValueError(f"{where}: a {question.shape} question needs an answer")
    if question.shape == "no_answer" and question.answers:
        raise ValueError(f"{where}: a no_answer question lists answers")
    if question.shape == "two_memories" and len(question.answers) < 2:
        raise ValueError(f"{where}: a two_memories question needs at least two answers")
    if set(question.answers) & set(question.stale):
        raise ValueError(f"{where}: a key is both answer and stale")
    if question.shape == "newer_wins":
        if len(question.answers) != 1 or not question.stale:
            raise ValueError(f"{where}: newer_wins needs one answer and the stale memory")
        newer = memories[question.answers[0]]
        if any(memories[k].age_days <= newer.age_days for k in question.stale):
            raise ValueError(f"{where}: the stale memory must be older than the answer")
    elif question.stale:
        raise ValueError(f"{where}: only newer_wins questions name stale memories")
    return question


def _user(raw: Mapping[str, Any], where: str) -> CuratedUser:
    user_id = _field(raw, "id", str, where)
    where = f"user {user_id}"
    memories = [
        _memory(m, f"{where} memory {i}")
        for i, m in enumerate(_field(raw, "memories", list, where))
    ]
    by_key = {m.key: m for m in memories}
    if len(by_key) != len(memories):
        raise ValueError(f"{where}: memory keys repeat")
    questions = [
        _question(q, by_key, f"{where} question {i}")
        for i, q in enumerate(_field(raw, "questions", list, where))
    ]
    split = str(raw.get("split", ""))
    if split not in SPLITS:
        raise ValueError(f"{where}: split {split!r} is not one of {sorted(SPLITS)}")
    return CuratedUser(
        id=user_id,
        persona=_field(raw, "persona", str, where),
        memories=tuple(memories),
        questions=tuple(questions),
        name=str(raw.get("name", "")),
        split=split,
    )


def load_curated(path: Path = DEFAULT_PATH, split: str = "") -> CuratedDataset:
    """The set at `path`, checked; ValueError names the first bad entry.

    A directory is a corpus (eval/corpus): every `*.json` in it, one set of their users (their
    reference dates must agree). `split` keeps only the people of that split ("" keeps all)."""
    if path.is_dir():
        parts = [_load_file(p) for p in sorted(path.glob("*.json"))]
        if not parts:
            raise ValueError(f"{path}: no *.json file")
        if len({d.reference_date for d in parts}) != 1:
            raise ValueError(f"{path}: the files' reference dates differ")
        dataset = CuratedDataset(
            version="+".join(sorted({d.version for d in parts})),
            description=f"{len(parts)} files of {path.name}",
            reference_date=parts[0].reference_date,
            users=tuple(u for d in parts for u in d.users),
        )
        _unique(list(dataset.users))
    else:
        dataset = _load_file(path)
    if split:
        if split not in SPLITS:
            raise ValueError(f"split {split!r} is not one of {sorted(SPLITS - {''})}")
        dataset = replace(dataset, users=tuple(u for u in dataset.users if u.split == split))
        if not dataset.users:
            raise ValueError(f"{path}: nobody in split {split!r}")
    return dataset


def _unique(users: list[CuratedUser]) -> None:
    ids = [u.id for u in users]
    if len(set(ids)) != len(ids):
        raise ValueError("dataset: user ids repeat")
    question_ids = [q.id for u in users for q in u.questions]
    if len(set(question_ids)) != len(question_ids):
        raise ValueError("dataset: question ids repeat")


def _load_file(path: Path) -> CuratedDataset:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from exc
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: the top level must be an object")
    users = [_user(u, f"user {i}") for i, u in enumerate(_field(raw, "users", list, "dataset"))]
    _unique(users)
    try:
        reference = date.fromisoformat(_field(raw, "reference_date", str, "dataset"))
    except ValueError as exc:
        raise ValueError(f"dataset: reference_date: {exc}") from exc
    return CuratedDataset(
        version=_field(raw, "version", str, "dataset"),
        description=_field(raw, "description", str, "dataset"),
        reference_date=reference,
        users=tuple(users),
    )


def first_memories(dataset: CuratedDataset, count: int) -> CuratedDataset:
    """Every person with only their first `count` memories, as a new user's store would be, and
    the questions still labelled by them: an answerable one whose answers (and stale
    memories) are all kept, and every question nothing answers."""
    users = []
    for user in dataset.users:
        memories = user.memories[:count]
        kept = {m.key for m in memories}
        questions = tuple(q for q in user.questions if {*q.answers, *q.stale} <= kept)
        users.append(replace(user, memories=memories, questions=questions))
    return replace(dataset, users=tuple(users))


def some_people(ids: Iterable[str], count: int) -> set[str]:
    """`count` of the people `ids` (all when count covers them), chosen by a digest of each id:
    the same people for the same count on every run, and those of a smaller count among those
    of a larger one, so a learning curve adds people rather than swapping them."""
    return set(sorted(ids, key=lambda i: hashlib.sha256(i.encode()).hexdigest())[:count])
