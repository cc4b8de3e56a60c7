"""The training and evaluation corpus (eval/corpus, issue 45): its size, its split by person,
the shapes' lexical rules with Postgres' own stemmer, and how its memories are written."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import AsyncIterator

import pytest

from app.embedded import EmbeddedPostgres
from eval.corpus_check import problems
from eval.datasets.curated import CORPUS_PATH, DEFAULT_PATH, SHAPES, CuratedDataset, load_curated
from scripts.train.training_data import curated_groups
from tests.eval.test_curated_dataset import AVOIDED_PERSONAS, stems

MIN_PEOPLE = 40
MIN_PAIRS = 4000  # labelled (question, memory) pairs: each question against its person's store
# The development set's walks of life: the corpus uses none of them.
DEVELOPMENT_PERSONAS = ("chef", "dairy farmer", "truck driver", "cellist", "hairdresser", "pilot")


@pytest.fixture(scope="module")
def corpus() -> CuratedDataset:
    return load_curated(CORPUS_PATH)


@pytest.fixture
async def lexemes(
    pg: EmbeddedPostgres, corpus: CuratedDataset
) -> AsyncIterator[dict[str, frozenset[str]]]:
    texts = {m.content for u in corpus.users for m in u.memories}
    texts |= {q.query for u in corpus.users for q in u.questions}
    yield await stems(pg, sorted(texts))


def test_size_people_and_labelled_pairs(corpus: CuratedDataset) -> None:
    assert len(corpus.users) >= MIN_PEOPLE
    pairs = sum(len(u.questions) * len(u.memories) for u in corpus.users)
    assert pairs >= MIN_PAIRS
    assert set(Counter(q.shape for _, q in corpus.questions())) == set(SHAPES)


def test_split_by_person_with_every_split_large_enough(corpus: CuratedDataset) -> None:
    by_split = Counter(u.split for u in corpus.users)
    assert set(by_split) == {"train", "calibration", "validation", "test"}
    assert by_split["test"] >= 8 and by_split["validation"] >= 8
    assert by_split["calibration"] >= 24  # the question model's people (eval/fit_question.py)
    assert by_split["train"] >= by_split["test"] + by_split["validation"]
    assert len({u.id for u in corpus.users}) == len(corpus.users)  # one split per person
    for split in ("train", "calibration", "validation", "test"):
        assert load_curated(CORPUS_PATH, split).users == tuple(
            u for u in corpus.users if u.split == split
        )


def test_no_person_of_the_development_set_or_of_the_sets_we_are_measured_on(
    corpus: CuratedDataset,
) -> None:
    development = {u.id for u in load_curated(DEFAULT_PATH).users}
    for user in corpus.users:
        persona = user.persona.lower()
        assert user.id not in development
        assert not any(w in persona for w in AVOIDED_PERSONAS + DEVELOPMENT_PERSONAS), user.id


async def test_paraphrase_and_shared_word_questions_keep_their_stem_rules(
    corpus: CuratedDataset, lexemes: dict[str, frozenset[str]]
) -> None:
    assert problems(corpus, lexemes) == []


def test_memories_name_their_person_in_the_third_person_as_agents_write_them(
    corpus: CuratedDataset,
) -> None:
    for user in corpus.users:
        # Any part of the name: given names come last in some ("Tan Mei Lin" is "Mei Lin").
        named = re.compile("|".join(rf"\b{re.escape(part)}\b" for part in user.name.split()))
        third = [m for m in user.memories if named.search(m.content)]
        users = [m for m in user.memories if m.content.startswith("The user")]
        long = [m for m in user.memories if len(re.findall(r"[.!?](\s|$)", m.content)) >= 2]
        assert len(third) >= 8, user.id
        assert users, user.id
        assert len(long) >= 3, user.id


def test_every_person_has_questions_nothing_answers_and_changes_of_mind(
    corpus: CuratedDataset,
) -> None:
    for user in corpus.users:
        shapes = Counter(q.shape for q in user.questions)
        unanswerable = sum(not q.answers for q in user.questions)
        assert unanswerable >= 8, user.id
        assert shapes["newer_wins"] >= 2, user.id


def test_the_embedder_trains_on_neither_the_calibration_nor_the_test_people(
    corpus: CuratedDataset,
) -> None:
    """scripts/train/training_data.py (the fine-tune's data, stdlib only) reads the train people
    and validates on the validation people; the calibration people stay as new to the embedder
    as a user is, for the question model (eval/fit_question.py)."""
    train, validation = curated_groups(sorted(CORPUS_PATH.glob("*.json")), dev=False)
    split = {u.id: u.split for u in corpus.users}
    assert {split[g.id] for g in train} == {"train"}
    assert {split[g.id] for g in validation} == {"validation"}
    assert len(train) == sum(1 for s in split.values() if s == "train")
