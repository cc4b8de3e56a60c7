"""Which participants a question names (pure)."""

from __future__ import annotations

import pytest

from app.retrieval.speakers import named_speakers, usable_speaker

SPEAKERS = ["Tim", "John", "Anne-Marie", "Dr. Ng"]


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("What books has Tim read?", {"Tim"}),
        ("what books has tim read?", {"Tim"}),  # case does not matter
        ("Which of Tim's cities did John visit?", {"Tim", "John"}),  # possessive, two names
        ("What did Anne-Marie paint?", {"Anne-Marie"}),
        ("When did Dr. Ng call?", {"Dr. Ng"}),
        ("Is it time to go?", set()),  # "time" is not "Tim"
        ("Did Timothy call?", set()),  # a longer name is another name
        ("What did Johnny say?", set()),
        ("Where is Anne?", set()),
        ("", set()),
    ],
)
def test_named_speakers(question: str, expected: set[str]) -> None:
    assert named_speakers(question, SPEAKERS) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("Tim", "Tim"),
        ("  Anne   Marie ", "Anne Marie"),  # whitespace normalised
        ("T", None),  # too short to be told apart from a word
        ("x" * 65, None),  # oversized
        ("42", None),  # no letter
        ("", None),
        (None, None),
        (7, None),
        (["Tim"], None),
        ("Zoë", "Zoë"),
    ],
)
def test_usable_speaker(value: object, expected: str | None) -> None:
    assert usable_speaker(value) == expected
