"""LoCoMo loader: evidence normalisation, date parsing, and the real development half."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from eval.datasets.locomo import (
    CATEGORY_NAMES,
    Conversation,
    load_locomo,
    normalise_evidence,
    parse_session_datetime,
)

LOCOMO_DEV = Path("/work/shared/datasets/locomo/locomo-dev.json")
needs_locomo = pytest.mark.skipif(not LOCOMO_DEV.exists(), reason=f"{LOCOMO_DEV} not present")

KNOWN = {"D1:2", "D1:3", "D8:6", "D9:17", "D11:26", "D30:5"}


# --------------------------------------------------------------------------- evidence


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (["D1:2"], ("D1:2",)),
        (["D8:6; D9:17"], ("D8:6", "D9:17")),
        (["D:11:26"], ("D11:26",)),
        (["D30:05"], ("D30:5",)),
        (["D1:2 D1:3"], ("D1:2", "D1:3")),
        (["D1:2,D1:3"], ("D1:2", "D1:3")),
        (["D1:2, D1:3"], ("D1:2", "D1:3")),
        (["D01:03"], ("D1:3",)),
        (["D"], ()),  # a bare "D" in conv-42
        (["D10:19"], ()),  # well-formed but not in the conversation
        ([""], ()),
        ([], ()),
    ],
)
def test_normalise_evidence_variants(raw: list[str], expected: tuple[str, ...]) -> None:
    assert normalise_evidence(raw, KNOWN) == expected


def test_normalise_evidence_deduplicates_in_order() -> None:
    raw = ["D9:17", "D1:2; D9:17", "D1:02", "D8:6"]
    assert normalise_evidence(raw, KNOWN) == ("D9:17", "D1:2", "D8:6")


# --------------------------------------------------------------------------- dates


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("1:56 pm on 8 May, 2023", datetime(2023, 5, 8, 13, 56, tzinfo=UTC)),
        ("10:04 am on 19 December, 2023", datetime(2023, 12, 19, 10, 4, tzinfo=UTC)),
        ("12:06 am on 11 November, 2022", datetime(2022, 11, 11, 0, 6, tzinfo=UTC)),
        ("12:30 pm on 1 January, 2024", datetime(2024, 1, 1, 12, 30, tzinfo=UTC)),
        ("9:05 AM on 3 Sept, 2022", datetime(2022, 9, 3, 9, 5, tzinfo=UTC)),
    ],
)
def test_parse_session_datetime(raw: str, expected: datetime) -> None:
    parsed = parse_session_datetime(raw)
    assert parsed == expected
    assert parsed.utcoffset() == timedelta(0)


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "8 May 2023",
        "1:56 pm on 8 Maybe, 2023",
        "25:00 on 1 May, 2023",
        "13:00 pm on 1 May, 2023",
    ],
)
def test_parse_session_datetime_rejects_garbage(raw: str) -> None:
    with pytest.raises(ValueError):
        parse_session_datetime(raw)


# --------------------------------------------------------------------------- synthetic file


def _write_sample(tmp_path: Path) -> Path:
    sample = {
        "sample_id": "conv-x",
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bob",
            # session_10 must sort after session_2; session_11 has a date but no turns.
            "session_10_date_time": "9:00 am on 3 March, 2023",
            "session_10": [{"speaker": "Ann", "dia_id": "D10:1", "text": "Ten."}],
            "session_2_date_time": "1:56 pm on 8 May, 2022",
            "session_2": [
                {"speaker": "Ann", "dia_id": "D2:1", "text": "Hi Bob"},
                {"speaker": "Bob", "dia_id": "D2:2", "text": "Hi!", "blip_caption": "a cat"},
            ],
            "session_11_date_time": "9:00 am on 4 March, 2023",
        },
        "qa": [
            {"question": "Q0", "answer": "a0", "evidence": ["D2:1"], "category": 4},
            {"question": "Q1", "answer": 2022, "evidence": ["D2:01; D10:1"], "category": 2},
            {"question": "Q2", "adversarial_answer": "no", "evidence": ["D2:2"], "category": 5},
            {"question": "Q3", "answer": "a3", "evidence": [], "category": 3},
            {"question": "Q4", "answer": "a4", "evidence": ["D7:7", "D"], "category": 1},
            {"question": "Q5", "evidence": ["D:10:1"], "category": 1},
        ],
    }
    path = tmp_path / "mini.json"
    path.write_text(json.dumps([sample]), encoding="utf-8")
    return path


def test_load_synthetic_turns(tmp_path: Path) -> None:
    (conv,) = load_locomo(_write_sample(tmp_path))
    assert conv.sample_id == "conv-x"
    assert conv.user_id == "locomo-conv-x"
    assert [t.dia_id for t in conv.turns] == ["D2:1", "D2:2", "D10:1"]
    assert [t.session for t in conv.turns] == [2, 2, 10]
    first, second, third = conv.turns
    assert first.content == "Ann: Hi Bob"
    assert second.content == "Bob: Hi!"  # captions are not part of the stored text
    assert first.created_at == datetime(2022, 5, 8, 13, 56, tzinfo=UTC)
    assert second.created_at == first.created_at + timedelta(seconds=1)
    assert third.created_at == datetime(2023, 3, 3, 9, 0, tzinfo=UTC)


def test_load_synthetic_questions(tmp_path: Path) -> None:
    (conv,) = load_locomo(_write_sample(tmp_path))
    got = [(q.qa_index, q.answer, q.category, q.evidence) for q in conv.questions]
    # Q2 is category 5, Q3 and Q4 have no usable evidence.
    assert got == [
        (0, "a0", 4, ("D2:1",)),
        (1, "2022", 2, ("D2:1", "D10:1")),
        (5, "", 1, ("D10:1",)),
    ]


def test_load_synthetic_options(tmp_path: Path) -> None:
    path = _write_sample(tmp_path)
    (all_questions,) = load_locomo(path, require_evidence=False)
    assert [q.qa_index for q in all_questions.questions] == [0, 1, 3, 4, 5]
    assert all_questions.questions[1].evidence == ("D2:1", "D10:1")
    assert all_questions.questions[2].evidence == ()
    (with_adversarial,) = load_locomo(path, categories=(5,))
    assert [(q.qa_index, q.answer) for q in with_adversarial.questions] == [(2, "")]
    (only_temporal,) = load_locomo(path, categories={2})
    assert [q.qa_index for q in only_temporal.questions] == [1]


# --------------------------------------------------------------------------- the real file


@pytest.fixture(scope="module")
def locomo() -> list[Conversation]:
    return load_locomo(LOCOMO_DEV)


def _conversation(conversations: list[Conversation], sample_id: str) -> Conversation:
    return next(c for c in conversations if c.sample_id == sample_id)


@needs_locomo
def test_real_counts(locomo: list[Conversation]) -> None:
    assert [c.sample_id for c in locomo] == ["conv-26", "conv-30", "conv-41", "conv-42", "conv-43"]
    assert [c.user_id for c in locomo] == [f"locomo-{c.sample_id}" for c in locomo]
    # The file has 762 QA pairs of categories 1-4; two (conv-26, category 3) have no
    # evidence at all, which leaves the README's 760 queries.
    assert sum(len(c.questions) for c in locomo) == 760
    categories = Counter(q.category for c in locomo for q in c.questions)
    assert categories == {1: 142, 2: 156, 3: 44, 4: 418}
    assert set(categories) <= set(CATEGORY_NAMES)
    assert sum(len(c.turns) for c in locomo) == 2760
    assert sum(len(c.questions) for c in load_locomo(LOCOMO_DEV, require_evidence=False)) == 762


@needs_locomo
def test_real_evidence_exists(locomo: list[Conversation]) -> None:
    for conv in locomo:
        known = {t.dia_id for t in conv.turns}
        for question in conv.questions:
            assert question.evidence, (conv.sample_id, question.qa_index)
            assert set(question.evidence) <= known, (conv.sample_id, question.qa_index)
            assert len(set(question.evidence)) == len(question.evidence)


@needs_locomo
def test_real_malformed_evidence_is_repaired(locomo: list[Conversation]) -> None:
    def evidence(sample_id: str, qa_index: int) -> tuple[str, ...]:
        conv = _conversation(locomo, sample_id)
        return next(q.evidence for q in conv.questions if q.qa_index == qa_index)

    assert evidence("conv-26", 37) == ("D8:6", "D9:17")  # "D8:6; D9:17"
    assert "D11:26" in evidence("conv-43", 18)  # "D:11:26"
    assert evidence("conv-42", 88) == ("D1:18", "D1:20")  # stray "D"
    assert "D10:19" not in evidence("conv-42", 58)  # session 10 has fewer turns


@needs_locomo
def test_real_turns_are_ordered_and_aware(locomo: list[Conversation]) -> None:
    for conv in locomo:
        stamps = [t.created_at for t in conv.turns]
        assert all(s.utcoffset() == timedelta(0) for s in stamps)
        assert stamps == sorted(stamps), conv.sample_id
        assert len(set(stamps)) == len(stamps), conv.sample_id
        assert all(t.content == f"{t.speaker}: {t.text}" for t in conv.turns)
    conv_26 = _conversation(locomo, "conv-26")
    assert conv_26.turns[0].dia_id == "D1:1"
    assert conv_26.turns[0].created_at == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    assert max(t.session for t in conv_26.turns) == 19  # dates go to 35, turns to 19


@needs_locomo
def test_real_answers_are_strings(locomo: list[Conversation]) -> None:
    answers = [q.answer for c in locomo for q in c.questions]
    assert all(isinstance(a, str) and a for a in answers)
    conv_26 = _conversation(locomo, "conv-26")
    assert "2022" in {q.answer for q in conv_26.questions}  # stored as an int in the file
