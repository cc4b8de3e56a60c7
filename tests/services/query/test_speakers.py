"""A question that names a participant prefers that participant's own turns (real database)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from tests.helpers import headers, new_conversation, ranked_contents

# John talks about instruments; Tim, the one asked about, tells what he plays.
TURNS = [
    ("assistant", "John", "Do you play an instrument? I love every instrument, I play two."),
    ("user", "Tim", "I took up the violin last spring and practise it every evening."),
    ("assistant", "John", "Playing an instrument every day is great, I play mine daily."),
    ("user", "Tim", "My sister collects stamps from Iceland."),
]
TIM = TURNS[1][2]


async def post(client: httpx.AsyncClient, user: str, speakers: bool) -> None:
    cid = await new_conversation(client, user)
    messages = [
        {"role": role, "content": text, "metadata": {"speaker": name} if speakers else {}}
        for role, name, text in TURNS
    ]
    response = await client.post(
        f"/v1/conversations/{cid}/messages:bulk", json={"messages": messages}, headers=headers(user)
    )
    assert response.status_code == 201, response.text


async def test_a_named_participants_turn_rises(
    make_client: Callable[..., Any], user_id: str
) -> None:
    """The same chat stored with and without speakers: only with them does the question about
    Tim put Tim's turn first (his name is in his turns' keyword documents and the ranking
    prefers them); a question that names nobody does not."""
    question = "What instrument does Tim play?"
    anonymous = f"{user_id}-anonymous"
    async with make_client() as (client, _):
        await post(client, user_id, speakers=True)
        await post(client, anonymous, speakers=False)
        named = await ranked_contents(client, user_id, question)
        plain = await ranked_contents(client, anonymous, question)
        unnamed = await ranked_contents(client, user_id, "What instrument does he play?")
    assert plain.index(TIM) > 0  # John's instrument talk wins on words alone
    assert named.index(TIM) == 0
    assert unnamed.index(TIM) > 0  # a question naming nobody prefers nobody


async def test_turns_without_speakers_are_not_moved(
    make_client: Callable[..., Any], user_id: str
) -> None:
    question = "What instrument does Tim play?"
    async with make_client(retrieval_preset="baseline") as (client, _):
        await post(client, user_id, speakers=False)
        plain = await ranked_contents(client, user_id, question)
    async with make_client() as (client, _):
        default = await ranked_contents(client, user_id, question)
    assert default == plain


async def test_a_speaker_that_is_not_a_string_is_ignored(
    make_client: Callable[..., Any], user_id: str
) -> None:
    cid_messages = [
        {"role": "user", "content": "Hello there", "metadata": {"speaker": ["Tim"]}},
        {"role": "user", "content": "Tim says hello", "metadata": {"speaker": {"n": 1}}},
    ]
    async with make_client() as (client, _):
        cid = await new_conversation(client, user_id)
        response = await client.post(
            f"/v1/conversations/{cid}/messages:bulk",
            json={"messages": cid_messages},
            headers=headers(user_id),
        )
        assert response.status_code == 201, response.text
        assert await ranked_contents(client, user_id, "Did Tim say hello?")  # answered, no 500
