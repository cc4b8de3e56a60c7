"""Extraction stays inside one user; purge removes its traces; the workers in `pgrecall serve`
and `pgrecall worker` run the same jobs."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from app.embedded import EmbeddedPostgres
from app.repositories.extraction import ClaimedJob
from app.services.purge import count_user_rows, purge_user
from tests.extraction.conftest import fact, facts
from tests.extraction.test_jobs import USAGE, _remember, _say
from tests.proxy.upstream_server import Answer
from tests.redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[2]


async def test_a_users_batch_never_sees_or_touches_another_users_memories(
    make_env: Callable[..., Any], user_id: str, other_user_id: str
) -> None:
    async with make_env() as env:
        await _remember(env, other_user_id, "User lives in Berlin.")
        await _say(env, user_id, [("user", "We moved to Lisbon, after years in Berlin")])

        def reply(body: dict[str, Any]) -> str:
            payload = json.loads(body["messages"][1]["content"])
            assert payload["memories"] == []  # the other user's Berlin is not a candidate
            # A model that still names a memory to replace is refused: it was shown none.
            return facts(fact("User lives in Lisbon.", action="update", replaces="k1"))

        env.script(Answer(reply=reply, usage=USAGE))
        (result,) = await env.drain()
        mine = await env.memories(user_id, live=False)
        theirs = await env.memories(other_user_id, live=False)
    assert result.state == "done" and result.outcome["updated"] == []
    assert mine == [] and [(m.content, m.deleted_at) for m in theirs] == [
        ("User lives in Berlin.", None)
    ]


async def test_a_job_cannot_point_at_another_users_message(
    make_env: Callable[..., Any], user_id: str, other_user_id: str, db_engine: AsyncEngine
) -> None:
    """A job row forged (as the owner) to point at another user's message is refused by the
    database itself: the job's key to its message includes user_id (migration
    0010_distributable), so a job can only name a message of its own user."""
    async with make_env() as env:
        cid, turns = await _say(env, other_user_id, [("user", "My PIN is 4321")])
        with pytest.raises(IntegrityError) as info:
            async with db_engine.begin() as conn:
                await conn.execute(
                    text(
                        "INSERT INTO extraction_jobs (id, user_id, conversation_id, message_id) "
                        "VALUES (:j, :u, :c, :m)"
                    ),
                    {"j": uuid.uuid4(), "u": user_id, "c": cid, "m": turns[0]["id"]},
                )
        assert getattr(info.value.orig, "sqlstate", None) == "23503"
        assert await env.jobs(user_id) == []
    assert env.upstream.seen == []


async def test_a_claim_of_two_users_is_refused(make_env: Callable[..., Any]) -> None:
    def job(user: str) -> ClaimedJob:
        return ClaimedJob(uuid.uuid4(), user, uuid.uuid4(), uuid.uuid4(), 1, 0)

    async with make_env() as env:
        with pytest.raises(ValueError, match="one user"):
            await env.extraction.worker.processor.process(uuid.uuid4(), [job("a"), job("b")])


async def test_purge_removes_jobs_and_token_counts(
    make_env: Callable[..., Any], user_id: str, other_user_id: str
) -> None:
    async with make_env() as env:
        await _say(env, user_id, [("user", "I am allergic to penicillin")])
        env.script(Answer(text=facts(fact("User is allergic to penicillin.")), usage=USAGE))
        await env.drain()
        await _say(env, user_id, [("user", "I also have asthma")])  # still queued
        await _say(env, other_user_id, [("user", "I have hay fever")])
        resources = env.app.state.resources
        before = await count_user_rows(resources.sessionmaker, user_id)
        report = await purge_user(resources.sessionmaker, resources.cache, user_id)
        after = await count_user_rows(resources.sessionmaker, user_id)
        other = await env.jobs(other_user_id)
    assert before["extraction_jobs"] == 2 and before["extraction_usage"] == 1
    assert report.rows["extraction_jobs"] == 2 and report.rows["extraction_usage"] == 1
    assert sum(after.values()) == 0
    assert [j.state for j in other] == ["queued"]


async def test_the_workers_inside_serve_run_jobs_and_stop_cleanly(
    make_env: Callable[..., Any], user_id: str
) -> None:
    async with make_env(extraction_workers=2) as env:
        env.script(Answer(text=facts(fact("User speaks Basque.")), usage=USAGE))
        await _say(env, user_id, [("user", "I speak Basque at home")])
        for _ in range(200):
            if [j.state for j in await env.jobs(user_id)] == ["done"]:
                break
            await asyncio.sleep(0.05)
        memories = await env.memories(user_id)
        metrics = (await env.client.get("/metrics")).json()["extraction"]
    assert [m.content for m in memories] == ["User speaks Basque."]
    assert metrics["enabled"] is True and metrics["process"]["jobs"] == {"done": 1}
    assert env.extraction.worker._tasks == []  # stopped with the app, after their batch


async def test_pgrecall_worker_processes_what_serve_queued(
    make_env: Callable[..., Any],
    user_id: str,
    pg: EmbeddedPostgres,
    redis_srv: RedisServer,
    tmp_path: Path,
) -> None:
    async with make_env() as env:
        await _say(env, user_id, [("user", "I keep bees in my garden")])
        env.script(Answer(text=facts(fact("User keeps bees.")), usage=USAGE))
        command = [sys.executable, "-m", "app.cli", "worker", "--once"]
        settings = {
            "PGRECALL_DATABASE_URL": pg.url,
            "PGRECALL_REDIS_URL": redis_srv.url,
            "PGRECALL_DATA_DIR": str(tmp_path),
            "PGRECALL_LOG_LEVEL": "WARNING",
            "PGRECALL_EXTRACTION": "llm",
            "PGRECALL_EXTRACTION_BASE_URL": env.upstream.base,
        }

        def run(**extra: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                command,
                cwd=ROOT,
                env={**os.environ, **settings, **extra},
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )

        off = await asyncio.to_thread(run, PGRECALL_EXTRACTION="off")
        done = await asyncio.to_thread(run)
        memories = await env.memories(user_id)
        (job,) = await env.jobs(user_id)
    assert off.returncode == 2 and "PGRECALL_EXTRACTION is off" in off.stderr
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "processed 1 batch(es)"
    assert [m.content for m in memories] == ["User keeps bees."] and job.state == "done"


async def test_the_chat_proxy_queues_the_user_turn_it_stores(
    make_env: Callable[..., Any], upstream: Any, user_id: str
) -> None:
    async with make_env(chat_upstream_url=upstream.base) as env:
        env.script(Answer(text="Noted."))
        response = await env.client.post(
            "/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "I own a kayak"}]},
            headers={"X-User-Id": user_id},
        )
        jobs = await env.jobs(user_id)
    assert response.status_code == 200, response.text
    assert [j.state for j in jobs] == ["queued"]  # the user turn, not the assistant's answer


async def test_facts_of_an_agents_conversation_are_that_agents(
    make_env: Callable[..., Any], user_id: str
) -> None:
    """Issue 43: a conversation an agent started keeps its facts in the agent's scope, and the
    memories the model may update are those the agent reads (never another agent's)."""
    async with make_env() as env:
        created = await env.client.post(
            "/v1/conversations", json={}, headers={"X-User-Id": user_id, "X-Agent-Id": "coach"}
        )
        assert created.status_code == 201, created.text
        cid = created.json()["id"]
        await _say(env, user_id, [("user", "I run 5k every Tuesday now")], cid=cid)

        def reply(body: dict[str, Any]) -> str:
            return facts(fact("User runs 5k every Tuesday."))

        env.script(Answer(reply=reply, usage=USAGE))
        (result,) = await env.drain()
        mine = await env.memories(user_id)
    assert result.state == "done", result
    assert [(m.content, m.agent_id) for m in mine] == [("User runs 5k every Tuesday.", "coach")]
