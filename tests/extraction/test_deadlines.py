"""One deadline per model call (app/deadline.py): a drip-fed answer (headers at once, then a
byte every 0.3 s, so no single read ever times out) ends the attempt at
PGRECALL_EXTRACTION_TIMEOUT_S, and with the default worker tasks another user's batch starts
while it is still dripping."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from app.config import Settings
from tests.extraction.conftest import Env, fact, facts
from tests.helpers import headers, new_conversation
from tests.proxy.upstream_server import Answer

DRIP_S = 0.3
DEADLINE_S = 1.5


async def say(env: Env, user: str, text: str) -> None:
    cid = await new_conversation(env.client, user)
    response = await env.client.post(
        f"/v1/conversations/{cid}/messages",
        json={"role": "user", "content": text},
        headers=headers(user),
    )
    assert response.status_code == 201, response.text


async def until(check: Callable[[], Any], timeout_s: float) -> float:
    """Seconds until `check()` is true (awaited if it returns an awaitable)."""
    started = time.monotonic()
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return time.monotonic() - started
        assert time.monotonic() - started < timeout_s, "not within the time allowed"
        await asyncio.sleep(0.02)


async def test_a_drip_fed_answer_ends_the_attempt_at_its_deadline(
    make_env: Callable[..., Any], user_id: str
) -> None:
    async with make_env(extraction_timeout_s=DEADLINE_S, extraction_backoff_s=60.0) as env:
        await say(env, user_id, "I keep two goats")
        env.script(Answer(text=facts(fact("User keeps two goats.")), drip_s=DRIP_S))
        (result,) = await env.drain()
        elapsed = time.monotonic() - env.upstream.seen[0].at  # from the call's arrival
        (job,) = await env.jobs(user_id)
    assert DEADLINE_S - 0.1 <= elapsed <= DEADLINE_S + 1.0, elapsed
    assert result.state == "retry" and job.state == "queued", (result, job.state)
    assert "PGRECALL_EXTRACTION_TIMEOUT_S" in (job.last_error or ""), job.last_error


async def test_another_users_job_starts_while_one_answer_drips(
    make_env: Callable[..., Any], user_id: str, other_user_id: str
) -> None:
    workers = Settings().extraction_workers  # the default
    assert workers > 1
    settings = {
        "extraction_timeout_s": DEADLINE_S,
        "extraction_workers": workers,
        "extraction_max_attempts": 1,  # the timed-out job ends dead instead of coming back
    }
    async with make_env(**settings) as env:
        env.script(
            Answer(text=facts(fact("User keeps two goats.")), drip_s=DRIP_S),
            Answer(text=facts(fact("User plays the oboe."))),
        )
        await say(env, user_id, "I keep two goats")
        await until(lambda: len(env.upstream.seen) == 1, 10)  # the slow call is under way
        await say(env, other_user_id, "I play the oboe")
        waited = await until(lambda: len(env.upstream.seen) == 2, 10)

        async def settled() -> bool:
            (slow,) = await env.jobs(user_id)
            (other,) = await env.jobs(other_user_id)
            return slow.state == "dead" and other.state == "done"

        await until(settled, DEADLINE_S + 10)
        (slow,) = await env.jobs(user_id)
    # Started beside the dripping call, not after it (a single task waited out the deadline).
    assert waited < DEADLINE_S / 2, waited
    assert "PGRECALL_EXTRACTION_TIMEOUT_S" in (slow.last_error or ""), slow.last_error
