"""Extraction jobs and token usage: enqueue, claim, finish, retry, and the per-user cap.

Every statement except the claim and the metrics names its user. The claim runs in the job-queue
scope (app/db.py: it sees every user's job rows and no other table) and only locks and marks
rows; what a job reads and writes then runs in a session scoped to the job's user. The metrics
read counts across users in the audited admin mode.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncSession

from app.models import ExtractionJob, Message


@dataclass(frozen=True)
class ClaimedJob:
    id: uuid.UUID
    user_id: str
    conversation_id: uuid.UUID
    message_id: uuid.UUID
    attempts: int  # including the one this claim starts
    tokens_used: int
    # The conversation's agent and run (migration 0019): its facts are stored in their scope.
    agent_id: str | None = None
    run_id: str | None = None


# Conversations with due jobs (queued and due, or running with an expired lease), the most
# overdue first: a read across users without locks (on Citus one statement per shard, merged).
_DUE_SQL = text(
    """
    SELECT user_id, conversation_id FROM extraction_jobs
    WHERE (state = 'queued' OR (state = 'running' AND lease_until < now()))
      AND next_attempt_at <= now()
    ORDER BY next_attempt_at, created_at
    LIMIT :candidates
    """
)
# Up to :batch due jobs of one conversation, oldest first, marked running for this claim. Pinned
# to the user, so on Citus the lock and the update run on that user's shard (FOR UPDATE across
# shards is refused). SKIP LOCKED lets workers claim side by side: a conversation another
# worker holds yields no row, and the claim tries the next candidate.
_CLAIM_SQL = text(
    """
    WITH batch AS (
        SELECT j.id FROM extraction_jobs AS j
        WHERE j.user_id = :user_id AND j.conversation_id = :conversation_id
          AND (j.state = 'queued' OR (j.state = 'running' AND j.lease_until < now()))
          AND j.next_attempt_at <= now()
        ORDER BY j.created_at, j.id
        LIMIT :batch
        FOR UPDATE OF j SKIP LOCKED
    )
    UPDATE extraction_jobs AS j
    SET state = 'running', claimed_by = :token, attempts = j.attempts + 1,
        lease_until = now() + make_interval(secs => :lease_s), updated_at = now()
    FROM batch, conversations AS c
    WHERE j.user_id = :user_id AND j.id = batch.id
      AND c.user_id = :user_id AND c.id = :conversation_id
    RETURNING j.id, j.user_id, j.conversation_id, j.message_id, j.attempts, j.tokens_used,
              j.created_at, c.agent_id, c.run_id
    """
)
# How many due conversations one claim tries before it gives up until the next poll.
CLAIM_CANDIDATES = 8

# Ends the claim's jobs; only rows this claim still holds change (the fence), with their share
# of the tokens the call used.
_SETTLE_SQL = text(
    """
    UPDATE extraction_jobs AS j
    SET state = CASE
            WHEN :state = 'retry' AND j.attempts >= :max_attempts THEN 'dead'
            WHEN :state = 'retry' THEN 'queued'
            ELSE :state END,
        next_attempt_at = CASE WHEN :state = 'retry'
            THEN CAST(:now AS timestamptz) + make_interval(secs => :delay_s)
            ELSE j.next_attempt_at END,
        last_error = :error, tokens_used = j.tokens_used + t.tokens,
        outcome = CAST(:outcome AS jsonb), claimed_by = NULL, lease_until = NULL,
        updated_at = now()
    FROM unnest(CAST(:ids AS uuid[]), CAST(:tokens AS integer[])) AS t(id, tokens)
    WHERE j.id = t.id AND j.user_id = :user_id AND j.claimed_by = :token
      AND j.state = 'running'
    RETURNING j.id, j.state
    """
)


class ExtractionRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def enqueue(
        self, user_id: str, conversation_id: uuid.UUID, message_ids: Sequence[uuid.UUID]
    ) -> None:
        """One job per message, in one statement; a message already queued is left alone."""
        if not message_ids:
            return
        # One statement and one cached plan whatever the number of turns.
        await self.session.execute(
            text(
                "INSERT INTO extraction_jobs (id, user_id, conversation_id, message_id) "
                "SELECT gen_random_uuid(), :u, :c, m FROM unnest(CAST(:ids AS uuid[])) AS m "
                "ON CONFLICT (user_id, message_id) DO NOTHING"
            ),
            {"u": user_id, "c": conversation_id, "ids": list(message_ids)},
        )

    async def claim(self, token: uuid.UUID, *, batch: int, lease_s: float) -> list[ClaimedJob]:
        """Due jobs of one conversation, marked running for this claim (job-queue session)."""
        due = await self.session.execute(_DUE_SQL, {"candidates": CLAIM_CANDIDATES})
        claimed: list[Any] = []
        for user_id, conversation_id in dict.fromkeys(tuple(r) for r in due.all()):
            params = {"user_id": user_id, "conversation_id": conversation_id}
            rows = await self.session.execute(
                _CLAIM_SQL, {**params, "token": token, "batch": batch, "lease_s": lease_s}
            )
            claimed = sorted(rows.all(), key=lambda r: (r.created_at, r.id))
            if claimed:
                break
        return [
            ClaimedJob(
                r.id,
                r.user_id,
                r.conversation_id,
                r.message_id,
                r.attempts,
                r.tokens_used,
                r.agent_id,
                r.run_id,
            )
            for r in claimed
        ]

    async def messages(self, user_id: str, message_ids: Sequence[uuid.UUID]) -> Sequence[Message]:
        """The user's messages with these ids, in conversation order."""
        stmt = (
            select(Message)
            .where(Message.user_id == user_id, Message.id.in_(list(message_ids)))
            .order_by(Message.seq)
        )
        return (await self.session.execute(stmt)).scalars().all()

    async def hold(self, user_id: str, token: uuid.UUID, job_ids: Sequence[uuid.UUID]) -> int:
        """Lock the claim's jobs that it still holds; how many (fewer: its lease was lost)."""
        rows = await self.session.execute(
            select(ExtractionJob.id)
            .where(
                ExtractionJob.user_id == user_id,
                ExtractionJob.id.in_(list(job_ids)),
                ExtractionJob.claimed_by == token,
                ExtractionJob.state == "running",
            )
            .with_for_update()
        )
        return len(rows.all())

    async def settle(
        self,
        user_id: str,
        token: uuid.UUID,
        job_ids: Sequence[uuid.UUID],
        tokens: Sequence[int],
        *,
        state: str,
        error: str | None = None,
        delay_s: float = 0.0,
        max_attempts: int = 1,
        outcome: str = "{}",
    ) -> dict[uuid.UUID, str]:
        """End the claim's jobs: `state` done, failed, or retry (queued after `delay_s`, dead
        once attempts reach `max_attempts`). Returns the new state of each job still held."""
        rows = await self.session.execute(
            _SETTLE_SQL,
            {
                "ids": list(job_ids),
                "tokens": list(tokens),
                "user_id": user_id,
                "token": token,
                "state": state,
                "error": error,
                "delay_s": delay_s,
                "max_attempts": max_attempts,
                "outcome": outcome,
                # Bound, not now(): Citus refuses a non-immutable function inside the CASE of an
                # UPDATE on a distributed table (docs/scaling.md).
                "now": datetime.now(UTC),
            },
        )
        return {r.id: r.state for r in rows.all()}

    async def reserve_tokens(self, user_id: str, day: date, amount: int, cap: int) -> bool:
        """Reserve `amount` tokens of the user's daily cap; False (nothing reserved) if the
        tokens spent plus those in flight would pass it. Atomic across workers."""
        if amount > cap:
            return False
        row = await self.session.execute(
            text(
                "INSERT INTO extraction_usage (user_id, day, reserved) VALUES (:u, :d, :n) "
                "ON CONFLICT (user_id, day) DO UPDATE "
                "SET reserved = extraction_usage.reserved + EXCLUDED.reserved "
                "WHERE extraction_usage.user_id = :u "
                "AND extraction_usage.tokens + extraction_usage.reserved + EXCLUDED.reserved "
                "<= :cap RETURNING tokens"
            ),
            {"u": user_id, "d": day, "n": amount, "cap": cap},
        )
        return row.first() is not None

    async def settle_tokens(self, user_id: str, day: date, reserved: int, used: int) -> None:
        """Release a reservation and count what the call really used."""
        await self.session.execute(
            text(
                "UPDATE extraction_usage SET reserved = greatest(reserved - :r, 0), "
                "tokens = tokens + :t, calls = calls + CASE WHEN :t > 0 THEN 1 ELSE 0 END "
                "WHERE user_id = :u AND day = :d"
            ),
            {"u": user_id, "d": day, "r": reserved, "t": used},
        )

    async def jobs(self, user_id: str) -> Sequence[ExtractionJob]:
        """The user's jobs, oldest first (tests and inspection)."""
        stmt = (
            select(ExtractionJob)
            .where(ExtractionJob.user_id == user_id)
            .order_by(ExtractionJob.created_at, ExtractionJob.id)
        )
        return (await self.session.execute(stmt)).scalars().all()


class ExtractionStatsRepository:
    """Counters across users for /metrics (admin-mode session)."""

    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def summary(self, day: date, top: int) -> dict[str, Any]:
        """Jobs per state, tokens per job, and the users who spent most on `day`."""
        states = await self.session.execute(
            text("SELECT state, count(*) AS n FROM extraction_jobs GROUP BY state")
        )
        per_job = (
            await self.session.execute(
                text(
                    "SELECT count(*) AS jobs, coalesce(sum(tokens_used), 0) AS tokens, "
                    "coalesce(max(tokens_used), 0) AS max FROM extraction_jobs "
                    "WHERE tokens_used > 0"
                )
            )
        ).one()
        users = await self.session.execute(
            text(
                "SELECT user_id, tokens, calls FROM extraction_usage WHERE day = :d "
                "ORDER BY tokens DESC, user_id LIMIT :top"
            ),
            {"d": day, "top": top},
        )
        total = await self.session.scalar(
            text("SELECT coalesce(sum(tokens), 0) FROM extraction_usage WHERE day = :d"),
            {"d": day},
        )
        return {
            "jobs": {r.state: int(r.n) for r in states.all()},
            "tokens_per_job": {
                "jobs": int(per_job.jobs),
                "tokens": int(per_job.tokens),
                "max": int(per_job.max),
            },
            "tokens_today": int(total or 0),
            "top_users_today": [
                {"user_id": r.user_id, "tokens": int(r.tokens), "calls": int(r.calls)}
                for r in users.all()
            ],
        }
