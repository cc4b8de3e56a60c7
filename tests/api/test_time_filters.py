"""Time as data on the real database: time_from / time_to / as_of on both query endpoints,
the soft time preference of a question that names a time, dates in the tool's output."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.db import user_session
from app.services.memory import MemoryInput, MemoryService
from tests.helpers import headers, new_conversation

QUERY = "/v1/memory/query"
TOOL = "/v1/tools/query_memory"

# One trip a year, told about in messages of the time; one memory stored in 2023.
TRIPS = [
    ("I went hiking in the Alps with my sister", datetime(2021, 6, 10, 12, tzinfo=UTC)),
    ("I went hiking in the Dolomites with my sister", datetime(2022, 6, 12, 12, tzinfo=UTC)),
    ("I went hiking in the Pyrenees with my sister", datetime(2023, 6, 14, 12, tzinfo=UTC)),
]
MEMORY = ("My sister loves hiking in the mountains", datetime(2023, 1, 5, 9, tzinfo=UTC))


async def seed(client: httpx.AsyncClient, app: FastAPI, user: str) -> None:
    cid = await new_conversation(client, user)
    response = await client.post(
        f"/v1/conversations/{cid}/messages:bulk",
        json={
            "messages": [
                {"role": "user", "content": text, "created_at": when.isoformat()}
                for text, when in TRIPS
            ]
        },
        headers=headers(user),
    )
    assert response.status_code == 201, response.text
    res = app.state.resources
    async with user_session(res.sessionmaker, user) as session, session.begin():
        await MemoryService(session, res.embeddings).create_many(
            [MemoryInput(user_id=user, content=MEMORY[0], type="fact", created_at=MEMORY[1])]
        )


async def ask(client: httpx.AsyncClient, user: str, endpoint: str, **body: Any) -> list[str]:
    if endpoint == QUERY:
        body.setdefault("min_score", 0.0)
    response = await client.post(
        endpoint, json={"query": "hiking with my sister", **body}, headers=headers(user)
    )
    assert response.status_code == 200, response.text
    data = response.json()
    items = data.get("items", data.get("memories"))
    return [i["content"] for i in items]


@pytest.mark.parametrize("endpoint", [QUERY, TOOL])
async def test_time_from_and_time_to_filter_on_event_time(
    make_client: Callable[..., Any], user_id: str, endpoint: str
) -> None:
    async with make_client() as (client, app):
        await seed(client, app, user_id)
        everything = await ask(client, user_id, endpoint)
        assert len(everything) == 4
        in_2022 = await ask(
            client,
            user_id,
            endpoint,
            time_from="2022-01-01T00:00:00Z",
            time_to="2022-12-31T23:59:59Z",
        )
        assert in_2022 == [TRIPS[1][0]]
        since_2023 = await ask(client, user_id, endpoint, time_from="2023-01-01T00:00:00Z")
        assert set(since_2023) == {TRIPS[2][0], MEMORY[0]}
        until_2021 = await ask(client, user_id, endpoint, time_to="2021-12-31T23:59:59+00:00")
        assert until_2021 == [TRIPS[0][0]]
        inverted = await ask(
            client,
            user_id,
            endpoint,
            time_from="2023-02-01T00:00:00Z",
            time_to="2023-01-01T00:00:00Z",
        )
        assert inverted == []  # an end before the start is an empty window, not an error
        # Inclusive bounds: the exact created_at is in.
        exact = TRIPS[1][1].isoformat()
        assert await ask(client, user_id, endpoint, time_from=exact, time_to=exact) == [TRIPS[1][0]]


@pytest.mark.parametrize("endpoint", [QUERY, TOOL])
async def test_as_of_leaves_out_what_was_created_later(
    make_client: Callable[..., Any], user_id: str, endpoint: str
) -> None:
    async with make_client() as (client, app):
        await seed(client, app, user_id)
        known = await ask(client, user_id, endpoint, as_of="2022-12-31T00:00:00Z")
        assert set(known) == {TRIPS[0][0], TRIPS[1][0]}
        # A zone-less time is UTC; the memory of 2023-01-05 09:00 is known from then on.
        assert MEMORY[0] not in await ask(client, user_id, endpoint, as_of="2023-01-05T08:59:59Z")
        assert MEMORY[0] in await ask(client, user_id, endpoint, as_of="2023-01-05T09:00:00Z")


async def test_a_question_naming_a_time_prefers_that_time(
    make_client: Callable[..., Any], user_id: str
) -> None:
    """The trip of the year the question names ranks at least as high as without the
    preference (preset `untimed`), and strictly higher for some year."""

    async def positions(client: httpx.AsyncClient) -> list[int]:
        found = []
        for year, (text, _) in zip((2021, 2022, 2023), TRIPS, strict=True):
            response = await client.post(
                QUERY,
                json={
                    "query": f"Where did I go hiking with my sister in June {year}?",
                    "min_score": 0.0,
                },
                headers=headers(user_id),
            )
            assert response.status_code == 200
            found.append([i["content"] for i in response.json()["items"]].index(text))
        return found

    async with make_client(retrieval_preset="untimed") as (client, app):
        await seed(client, app, user_id)
        without = await positions(client)
    async with make_client() as (client, _):
        with_preference = await positions(client)
    assert all(a <= b for a, b in zip(with_preference, without, strict=True))
    assert with_preference != without
    assert with_preference.count(0) >= 2


async def test_tool_output_shows_each_result_date(
    make_client: Callable[..., Any], user_id: str
) -> None:
    async with make_client() as (client, app):
        await seed(client, app, user_id)
        response = await client.post(
            TOOL, json={"query": "hiking in the Dolomites"}, headers=headers(user_id)
        )
        body = response.json()
        assert body["memories"][0]["content"] == TRIPS[1][0]
        assert "2022-06-12" in body["memories"][0]["context"]
        assert 'date="2022-06-12"' in body["formatted"]


async def test_tool_definition_offers_the_time_filters(
    client: httpx.AsyncClient, user_id: str
) -> None:
    response = await client.get("/v1/tools", headers=headers(user_id))
    properties = response.json()["tools"][0]["function"]["parameters"]["properties"]
    for name in ("time_from", "time_to", "as_of"):
        assert properties[name]["type"] == "string"
        assert properties[name]["format"] == "date-time"


@pytest.mark.parametrize("endpoint", [QUERY, TOOL])
@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"time_from": "not a date"}, "time_from"),
        ({"time_to": "2023-13-40"}, "time_to"),
        ({"as_of": 12.5e20}, "as_of"),
        ({"time_from": "2023-02-01"}, "time_from"),  # a time zone is required, as everywhere
        ({"time_from": "0001-01-01T00:00:00+14:00"}, "time_from"),
        ({"as_of": "9999-12-31T23:59:59-12:00"}, "as_of"),
    ],
)
async def test_bad_times_are_422_naming_the_field(
    client: httpx.AsyncClient, user_id: str, endpoint: str, body: dict[str, Any], field: str
) -> None:
    response = await client.post(
        endpoint, json={"query": "hiking", **body}, headers=headers(user_id)
    )
    assert response.status_code == 422, response.text
    assert field in response.text


@pytest.mark.parametrize("endpoint", [QUERY, TOOL])
@pytest.mark.parametrize("as_of", ["0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z"])
async def test_extreme_as_of_with_relative_dates_is_not_an_error(
    client: httpx.AsyncClient, user_id: str, endpoint: str, as_of: str
) -> None:
    response = await client.post(
        endpoint,
        json={"query": "what did we do last year and this week", "as_of": as_of},
        headers=headers(user_id),
    )
    assert response.status_code == 200, response.text
