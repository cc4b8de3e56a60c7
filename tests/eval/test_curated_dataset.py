"""The curated development set (eval/curated_dev.json): schema, sizes, shape mix, and the
lexical rule of each shape checked with Postgres' own English stemmer (the one the keyword
arm ranks with), so "paraphrase" really means no stem in common with the answer."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from app.embedded import EmbeddedPostgres
from eval import corpus_check
from eval.datasets.curated import (
    DEFAULT_PATH,
    MEMORY_TYPES,
    SHAPES,
    CuratedDataset,
    load_curated,
)

MIN_USERS = 5
MIN_QUESTIONS = 200
MEMORIES_PER_USER = (30, 50)
WORDS_PER_MEMORY = (5, 30)
# Share of all questions per shape: (at least, at most).
SHAPE_SHARES = {
    "paraphrase": (0.50, 0.60),
    "shared_word": (0.12, 0.20),
    "no_answer": (0.12, 0.20),
    "name_trap": (0.06, 0.10),
    "newer_wins": (0.03, 0.06),
    "two_memories": (0.04, 0.07),
}
# Sets we are measured on are built around these walks of life: ours must not be.
AVOIDED_PERSONAS = ("developer", "programmer", "nurse", "teacher", "sales manager", "student")


@pytest.fixture(scope="module")
def dataset() -> CuratedDataset:
    return load_curated(DEFAULT_PATH)


async def stems(pg: EmbeddedPostgres, texts: list[str]) -> dict[str, frozenset[str]]:
    """Each text's lexemes under to_tsvector('english', ...), from the real server."""
    return await corpus_check.lexemes(pg.dsn, texts)


@pytest.fixture
async def lexemes(
    pg: EmbeddedPostgres, dataset: CuratedDataset
) -> AsyncIterator[dict[str, frozenset[str]]]:
    texts = {m.content for u in dataset.users for m in u.memories}
    texts |= {q.query for u in dataset.users for q in u.questions}
    yield await stems(pg, sorted(texts))


# --------------------------------------------------------------------------- the stemmer


async def test_the_stemmer_check_sees_shared_stems_and_ignores_stop_words(
    pg: EmbeddedPostgres,
) -> None:
    found = await stems(pg, ["Which knives do I like?", "I liked my knife", "what is it"])
    # "liked"/"like" meet on one stem; the Snowball stemmer keeps "knive" and "knife" apart.
    assert found["Which knives do I like?"] & found["I liked my knife"] == {"like"}
    assert found["what is it"] == frozenset()


# --------------------------------------------------------------------------- shape rules


async def test_paraphrases_share_no_stem_with_their_answers(
    dataset: CuratedDataset, lexemes: dict[str, frozenset[str]]
) -> None:
    offending = []
    for user, question in dataset.questions():
        if question.shape != "paraphrase":
            continue
        for key in question.answers:
            shared = lexemes[question.query] & lexemes[user.memory(key).content]
            if shared:
                offending.append((question.id, key, sorted(shared)))
    assert offending == []


async def test_shared_word_questions_share_a_stem_with_each_answer(
    dataset: CuratedDataset, lexemes: dict[str, frozenset[str]]
) -> None:
    offending = [
        (question.id, key)
        for user, question in dataset.questions()
        if question.shape == "shared_word"
        for key in question.answers
        if not lexemes[question.query] & lexemes[user.memory(key).content]
    ]
    assert offending == []


async def test_most_no_answer_questions_share_an_incidental_stem_with_the_store(
    dataset: CuratedDataset, lexemes: dict[str, frozenset[str]]
) -> None:
    # A question sharing no word with anything stored is easy to abstain on; most must not be.
    questions = [(u, q) for u, q in dataset.questions() if q.shape == "no_answer"]
    close = [
        q.id
        for user, q in questions
        if any(lexemes[q.query] & lexemes[m.content] for m in user.memories)
    ]
    assert len(close) >= len(questions) // 2


def test_name_traps_name_a_person_the_store_knows(dataset: CuratedDataset) -> None:
    offending = []
    for user, question in dataset.questions():
        if question.shape != "name_trap":
            continue
        # Capitalised words after the first, without a possessive: the names asked about.
        names = {w.removesuffix("'s") for w in re.findall(r"(?<=\s)[A-Z][\w']+", question.query)}
        stored = " ".join(m.content for m in user.memories)
        if not any(re.search(rf"\b{re.escape(name)}\b", stored) for name in names):
            offending.append(question.id)
    assert offending == []


def test_name_traps_mix_unanswerable_and_look_alike_questions(dataset: CuratedDataset) -> None:
    traps = [q for _, q in dataset.questions() if q.shape == "name_trap"]
    assert sum(not q.answers for q in traps) >= len(traps) // 2
    assert sum(bool(q.answers) for q in traps) >= 3


def test_newer_wins_answers_are_newer_than_what_they_replaced(dataset: CuratedDataset) -> None:
    for user, question in dataset.questions():
        if question.shape == "newer_wins":
            newer = user.memory(question.answers[0])
            assert all(user.memory(k).age_days > newer.age_days for k in question.stale)
            assert newer.type == "decision" or user.memory(question.stale[0]).type == "decision"


# --------------------------------------------------------------------------- sizes and mix


def test_size_and_shape_mix(dataset: CuratedDataset) -> None:
    questions = [q for _, q in dataset.questions()]
    assert len(dataset.users) >= MIN_USERS
    assert len(questions) >= MIN_QUESTIONS
    counts = Counter(q.shape for q in questions)
    assert set(counts) == set(SHAPES)
    for shape, (low, high) in SHAPE_SHARES.items():
        share = counts[shape] / len(questions)
        assert low <= share <= high, (shape, round(share, 3))


def test_every_user_has_a_realistic_store(dataset: CuratedDataset) -> None:
    low, high = MEMORIES_PER_USER
    shortest, longest = WORDS_PER_MEMORY
    for user in dataset.users:
        assert low <= len(user.memories) <= high, user.id
        assert {m.type for m in user.memories} == MEMORY_TYPES, user.id
        for memory in user.memories:
            assert shortest <= len(memory.content.split()) <= longest, (user.id, memory.key)
        # every user is asked every shape
        assert {q.shape for q in user.questions} == set(SHAPES), user.id
        assert all(q.id.startswith(f"{user.id}-q") for q in user.questions)


def test_personas_stay_outside_the_walks_of_life_we_are_measured_on(
    dataset: CuratedDataset,
) -> None:
    for user in dataset.users:
        assert not any(word in user.persona.lower() for word in AVOIDED_PERSONAS), user.id


def test_questions_are_not_copies_of_memories(dataset: CuratedDataset) -> None:
    for user in dataset.users:
        contents = {m.content.lower() for m in user.memories}
        assert not [q.id for q in user.questions if q.query.lower() in contents]
        assert len({q.query for q in user.questions}) == len(user.questions)


# --------------------------------------------------------------------------- the loader


def _write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "set.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _minimal() -> dict[str, Any]:
    return {
        "version": "1.0.0",
        "description": "d",
        "reference_date": "2026-11-26",
        "users": [
            {
                "id": "u",
                "persona": "p",
                "memories": [
                    {
                        "key": "m01",
                        "content": "Old plan",
                        "type": "decision",
                        "importance": 0.5,
                        "age_days": 40,
                    },
                    {
                        "key": "m02",
                        "content": "New plan",
                        "type": "decision",
                        "importance": 0.5,
                        "age_days": 4,
                    },
                ],
                "questions": [
                    {
                        "id": "u-q01",
                        "query": "Which plan?",
                        "shape": "newer_wins",
                        "answers": ["m02"],
                        "stale": ["m01"],
                    },
                ],
            }
        ],
    }


def test_the_loader_reads_a_minimal_set(tmp_path: Path) -> None:
    loaded = load_curated(_write(tmp_path, _minimal()))
    user = loaded.users[0]
    assert user.questions[0].answers == ("m02",) and user.questions[0].stale == ("m01",)
    assert (loaded.reference_now - user.memory("m01").created_at(loaded.reference_now)).days == 40


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("questions", 0, "answers"), ["m09"], "unknown memory keys"),
        (("questions", 0, "stale"), ["m02"], "both answer and stale"),
        (("questions", 0, "shape"), "riddle", "shape 'riddle'"),
        (("memories", 0, "age_days"), 1, "must be older"),
        (("memories", 0, "type"), "fact", None),  # a fact may be replaced too: loads
        (("memories", 1, "type"), "memo", "type 'memo'"),
        (("memories", 1, "importance"), 1.5, "importance"),
        (("memories", 1, "age_days"), True, "wrong type"),
        (("memories", 1, "key"), "m01", "keys repeat"),
    ],
)
def test_the_loader_names_broken_entries(
    tmp_path: Path, path: tuple[Any, ...], value: Any, message: str | None
) -> None:
    data = _minimal()
    target: Any = data["users"][0]
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    file = _write(tmp_path, data)
    if message is None:
        load_curated(file)
        return
    with pytest.raises(ValueError, match=re.escape(message)):
        load_curated(file)


@pytest.mark.parametrize(
    ("question", "message"),
    [
        ({"shape": "no_answer", "answers": ["m01"], "stale": []}, "lists answers"),
        ({"shape": "paraphrase", "answers": [], "stale": []}, "needs an answer"),
        ({"shape": "two_memories", "answers": ["m01"], "stale": []}, "at least two"),
        ({"shape": "paraphrase", "answers": ["m01"], "stale": ["m02"]}, "only newer_wins"),
    ],
)
def test_the_loader_checks_each_shapes_labels(
    tmp_path: Path, question: dict[str, Any], message: str
) -> None:
    data = _minimal()
    data["users"][0]["questions"][0].update(question)
    with pytest.raises(ValueError, match=re.escape(message)):
        load_curated(_write(tmp_path, data))
