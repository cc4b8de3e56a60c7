"""The passage splitter (pure): which messages get sentence passages, and their texts."""

from __future__ import annotations

import pytest

from app.retrieval.passages import MAX_PASSAGE_CHARS, MAX_PASSAGES, MIN_TURN_WORDS, passages

LONG = (
    "We finally moved to Lisbon in May after months of paperwork. "
    "The kids love their new school and already speak some Portuguese."
)


@pytest.mark.parametrize(
    ("content", "speaker", "expected"),
    [
        # under MIN_TURN_WORDS words: one thought, no passages
        ("We moved in May. The kids love it.", None, []),
        # one sentence, however long
        (
            "We finally moved to Lisbon in May after months and months of paperwork and "
            "a long search for a flat near the river",
            None,
            [],
        ),
        # two sentences of 3+ words in a long enough turn
        (
            LONG,
            None,
            [
                "We finally moved to Lisbon in May after months of paperwork.",
                "The kids love their new school and already speak some Portuguese.",
            ],
        ),
        # the speaker prefixes each passage; a leading "<speaker>:" is not repeated
        (
            "Ana: " + LONG,
            "Ana",
            [
                "Ana: We finally moved to Lisbon in May after months of paperwork.",
                "Ana: The kids love their new school and already speak some Portuguese.",
            ],
        ),
        # a speaker value that is not a name is ignored
        (
            LONG,
            "  ",
            [
                "We finally moved to Lisbon in May after months of paperwork.",
                "The kids love their new school and already speak some Portuguese.",
            ],
        ),
        # sentences under 3 words are dropped; one left is not enough
        (
            "Wow! " + "We finally moved to Lisbon in May after months and months of paperwork "
            "and waiting. Great!",
            None,
            [],
        ),
        # ! and ? end sentences too; white space is normalised
        (
            "Did you hear that we finally moved to Lisbon in May?\n\n  Yes, and the kids "
            "love the school there already!",
            None,
            [
                "Did you hear that we finally moved to Lisbon in May?",
                "Yes, and the kids love the school there already!",
            ],
        ),
    ],
)
def test_passages(content: str, speaker: object, expected: list[str]) -> None:
    assert passages(content, speaker) == expected


def test_long_messages_are_capped() -> None:
    sentence = "This sentence has exactly seven words here. "
    many = passages(sentence * (MAX_PASSAGES + 10))
    assert len(many) == MAX_PASSAGES
    huge = passages(("word " * 400).strip() + ". " + LONG)
    assert len(huge) == 3 and len(huge[0]) == MAX_PASSAGE_CHARS
    assert len(LONG.split()) >= MIN_TURN_WORDS
