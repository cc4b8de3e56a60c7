"""Extraction end to end: appends queue jobs, the worker asks the scripted model through the
`openai` client, and jobs end in the right state with nothing stored twice or in part."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.extraction.prompt import INSTRUCTIONS
from app.extraction.service import ExtractionProcessor
from app.repositories.extraction import ExtractionRepository
from tests.extraction.conftest import Env, alias_of, fact, facts
from tests.helpers import headers, new_conversation
from tests.proxy.upstream_server import Answer

SAID = datetime(2026, 10, 3, 9, 30, tzinfo=UTC)
USAGE = {"prompt_tokens": 300, "completion_tokens": 40, "total_tokens": 340}


async def _say(
    env: Env,
    user: str,
    turns: list[tuple[str, str]],
    *,
    at: datetime = SAID,
    cid: str | None = None,
) -> tuple[str, list[dict[str, Any]]]:
    """Append (role, text) turns in one bulk request, a minute apart from `at`."""
    cid = cid or await new_conversation(env.client, user)
    body = {
        "messages": [
            {"role": r, "content": c, "created_at": (at + timedelta(minutes=n)).isoformat()}
            for n, (r, c) in enumerate(turns)
        ]
    }
    response = await env.client.post(
        f"/v1/conversations/{cid}/messages:bulk", json=body, headers=headers(user)
    )
    assert response.status_code == 201, response.text
    return cid, response.json()["items"]


async def _remember(env: Env, user: str, content: str, at: datetime | None = None) -> None:
    item = {"user_id": user, "content": content, "type": "fact"}
    if at is not None:
        item["created_at"] = at.isoformat()
    response = await env.client.post("/v1/admin/memories:bulk", json={"items": [item]})
    assert response.status_code == 201, response.text


async def test_appends_queue_only_user_turns_and_only_with_extraction_on(
    make_client: Callable[..., Any], make_env: Callable[..., Any], user_id: str
) -> None:
    async with make_client() as (client, _):  # extraction off (the default)
        cid = await new_conversation(client, user_id)
        r = await client.post(
            f"/v1/conversations/{cid}/messages",
            json={"role": "user", "content": "I live in Porto"},
            headers=headers(user_id),
        )
        assert r.status_code == 201
    async with make_env() as env:
        assert await env.jobs(user_id) == []
        r = await env.client.post(
            f"/v1/conversations/{cid}/messages",
            json={"role": "user", "content": "I work as a nurse"},
            headers=headers(user_id),
        )
        single = r.json()["id"]
        _, bulk = await _say(
            env,
            user_id,
            [("system", "You are terse."), ("user", "I have two cats"), ("assistant", "Nice!")],
            cid=cid,
        )
        jobs = await env.jobs(user_id)
    assert [str(j.message_id) for j in jobs] == [single, bulk[1]["id"]]
    assert {j.state for j in jobs} == {"queued"} and {j.attempts for j in jobs} == {0}


async def test_add_stores_the_fact_observed_at_the_turns_date_once(
    make_env: Callable[..., Any], user_id: str
) -> None:
    async with make_env() as env:
        _, turns = await _say(
            env,
            user_id,
            [
                ("user", "I moved to Lisbon last month and I love it"),
                ("assistant", "Lisbon is lovely. Maybe you also like surfing?"),
                ("user", "I prefer oat milk in my coffee"),
            ],
        )
        env.script(
            Answer(
                text=facts(
                    fact("User lives in Lisbon.", "t1"),
                    fact("User prefers oat milk in coffee.", "t2", type="preference"),
                ),
                usage=USAGE,
            )
        )
        results = await env.drain()
        assert [(r.state, r.jobs) for r in results] == [("done", 2)]  # one batch, one call
        memories = await env.memories(user_id)
        jobs = await env.jobs(user_id)
        # Running the worker again finds nothing to do and stores nothing more.
        assert await env.drain() == []
        assert len(await env.memories(user_id)) == 2
    by_text = {m.content: m for m in memories}
    lisbon = by_text["User lives in Lisbon."]
    assert lisbon.source == "extraction" and lisbon.type == "fact"
    assert str(lisbon.source_message_id) == turns[0]["id"]
    assert lisbon.created_at == SAID  # the turn's date is the observation date
    assert by_text["User prefers oat milk in coffee."].created_at == SAID + timedelta(minutes=2)
    assert by_text["User prefers oat milk in coffee."].type == "preference"
    assert [(j.state, j.attempts, j.last_error) for j in jobs] == [("done", 1, None)] * 2
    assert sum(j.tokens_used for j in jobs) == USAGE["total_tokens"]
    # What the model saw: our instructions and the user's turns, never the assistant's words.
    (seen,) = env.upstream.seen
    assert seen.body["messages"][0] == {"role": "system", "content": INSTRUCTIONS}
    assert seen.body["response_format"] == {"type": "json_object"}
    (payload,) = env.requests()
    assert [t["text"] for t in payload["turns"]] == [turns[0]["content"], turns[2]["content"]]
    assert [t["date"] for t in payload["turns"]] == ["2026-10-03", "2026-10-03"]
    assert "surfing" not in str(seen.body)


async def test_update_supersedes_the_memory_it_contradicts(
    make_env: Callable[..., Any], user_id: str
) -> None:
    async with make_env() as env:
        await _remember(env, user_id, "User lives in Berlin.", at=SAID - timedelta(days=300))
        await _say(env, user_id, [("user", "We moved to Lisbon in September")])

        def reply(body: dict[str, Any]) -> str:
            payload = json.loads(body["messages"][1]["content"])
            berlin = alias_of(payload, "Berlin")
            return facts(fact("User lives in Lisbon.", action="update", replaces=berlin))

        env.script(Answer(reply=reply, usage=USAGE))
        (result,) = await env.drain()
        memories = {m.content: m for m in await env.memories(user_id, live=False)}

        async def where(**extra: str) -> list[str]:
            r = await env.client.post(
                "/v1/tools/query_memory",
                json={"query": "where does the user live", "types": ["fact"], **extra},
                headers=headers(user_id),
            )
            assert r.status_code == 200, r.text
            return [m["content"] for m in r.json()["memories"]]

        now = await where()
        before = await where(as_of=(SAID - timedelta(days=30)).isoformat())
    assert result.state == "done" and result.outcome["updated"] == ["User lives in Lisbon."]
    berlin, lisbon = memories["User lives in Berlin."], memories["User lives in Lisbon."]
    assert berlin.deleted_at is None and berlin.valid_to == SAID  # closed, not deleted
    assert lisbon.supersedes_id == berlin.id and lisbon.valid_from == SAID
    assert lisbon.valid_to is None and lisbon.source == "extraction"
    assert now == ["User lives in Lisbon."] and before == ["User lives in Berlin."]


async def test_nothing_new_stores_nothing(make_env: Callable[..., Any], user_id: str) -> None:
    async with make_env() as env:
        await _remember(env, user_id, "User is vegetarian.")
        await _say(env, user_id, [("user", "As a vegetarian I skip the meat dishes")])
        env.script(
            Answer(
                reply=lambda body: facts(fact("User is vegetarian.", action="none")),
                usage=USAGE,
            )
        )
        (result,) = await env.drain()
        # The model may also say "add" for a text the user has: still stored once.
        await _say(env, user_id, [("user", "I am vegetarian, remember?")])
        env.script(Answer(text=facts(fact("User is vegetarian.")), usage=USAGE))
        (again,) = await env.drain()
        memories = await env.memories(user_id, live=False)
        jobs = await env.jobs(user_id)
    assert result.outcome["known"] == ["User is vegetarian."] and again.outcome["added"] == []
    assert [m.content for m in memories] == ["User is vegetarian."]
    assert [j.state for j in jobs] == ["done", "done"]


async def test_malformed_answers_are_dropped_retried_then_dead(
    make_env: Callable[..., Any], user_id: str
) -> None:
    async with make_env(extraction_max_attempts=3) as env:
        await _say(env, user_id, [("user", "I run marathons")])
        env.script(
            Answer(text="Sure! Here are the facts: user runs marathons", usage=USAGE),
            # Valid JSON, but one fact has a key the schema does not know: the whole answer
            # goes, not the good fact beside it.
            Answer(
                text='{"facts": [{"content": "User runs marathons.", "type": "fact", '
                '"sources": ["t1"], "action": "add", "replaces": null}, {"content": "x", '
                '"type": "fact", "sources": ["t1"], "action": "add", "replaces": null, '
                '"confidence": 0.9}]}',
                usage=USAGE,
            ),
            Answer(text='```json\n{"facts": []}\n```', usage=USAGE),
        )
        results = await env.drain()
        (job,) = await env.jobs(user_id)
        memories = await env.memories(user_id, live=False)
    assert [r.state for r in results] == ["retry", "retry", "dead"]
    assert (job.state, job.attempts) == ("dead", 3)
    assert job.last_error is not None and job.last_error.startswith("malformed answer")
    assert job.tokens_used == 3 * USAGE["total_tokens"]  # spent even though nothing was kept
    assert memories == []
    assert len(env.upstream.seen) == 3


async def test_rate_limited_then_answered(make_env: Callable[..., Any], user_id: str) -> None:
    async with make_env() as env:
        await _say(env, user_id, [("user", "My daughter is called Ana")])
        env.script(
            Answer(status=429, error={"error": {"message": "slow down"}}),
            Answer(text=facts(fact("User's daughter is called Ana.")), usage=USAGE),
        )
        results = await env.drain()
        (job,) = await env.jobs(user_id)
        memories = await env.memories(user_id)
    assert [r.state for r in results] == ["retry", "done"]
    assert "HTTP 429" in (results[0].error or "")
    assert (job.state, job.attempts, job.tokens_used) == ("done", 2, USAGE["total_tokens"])
    assert [m.content for m in memories] == ["User's daughter is called Ana."]


async def test_retries_back_off(
    make_env: Callable[..., Any], user_id: str, db_engine: AsyncEngine
) -> None:
    async with make_env(extraction_backoff_s=60.0) as env:
        await _say(env, user_id, [("user", "I am learning Japanese")])
        env.script(Answer(status=503, error={"error": {"message": "overloaded"}}))
        before = datetime.now(UTC)
        (result,) = await env.drain()  # the retry is not due yet: one call only
        (job,) = await env.jobs(user_id)
    assert result.state == "retry" and len(env.upstream.seen) == 1
    assert job.state == "queued" and job.attempts == 1
    assert before + timedelta(seconds=55) < job.next_attempt_at < before + timedelta(seconds=70)


async def test_timeouts_are_retried_and_end_dead(
    make_env: Callable[..., Any], user_id: str
) -> None:
    async with make_env(extraction_timeout_s=0.3, extraction_max_attempts=2) as env:
        await _say(env, user_id, [("user", "I drive a red bicycle")])
        env.script(
            Answer(text=facts(fact("User rides a red bicycle.")), delay_s=1.0),
            Answer(text=facts(fact("User rides a red bicycle.")), delay_s=1.0),
        )
        results = await env.drain()
        (job,) = await env.jobs(user_id)
        memories = await env.memories(user_id, live=False)
    assert [r.state for r in results] == ["retry", "dead"]
    assert job.state == "dead" and "Timeout" in (job.last_error or "")
    assert job.tokens_used == 0 and memories == []


async def test_a_refused_request_fails_without_retry(
    make_env: Callable[..., Any], user_id: str
) -> None:
    async with make_env() as env:
        await _say(env, user_id, [("user", "I like chess")])
        env.script(Answer(status=400, error={"error": {"message": "bad model"}}))
        (result,) = await env.drain()
        (job,) = await env.jobs(user_id)
    assert result.state == "failed" and job.state == "failed" and job.attempts == 1


async def test_only_the_users_own_statements_are_stored(
    make_env: Callable[..., Any], user_id: str
) -> None:
    """System prompts, tool output and the assistant's guesses are never sent, and facts the
    model makes up from anything but the cited user turns are dropped."""
    secret = "You are HelpBot. The deployment password is hunter2. Never reveal it."
    async with make_env() as env:
        await _say(
            env,
            user_id,
            [
                ("system", secret),
                ("user", "I like green tea in the morning"),
                ("assistant", "I guess you also enjoy matcha and live in Kyoto."),
            ],
        )
        env.script(
            Answer(
                text=facts(
                    fact("The deployment password is hunter2.", "t1"),  # cites a user turn
                    fact("You are HelpBot and never reveal the password.", "s1"),
                    fact(INSTRUCTIONS.split("\n")[0], "t1"),  # our own prompt, echoed
                    fact("User lives in Kyoto and enjoys matcha.", "t1"),  # the assistant's guess
                    fact("User likes green tea in the morning.", "t1", type="preference"),
                ),
                usage=USAGE,
            )
        )
        (result,) = await env.drain()
        memories = await env.memories(user_id, live=False)
    assert [m.content for m in memories] == ["User likes green tea in the morning."]
    assert len(result.outcome["dropped"]) == 4
    (seen,) = env.upstream.seen
    assert "hunter2" not in str(seen.body) and "matcha" not in str(seen.body)


async def test_a_claim_that_lost_its_jobs_stores_nothing(
    make_env: Callable[..., Any], user_id: str, db_engine: AsyncEngine
) -> None:
    """A worker whose lease ran out while it waited for the model must not store: the job was
    claimed again and completed by another worker."""
    async with make_env() as env:
        await _say(env, user_id, [("user", "I was born in Quito")])
        worker = env.extraction.worker
        slow_token = uuid.uuid4()
        async with worker.claims() as session, session.begin():
            slow_jobs = await ExtractionRepository(session).claim(slow_token, batch=5, lease_s=60)
        async with db_engine.begin() as conn:  # the slow worker's lease runs out
            await conn.execute(
                text(
                    "UPDATE extraction_jobs SET lease_until = now() - interval '1 s' "
                    "WHERE user_id = :u"
                ),
                {"u": user_id},
            )
        answer = facts(fact("User was born in Quito."))
        env.script(Answer(text=answer, usage=USAGE), Answer(text=answer, usage=USAGE))
        (fast,) = await env.drain()
        processor: ExtractionProcessor = worker.processor
        slow = await processor.process(slow_token, slow_jobs)
        memories = await env.memories(user_id, live=False)
        (job,) = await env.jobs(user_id)
    assert (fast.state, slow.state) == ("done", "lost")
    assert [m.content for m in memories] == ["User was born in Quito."]
    assert job.state == "done" and job.attempts == 2


async def test_job_token_cap_fails_the_job_before_any_call(
    make_env: Callable[..., Any], user_id: str
) -> None:
    async with make_env(extraction_job_token_cap=100) as env:
        await _say(env, user_id, [("user", "I collect vinyl records")])
        (result,) = await env.drain()
        (job,) = await env.jobs(user_id)
    assert result.state == "failed" and job.state == "failed"
    assert "job token cap" in (job.last_error or "")
    assert env.upstream.seen == []


async def test_user_daily_cap_stops_calls_once_reached(
    make_env: Callable[..., Any], user_id: str, other_user_id: str
) -> None:
    # One call's worst case is about 600 tokens here (prompt + 200 output); the first call
    # reports 900, so a second call could pass 1200: refused, without calling.
    async with make_env(extraction_user_daily_token_cap=1200) as env:
        await _say(env, user_id, [("user", "I play the cello")])
        env.script(
            Answer(
                text=facts(fact("User plays the cello.")),
                usage={"prompt_tokens": 800, "completion_tokens": 100, "total_tokens": 900},
            )
        )
        (first,) = await env.drain()
        await _say(env, user_id, [("user", "I also play the piano")])
        await _say(env, other_user_id, [("user", "I play the drums")])  # another user's cap
        env.script(Answer(text=facts(fact("User plays the drums.")), usage=USAGE))
        results = await env.drain()
        jobs = await env.jobs(user_id)
        other = await env.jobs(other_user_id)
        metrics = (await env.client.get("/metrics")).json()["extraction"]
    assert first.state == "done"
    assert sorted(r.state for r in results) == ["done", "failed"]
    assert [j.state for j in jobs] == ["done", "failed"]
    assert "user token cap" in (jobs[1].last_error or "")
    assert [j.state for j in other] == ["done"]
    assert len(env.upstream.seen) == 2
    # Tokens per user and per job in /metrics.
    top = {u["user_id"]: u["tokens"] for u in metrics["top_users_today"]}
    assert top[user_id] == 900 and top[other_user_id] == USAGE["total_tokens"]
    assert metrics["process"]["tokens"] == 900 + USAGE["total_tokens"]
    assert metrics["jobs"]["failed"] >= 1 and metrics["tokens_per_job"]["max"] >= 900


async def test_concurrent_workers_claim_each_job_once(
    make_env: Callable[..., Any], user_id: str
) -> None:
    cities = ["Oslo", "Quito", "Hanoi", "Dakar", "Lima", "Perth"]

    def reply(body: dict[str, Any]) -> str:
        (turn,) = json.loads(body["messages"][1]["content"])["turns"]
        return facts(fact(f"User visited {turn['text'].split()[-1]}."))

    async with make_env() as env:
        for city in cities:  # one conversation each: six batches
            await _say(env, user_id, [("user", f"Last spring I visited {city}")])
        env.script(*[Answer(reply=reply, usage=USAGE) for _ in cities])
        worker = env.extraction.worker
        results = await asyncio.gather(*[worker.drain() for _ in range(3)])
        memories = await env.memories(user_id)
        jobs = await env.jobs(user_id)
    assert sum(len(r) for r in results) == len(cities) == len(env.upstream.seen)
    assert sorted(m.content for m in memories) == sorted(f"User visited {c}." for c in cities)
    assert [(j.state, j.attempts) for j in jobs] == [("done", 1)] * len(cities)


MALFORMED_BODIES = [
    (b"\xff\xfe{\x00}\x00", "the body is not UTF-8"),
    (b"<html>502 Bad Gateway</html>", "the body is not JSON"),
    (b'["a", "list"]', "the body is not a JSON object"),
    (b'{"choices": "nope"}', "`choices` is not a list"),
    (b'{"choices": ["nope"]}', "`choices[0].message` is not an object"),
    (b'{"choices": [{"message": {"content": 7}}]}', "`choices[0].message.content` is not text"),
]


@pytest.mark.parametrize(("raw", "reason"), MALFORMED_BODIES)
async def test_a_malformed_200_retries_after_its_backoff_then_dies_readably(
    make_env: Callable[..., Any],
    user_id: str,
    raw: bytes,
    reason: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Each malformed shape is an expected fault: the batch settles at once (retry, then dead
    after max attempts), with one warning line and no traceback."""
    async with make_env(extraction_max_attempts=2, extraction_backoff_s=0.0) as env:
        await _say(env, user_id, [("user", "I keep bees")])
        env.script(Answer(raw=raw), Answer(raw=raw))
        with caplog.at_level(logging.WARNING):
            results = await env.drain()
        (job,) = await env.jobs(user_id)
    assert [r.state for r in results] == ["retry", "dead"]
    assert (job.state, job.attempts) == ("dead", 2)
    assert job.last_error == f"malformed answer: {reason}"
    assert job.tokens_used > 0  # the worst case is counted: an answer came back
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


async def test_a_malformed_200_waits_for_its_backoff(
    make_env: Callable[..., Any], user_id: str
) -> None:
    async with make_env(extraction_backoff_s=60.0) as env:
        await _say(env, user_id, [("user", "I keep bees")])
        env.script(Answer(raw=b'{"choices": "nope"}'))
        before = datetime.now(UTC)
        (result,) = await env.drain()  # settled at once, not left `running` for the lease
        (job,) = await env.jobs(user_id)
    assert result.state == "retry" and job.state == "queued"
    assert before + timedelta(seconds=55) < job.next_attempt_at < before + timedelta(seconds=70)
