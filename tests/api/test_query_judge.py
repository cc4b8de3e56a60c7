"""The optional LLM judge of query_memory (PGRECALL_JUDGE=llm), for real: the app on the test
Postgres and Redis, the judge's model a scripted OpenAI-compatible server on 127.0.0.1
(tests/proxy/upstream_server.py). Deadlines are under a second, so a hung judge shows as a slow
test.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from redis.asyncio import Redis

from app.adapters.judge import SYSTEM_PROMPT
from tests.helpers import headers
from tests.proxy.upstream_server import Answer, Upstream
from tests.redis_server import RedisServer
from tests.servers import temporary_redis

SAVE = "/v1/tools/save_memory"
QUERY = "/v1/tools/query_memory"
DEADLINE_S = 0.4

MEMORIES = (
    "Alice is vegetarian and never eats meat",
    "Alice's dog is named Biscuit",
    "Alice lives in Lisbon with her partner Joana",
)
# Names a stored person and a stored pet; nothing stored answers it.
NO_ANSWER = "What is the favourite toy of Alice's dog?"
ANSWERED = "What does Alice eat?"


def judge_says(word: str) -> Answer:
    """A judge that accepts exactly the memories containing `word`."""

    def reply(body: dict[str, Any]) -> str:
        memories = json.loads(body["messages"][1]["content"])["memories"]
        return json.dumps({"answers": [word in m["text"] for m in memories]})

    return Answer(reply=reply)


def judged(upstream: Upstream, n: int = -1) -> dict[str, Any]:
    """The question and memories the judge was shown in its `n`th call."""
    return json.loads(upstream.seen[n].body["messages"][1]["content"])  # type: ignore[no-any-return]


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with Upstream() as server:
        yield server


@pytest.fixture
def judge_app(make_client: Callable[..., Any], upstream: Upstream) -> Callable[..., Any]:
    """`async with judge_app(**overrides) as (client, app):` the judge on the scripted model."""

    @asynccontextmanager
    async def factory(**overrides: Any) -> AsyncIterator[tuple[httpx.AsyncClient, FastAPI]]:
        settings = {
            "judge": "llm",
            "judge_base_url": upstream.base,
            "judge_model": "judge-test",
            "judge_timeout_s": DEADLINE_S,
            **overrides,
        }
        async with make_client(**settings) as (client, app):
            yield client, app

    return factory


async def save_all(client: httpx.AsyncClient, user: str) -> dict[str, str]:
    ids = {}
    for content in MEMORIES:
        response = await client.post(
            SAVE, json={"content": content, "type": "fact"}, headers=headers(user)
        )
        assert response.status_code == 200, response.text
        ids[content] = response.json()["memory"]["id"]
    return ids


async def ask(client: httpx.AsyncClient, user: str, query: str, **args: Any) -> dict[str, Any]:
    response = await client.post(QUERY, json={"query": query, **args}, headers=headers(user))
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def contents(answer: dict[str, Any]) -> list[str]:
    return [m["content"] for m in answer["memories"]]


async def test_judge_off_makes_no_call(
    make_client: Callable[..., Any], upstream: Upstream, user_id: str
) -> None:
    # An LLM is configured (the extractor's and the proxy's), the judge is not asked for.
    async with make_client(extraction_base_url=upstream.base, chat_upstream_url=upstream.base) as (
        client,
        _,
    ):
        await save_all(client, user_id)
        answer = await ask(client, user_id, NO_ANSWER)
    assert upstream.seen == []
    assert answer["metadata"]["judge"] is None


async def test_judge_right_empties_a_no_answer_question(
    judge_app: Callable[..., Any], upstream: Upstream, user_id: str
) -> None:
    upstream.answers.extend([judge_says("no memory has this word"), judge_says("vegetarian")])
    async with judge_app() as (client, _):
        await save_all(client, user_id)
        unanswered = await ask(client, user_id, NO_ANSWER)
        answered = await ask(client, user_id, ANSWERED)

    assert unanswered["memories"] == []
    meta = unanswered["metadata"]
    assert meta["supported"] is False and meta["judge"] == "llm"
    assert meta["confidence"] < 0.3  # every candidate went under the floor
    assert answered["metadata"]["judge"] == "llm" and answered["metadata"]["supported"] is True
    assert contents(answered)[0] == MEMORIES[0]
    assert "Alice's dog is named Biscuit" not in contents(answered)
    assert answered["memories"][0]["relevance"] >= 0.3
    # One batched call per question: the question and the first candidates' texts, JSON mode.
    assert len(upstream.seen) == 2
    body = upstream.seen[1].body
    assert body["model"] == "judge-test" and body["response_format"] == {"type": "json_object"}
    assert body["messages"][0]["content"] == SYSTEM_PROMPT
    shown = judged(upstream)
    assert shown["question"] == ANSWERED
    assert MEMORIES[0] in [m["text"] for m in shown["memories"]]
    assert 1 <= len(shown["memories"]) <= 5


async def test_second_identical_question_is_not_judged_again(
    judge_app: Callable[..., Any], upstream: Upstream, user_id: str, redis_srv: RedisServer
) -> None:
    upstream.answers.extend([judge_says("vegetarian"), judge_says("vegetarian")])
    async with judge_app() as (client, _):
        await save_all(client, user_id)
        first = await ask(client, user_id, ANSWERED)
        assert len(upstream.seen) == 1
        first_shown = len(judged(upstream)["memories"])
        # Memories only: not the cached answer, the same (question, memory) pairs. The name
        # keeps its capital: capitalisation is how a question names someone (app/retrieval/
        # names.py), and a lowercase "alice" would rank other candidates (a match on a name
        # alone needs more cosine, `name_cosine_margin`), which the judge has not seen.
        again = await ask(client, user_id, "what does Alice  eat?", sources=["memory"])
        assert len(upstream.seen) == 1
        assert again["metadata"]["judge"] == "llm"
        assert contents(again)[0] == contents(first)[0] == MEMORIES[0]
        # A new memory: only that pair goes to the model.
        await client.post(
            SAVE,
            json={"content": "Alice eats tofu for lunch", "type": "fact"},
            headers=headers(user_id),
        )
        await ask(client, user_id, ANSWERED)
    assert len(upstream.seen) == 2
    assert [m["text"] for m in judged(upstream)["memories"]] == ["Alice eats tofu for lunch"]
    redis = Redis.from_url(redis_srv.url)
    try:
        keys = [k async for k in redis.scan_iter(match=f"judge:{user_id}:*")]
        assert len(keys) == first_shown + 1
        assert 0 < await redis.ttl(keys[0]) <= 86_400
    finally:
        await redis.aclose()


async def test_judge_timing_out_falls_back_within_its_deadline(
    judge_app: Callable[..., Any],
    make_client: Callable[..., Any],
    upstream: Upstream,
    user_id: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with make_client() as (client, _):
        await save_all(client, user_id)
        local = await ask(client, user_id, NO_ANSWER)
    # Headers at once, then a byte every 50 ms: each read is in time, the whole call is not.
    upstream.answers.append(Answer(text=json.dumps({"answers": [False] * 5}), drip_s=0.05))
    async with judge_app() as (client, _):
        caplog.set_level(logging.WARNING, logger="app.services.query")
        t0 = time.monotonic()
        answer = await ask(client, user_id, NO_ANSWER)
        done = time.monotonic()
        # Resting after the failure: the next question falls back at once, with no call.
        second = await ask(client, user_id, ANSWERED)
    assert len(upstream.seen) == 1  # the second question made no call
    # The judge's wait, from the call's arrival at the model to the answer: the deadline, not
    # the 100-odd bytes x 50 ms the drip would take. The local ranking before the call is not
    # in it (under a loaded suite it alone can take most of a second).
    waited = done - upstream.seen[0].at
    assert done - t0 >= DEADLINE_S
    assert DEADLINE_S - 0.1 <= waited < DEADLINE_S + 0.5, waited
    assert answer["metadata"]["judge"] == "fallback"
    assert second["metadata"]["judge"] == "fallback"
    assert answer["memories"] == local["memories"]  # the local answer, as it was
    assert answer["metadata"]["supported"] is local["metadata"]["supported"]
    warnings = [r for r in caplog.records if "LLM judge failed" in r.getMessage()]
    assert len(warnings) == 1 and "timed out" in warnings[0].getMessage()


async def test_judge_sleeping_before_headers_falls_back(
    judge_app: Callable[..., Any], upstream: Upstream, user_id: str
) -> None:
    upstream.answers.append(Answer(text=json.dumps({"answers": [True]}), delay_s=2.0))
    async with judge_app() as (client, _):
        await save_all(client, user_id)
        answer = await ask(client, user_id, ANSWERED)
        waited = time.monotonic() - upstream.seen[0].at  # from the call's arrival at the model
    assert waited < DEADLINE_S + 0.5, waited
    assert answer["metadata"]["judge"] == "fallback"
    assert MEMORIES[0] in contents(answer)


@pytest.mark.parametrize(
    "bad",
    [
        Answer(text="the first one answers"),  # not JSON
        Answer(text=json.dumps({"answers": "yes"})),  # not a list
        Answer(text=json.dumps({"answers": [1, 0, 0]})),  # not booleans
        Answer(text=json.dumps({"answers": [True] * 40})),  # not one per memory
        Answer(text=json.dumps([True, False])),  # not an object
        Answer(raw=b"\xff not a completion"),
        Answer(status=500, error={"error": {"message": "boom"}}),
        Answer(status=401, error={"error": {"message": "bad key"}}),
        Answer(hang_up=True),
    ],
    ids=[
        "not-json",
        "not-a-list",
        "not-booleans",
        "wrong-count",
        "not-an-object",
        "garbage-body",
        "http-500",
        "http-401",
        "hang-up",
    ],
)
async def test_failing_judge_falls_back_to_the_local_answer(
    bad: Answer,
    judge_app: Callable[..., Any],
    upstream: Upstream,
    user_id: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    upstream.answers.append(bad)
    async with judge_app() as (client, app):
        app.state.resources.judge.rest_s = 0.0  # ask again at once (resting: its own test)
        await save_all(client, user_id)
        caplog.set_level(logging.WARNING, logger="app.services.query")
        answer = await ask(client, user_id, ANSWERED)
        assert len(upstream.seen) == 1  # never retried inside the query
        assert answer["metadata"]["judge"] == "fallback"
        assert contents(answer)[0] == MEMORIES[0]
        # A fallback answer is not kept in the result cache: the same query asks again.
        upstream.answers.append(judge_says("vegetarian"))
        again = await ask(client, user_id, ANSWERED)
    assert len(upstream.seen) == 2
    assert again["metadata"]["judge"] == "llm"
    warnings = [r for r in caplog.records if "LLM judge failed" in r.getMessage()]
    assert len(warnings) == 1


async def test_redis_down_falls_back_without_a_call(
    judge_app: Callable[..., Any], upstream: Upstream, user_id: str
) -> None:
    with temporary_redis() as own:
        async with judge_app(redis_url=own.url) as (client, _):
            await save_all(client, user_id)
            own.kill()
            answer = await ask(client, user_id, ANSWERED)
    assert upstream.seen == []
    assert answer["metadata"]["judge"] == "fallback"
    assert contents(answer)[0] == MEMORIES[0]
