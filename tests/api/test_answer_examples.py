"""The relevance issue's own examples through the agent tool, on issue 45's models (real
Postgres and Redis; the trained MiniLM, the service's default embedder, with the default preset
and with the opt-in preset `answers`): memories as agents write them answer the user's
questions in the first person, and a question nothing answers gets nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
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


async def test_the_users_own_name_is_the_user(client: httpx.AsyncClient, user_id: str) -> None:
    """docs/agents.md's example: "Alice is vegetarian" answers "what is my diet?"."""
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
