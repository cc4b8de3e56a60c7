"""The question inside a request (app/retrieval/frames.py): pure."""

from __future__ import annotations

import pytest

from app.retrieval.frames import core_question


@pytest.mark.parametrize(
    ("asked", "core"),
    [
        ("What do you remember about my diet?", "my diet?"),
        ("Remind me what my dog is called?", "what my dog is called?"),
        ("Do you know where I parked?", "where I parked?"),
        ("Can you please tell me about Tom's job?", "Tom's job?"),
        ("hey, do you recall when the boiler was serviced?", "when the boiler was serviced?"),
        ("I forgot: which bank is my mortgage with?", "which bank is my mortgage with?"),
    ],
)
def test_a_frame_addressed_to_the_assistant_is_removed(asked: str, core: str) -> None:
    assert core_question(asked) == core


@pytest.mark.parametrize(
    "asked",
    [
        "What is my diet?",
        "Tell me",
        "Where do you know Tom from?",
        "What did my sister tell me about the wedding?",
        "Do you remember?",
    ],
)
def test_a_question_without_a_leading_frame_is_left_as_it_is(asked: str) -> None:
    assert core_question(asked) == asked
