"""The relevance issue's own examples through the agent tool, on issue 45's models (real
Postgres and Redis; the trained MiniLM, the service's default embedder, with the default preset
and with the opt-in preset `answers`): memories as agents write them answer the user's
questions in the first person, and a question nothing answers gets nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import httpx
import pytest

from app.adapters.embedder import LocalEmbedder
from app.embedding_models import TRAINED_MODEL_ID
from tests.helpers import headers

SAVE = "/v1/tools/save_memory"
QUERY = "/v1/tools/query_memory"


@pytest.fixture(scope="module")
def trained() -> LocalEmbedder:
    return LocalEmbedder(model=TRAINED_MODEL_ID)


@pytest.fixture(params=["default", "answers"])
async def client(
    request: pytest.FixtureRequest, make_client: Callable[..., Any], trained: LocalEmbedder
) -> AsyncIterator[httpx.AsyncClient]:
    settings = {"embedding_model": TRAINED_MODEL_ID, "retrieval_preset": request.param}
    async with make_client(embedder=trained, **settings) as (c, _):
        yield c


async def save(client: httpx.AsyncClient, user: str, content: str, **extra: Any) -> None:
    body = {"content": content, "type": "fact", **extra}
    response = await client.post(SAVE, json=body, headers=headers(user))
    assert response.status_code in (200, 201), response.text


async def ask(client: httpx.AsyncClient, user: str, query: str) -> dict[str, Any]:
    response = await client.post(QUERY, json={"query": query}, headers=headers(user))
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


async def test_the_users_own_name_is_the_user(
    client: httpx.AsyncClient, user_id: str, request: pytest.FixtureRequest
) -> None:
    """docs/agents.md's example: "Alice is vegetarian" answers "what is my diet?"."""
    if request.node.callspec.params["client"] == "answers":
        # Known, and strict: fails the suite the day it passes (docs/retrieval.md, "A hundred
        # and forty-four people"): the opt-in preset's models refitted on the 144-people
        # embedder return nothing for "what is my diet?" in this four-memory store.
        request.applymarker(pytest.mark.xfail(strict=True, reason="answers: under its floor"))
    for content in (
        "Alice is vegetarian",
        "Alice's flat is on the top floor of a building in Leeds.",
        "Alice plays five-a-side football on Thursday evenings.",
        "Alice's brother Tom repairs bicycles.",
    ):
        await save(client, user_id, content)
    for question in ("What do you remember about my diet?", "what is my diet?"):
        body = await ask(client, user_id, question)
        assert [m["content"] for m in body["memories"]][:1] == ["Alice is vegetarian"], question
        assert body["metadata"]["supported"] is True, question


async def test_a_question_nothing_answers_is_not_answered(
    client: httpx.AsyncClient, user_id: str
) -> None:
    await save(client, user_id, "Alice is vegetarian")
    await save(client, user_id, "Alice's brother Tom repairs bicycles.")
    body = await ask(client, user_id, "What is Tom's phone number?")
    assert body["memories"] == [] and body["metadata"]["supported"] is False


GRANDMOTHER = (
    "Keiko's birthday is 22 April.",
    "Daisuke is our grandson; he started school in September.",
    "My pension is paid on the 15th of even-numbered months.",
    "I drink green tea every morning.",
    "Hiroshi had a stent put in in 2023.",
    "The car is a 2019 Toyota Prius.",
    "Keiko knits scarves for the church bazaar.",
    "The garden has three persimmon trees.",
    "The cardiologist is Dr Nakamura at Sakai City Hospital.",
    "Keiko is allergic to penicillin.",
    "We walk along the river after dinner.",
    "Our daughter Yumi lives in Osaka and teaches piano.",
    "The church bazaar is on the first Sunday of December.",
    "I take the bus to the library on Wednesdays.",
)


async def test_someone_elses_birthday_does_not_answer_a_question_about_a_person_it_knows(
    client: httpx.AsyncClient, user_id: str
) -> None:
    """A name trap (app/retrieval/subjects.py): the store knows Daisuke but not his birthday;
    Keiko's birthday, the nearest memory, is no answer. Asked about Keiko, it is."""
    for content in GRANDMOTHER:
        await save(client, user_id, content)
    body = await ask(client, user_id, "When is Daisuke's birthday?")
    assert "Keiko's birthday is 22 April." not in [m["content"] for m in body["memories"]]
    body = await ask(client, user_id, "When is Keiko's birthday?")
    assert [m["content"] for m in body["memories"]][:1] == ["Keiko's birthday is 22 April."]


BAKER = (
    "The bakery van goes in for its service at Hendry's garage on 12 May.",
    "Flour bill in October was £640, up from £590.",
    "Ewan opens the bakery at 5 am; the shop opens at 7.",
    "The sourdough starter is called Gertie and is eleven years old.",
    "Ewan's wife Morag does the books on Sunday evenings.",
    "The wholesale customers are two cafés and the hotel on the front.",
    "Rye loaves sell out by ten on Saturdays.",
    "The deck oven was bought second-hand from a bakery in Perth in 2016.",
    "Ewan is allergic to cats.",
    "The apprentice, Callum, started in August and works four days a week.",
    "Christmas orders close on 15 December.",
    "The bakery is on the harbour road in Anstruther.",
    "Ewan trained at a bakery school in Edinburgh.",
    "The mixer needs a new bowl guard before the inspection.",
    "Morag's mother lives with them since her fall.",
    "Ewan swims in the harbour on New Year's Day.",
    "The shop is closed on Mondays.",
    "The daughter, Isla, studies marine biology in St Andrews.",
    "Butter comes from the dairy in Cupar every Tuesday.",
    "The landlord is Mr Fraser; the lease runs to 2028.",
    "The food hygiene rating is 5.",
    "Ewan bakes the oatcakes himself; Callum does the rolls.",
    "The van is a white Ford Transit.",
    "The bank is the Clydesdale in St Andrews.",
)


async def answers(
    client: httpx.AsyncClient,
    user: str,
    unanswered: Sequence[str],
    answered: Sequence[tuple[str, str]],
) -> list[dict[str, Any]]:
    """Each question of `unanswered` gets nothing (`supported` false) and each of `answered`
    its memory first; the bodies of `answered`."""
    for question in unanswered:
        body = await ask(client, user, question)
        assert body["memories"] == [] and body["metadata"]["supported"] is False, question
    bodies = []
    for question, answer in answered:
        body = await ask(client, user, question)
        assert [m["content"] for m in body["memories"]][:1] == [answer], question
        bodies.append(body)
    return bodies


async def test_a_near_miss_on_the_subject_does_not_answer_what_it_lacks(
    client: httpx.AsyncClient, user_id: str
) -> None:
    """The question model's answer-type features (app/retrieval/answer_types.py; both presets'
    models read them): a memory on the very subject that lacks the value asked for (a price, a
    dose) is no answer; asked what it holds, it is. With the default's model fitted before them
    (its file swapped back in by hand) all three were answered."""
    for content in BAKER:
        await save(client, user_id, content)
    unanswered = (
        "How much did the deck oven cost?",
        "How much does the butter cost?",
        "What dose of antihistamine does Ewan take?",
    )
    answered = (
        ("When is the van being serviced?", BAKER[0]),
        ("Which days does Callum work?", BAKER[9]),
    )
    await answers(client, user_id, unanswered, answered)


async def test_a_new_users_store_of_eight_is_read_by_the_question_model(
    client: httpx.AsyncClient, user_id: str
) -> None:
    """A new user (eight memories, fewer than the twenty candidates the question model reads
    in a grown store): it reads them too (from five on: a best cosine's standing among them),
    so a question nothing answers gets nothing. Read from twenty items only (the threshold
    put back by hand), the store's nearest memory came back as an answer to all three."""
    for content in BAKER[:8]:
        await save(client, user_id, content)
    unanswered = (
        "Who does the bakery's accounts?",
        "What is the bakery's phone number?",
        "How old is Morag?",
    )
    answered = (
        ("Who are the wholesale customers?", BAKER[5]),
        ("What is the starter called?", BAKER[3]),
    )
    for body in await answers(client, user_id, unanswered, answered):
        assert body["metadata"]["confidence"] > 0.9
