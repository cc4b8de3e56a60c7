"""Which participants a question names (pure)."""

from __future__ import annotations

import uuid

import pytest

from app.retrieval.scoring import Ranked
from app.retrieval.speakers import named_speakers, prefer_named, usable_speaker
from app.services.conversation import turn_document

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


def _r(key: str, fused: float, relevance: float) -> Ranked[str]:
    return Ranked(key, fused, relevance, relevance, 0.0)


def test_prefer_named_lifts_the_named_speakers_turns() -> None:
    ranked = [_r("john", 1.0, 0.9), _r("tim-violin", 0.6, 0.4), _r("tim-stamps", 0.0, 0.0)]
    speakers = {"john": "John", "tim-violin": "Tim", "tim-stamps": "Tim"}
    out = prefer_named(ranked, speakers, "What does Tim play?", 1.0)
    assert [r.key for r in out] == ["tim-violin", "john", "tim-stamps"]
    lifted = {r.key: r for r in out}
    assert lifted["tim-violin"].fused == 1.2 and lifted["tim-violin"].relevance == 0.8
    assert lifted["tim-stamps"].relevance == 0.0  # matched nothing: still nothing
    assert lifted["john"] == ranked[0]  # the other speaker's turn is untouched


def test_prefer_named_caps_relevance_and_is_off_without_a_name_or_factor() -> None:
    ranked = [_r("a", 1.0, 0.7), _r("b", 0.5, 0.5)]
    speakers = {"a": "Tim", "b": "John"}
    assert prefer_named(ranked, speakers, "Tim?", 1.0)[0].relevance == 1.0
    assert prefer_named(ranked, speakers, "What did he say?", 1.0) == ranked
    assert prefer_named(ranked, speakers, "Tim?", 0.0) == ranked
    assert prefer_named(ranked, {}, "Tim?", 1.0) == ranked


@pytest.mark.parametrize(
    ("content", "metadata", "indexed"),
    [
        ("I play the violin.", {"speaker": "Tim"}, "Tim: I play the violin."),
        ("Tim: I play the violin.", {"speaker": "Tim"}, "Tim: I play the violin."),  # has it
        ("I play the violin.", {"speaker": ["Tim"]}, "I play the violin."),  # not a name
        ("I play the violin.", {}, "I play the violin."),
        ("I play the violin.", None, "I play the violin."),
    ],
)
def test_a_turns_keyword_document_holds_its_speakers_name(
    content: str, metadata: dict[str, object] | None, indexed: str
) -> None:
    document = turn_document(uuid.uuid4(), content, "before", None, metadata)
    assert document.text == indexed
    assert (document.previous, document.following) == ("before", "")
