"""Stages that read the question and the dialogue, on the real database: a "when" question
prefers the turn that tells a time; the turn that answers a matching question is relevant
enough for the agent tool."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx

from app.repositories.retrieval import Candidate
from app.repositories.search_index import Source
from app.retrieval.rerank import answer_pairs
from tests.helpers import headers, new_conversation, ranked_contents


async def post_turns(client: httpx.AsyncClient, user: str, turns: list[tuple[str, str]]) -> None:
    cid = await new_conversation(client, user)
    response = await client.post(
        f"/v1/conversations/{cid}/messages:bulk",
        json={"messages": [{"role": role, "content": text} for role, text in turns]},
        headers=headers(user),
    )
    assert response.status_code == 201, response.text


CAMPING = [
    ("user", "Camping with the kids is the best, we love camping by the lake"),
    ("assistant", "That sounds lovely."),
    ("user", "We went camping in the forest yesterday"),
    ("assistant", "Hope the weather held."),
    ("user", "My sister collects stamps from Iceland"),
]


async def test_a_when_question_prefers_the_turn_that_tells_a_time(
    make_client: Callable[..., Any], user_id: str
) -> None:
    # Today's (`convex`) fusion, with and without the stage: there a stronger keyword match
    # beats the turn that tells the time (the learned preset ranks it first either way).
    told = CAMPING[2][1]
    async with make_client(retrieval_preset="convex") as (client, app):
        resources = app.state.resources
        staged = resources.query_config
        resources.query_config = dataclasses.replace(
            staged, preset=staged.preset.with_(name="convex, no when", when_boost=0.0)
        )
        await post_turns(client, user_id, CAMPING)
        plain = await ranked_contents(client, user_id, "When did we go camping?")
        other = await ranked_contents(client, user_id, "Where did we go camping?")
        resources.query_config = staged
        when = await ranked_contents(client, user_id, "When did we go camping?")
        where = await ranked_contents(client, user_id, "Where did we go camping?")
    assert plain.index(told) > 0  # the stronger keyword match wins without the stage
    assert when.index(told) == 0
    assert where == other  # a question that asks no time is ranked as before


LENS = [
    ("user", "Which lens should I buy for my Fuji camera?"),
    (
        "assistant",
        "The XF 35mm f/2 is an affordable first prime: small, quiet, quick to focus, sharp wide "
        "open, weather resistant, and a natural field of view for street and travel pictures.",
    ),
    ("user", "Thanks. Also, what is a good way to clean a terrarium?"),
    ("assistant", "Scrub it with a reptile-safe disinfectant and rinse it well."),
]


async def test_the_answer_to_a_matching_question_reaches_the_agent(
    make_client: Callable[..., Any], user_id: str
) -> None:
    """A strict relative cut (0.95) leaves only the question; with answers inheriting their
    question's relevance, its answer is returned too, and nothing else is."""

    async def tool(client: httpx.AsyncClient, app: Any, share: float) -> list[str]:
        resources = app.state.resources
        preset = resources.query_config.preset.with_(
            name=f"answers {share}", relative_cutoff=0.95, answer_relevance=share
        )
        resources.query_config = dataclasses.replace(resources.query_config, preset=preset)
        response = await client.post(
            "/v1/tools/query_memory",
            json={"query": "Which lens for my Fuji camera?"},
            headers=headers(user_id),
        )
        assert response.status_code == 200, response.text
        return [m["content"] for m in response.json()["memories"]]

    # Today's (`convex`) fusion: the learned one reads relevance from the final odds, where the
    # answer outranks its question (answer_weight 2) instead of inheriting its relevance.
    async with make_client(retrieval_preset="convex") as (client, app):
        await post_turns(client, user_id, LENS)
        without = await tool(client, app, 0.0)
        with_answers = await tool(client, app, 1.0)
    assert without == [LENS[0][1]]
    assert with_answers == [LENS[0][1], LENS[1][1]]


def candidate(content: str, role: str) -> Candidate:
    return Candidate(
        Source.MESSAGE, uuid.uuid4(), content, None, None, datetime.now(UTC), None, None, role
    )


def test_an_answer_is_the_other_speakers_next_turn_after_a_question() -> None:
    turns = {
        "q": candidate("Which lens should I buy? ", "user"),
        "a": candidate("The XF 35mm.", "assistant"),
        "s": candidate("Is it sealed?", "user"),
        "t": candidate("I keep it dry anyway.", "user"),
        "n": candidate("I bought the lens.", "user"),
        "r": candidate("Nice.", "assistant"),
    }
    neighbours = {"q": (None, "a"), "s": (None, "t"), "n": (None, "r"), "a": ("q", None)}
    # "s" is followed by its own speaker, "n" asks nothing, "a" has no next turn.
    assert answer_pairs(neighbours, turns) == {"q": "a"}


ACKNOWLEDGED = [
    ("user", "Our plumber is coming on Thursday to fix the boiler"),
    ("assistant", "Noted."),
    ("user", "How long have you been keeping bees?"),
    ("assistant", "Since March."),
    ("user", "My daughter's dance recital is on the 14th"),
    ("assistant", "How lovely, congratulations!"),
]


async def test_an_acknowledgement_inherits_nothing_from_the_fact_before_it(
    make_client: Callable[..., Any], user_id: str
) -> None:
    """The turn after a matching turn inherits part of its score, unless it only acknowledges
    it (app/retrieval/phatic.py): the agent gets the fact, not "Noted." beside it. A short
    answer that places something in time still inherits."""

    async def tool(client: httpx.AsyncClient, question: str) -> list[str]:
        response = await client.post(
            "/v1/tools/query_memory", json={"query": question}, headers=headers(user_id)
        )
        assert response.status_code == 200, response.text
        return [m["content"] for m in response.json()["memories"]]

    async with make_client() as (client, _):
        await post_turns(client, user_id, ACKNOWLEDGED)
        plumber = await tool(client, "When is the plumber coming?")
        recital = await tool(client, "when is my daughter's dance recital")
        bees = await ranked_contents(client, user_id, "How long have I been keeping bees?")
    assert plumber[0] == ACKNOWLEDGED[0][1] and "Noted." not in plumber
    assert recital[0] == ACKNOWLEDGED[4][1] and "How lovely, congratulations!" not in recital
    assert "Since March." in bees[:2]  # the answer keeps inheriting
