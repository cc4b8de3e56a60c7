"""One claimed batch, start to end: read the user's turns, ask the model, check, store.

Everything about the batch's user runs in sessions scoped to that user (row-level security
shows them nothing else). The model is called outside any transaction. The memories a batch
yields and its jobs' `done` are committed together, and only while the claim still holds the
jobs (the fence), so a retried or re-claimed job never stores twice and a failed one never
stores anything. Tokens are reserved against the user's daily cap before the call and settled
with what the endpoint reported after it.
"""

from __future__ import annotations

import json
import logging
import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db import user_session
from app.domain import MemoryScope
from app.errors import ConflictError, NotFoundError, ServiceError, ValidationFailedError
from app.extraction.llm import ExtractionLLM, LLMError
from app.extraction.metrics import ExtractionMetrics
from app.extraction.output import Kept, MalformedOutputError, check_facts, parse_output
from app.extraction.prompt import Known, Turn, build_messages, estimate_prompt_tokens
from app.extraction.writes import ORIGIN, write_fact
from app.repositories.admin import AdminMemoryRepository
from app.repositories.extraction import ClaimedJob, ExtractionRepository
from app.services.embedding import EmbeddingService, Priority

log = logging.getLogger(__name__)

# Candidates closer than this to none of the batch's turns are not worth showing the model.
_CANDIDATE_MIN_COSINE = 0.2


@dataclass(frozen=True)
class ExtractionConfig:
    batch_messages: int = 20
    candidates: int = 10
    max_attempts: int = 5
    backoff_s: float = 10.0
    backoff_max_s: float = 3600.0
    job_token_cap: int = 20_000
    user_daily_token_cap: int = 200_000
    lease_s: float = 300.0
    poll_interval_s: float = 2.0
    workers: int = 1

    def backoff(self, attempts: int) -> float:
        """Delay before the next attempt after `attempts` failed ones: doubling, capped."""
        return min(self.backoff_max_s, self.backoff_s * 2 ** max(0, attempts - 1))


@dataclass
class BatchResult:
    state: str  # done | retry | failed | dead | lost
    jobs: int
    tokens: int = 0
    error: str | None = None
    outcome: dict[str, list[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class _Source:
    message_id: uuid.UUID
    said_at: datetime


def claim_scope(jobs: Sequence[ClaimedJob]) -> MemoryScope:
    """The scope of a claim's conversation (its agent and run came with the claim): its facts
    are stored there, and the known memories the model may update are those it reads."""
    job = jobs[0]
    return MemoryScope(job.user_id, job.agent_id, job.run_id)


@dataclass
class _Batch:
    """What the model is shown, and what its aliases stand for."""

    turns: list[Turn] = field(default_factory=list)
    sources: dict[str, _Source] = field(default_factory=dict)  # t1.. -> the user turn
    known: list[Known] = field(default_factory=list)
    known_ids: dict[str, uuid.UUID] = field(default_factory=dict)  # k1.. -> the memory


@dataclass
class _Usage:
    """Tokens reserved against the user's cap for one call (UTC `day`), and what it used."""

    day: date
    reserved: int
    used: int = 0


def split_tokens(total: int, n: int) -> list[int]:
    """`total` tokens shared by `n` jobs, the remainder to the first ones (sums exactly)."""
    base, extra = divmod(total, n)
    return [base + (1 if i < extra else 0) for i in range(n)]


class ExtractionProcessor:
    def __init__(
        self,
        sessionmaker: async_sessionmaker[AsyncSession],
        embeddings: EmbeddingService,
        llm: ExtractionLLM,
        config: ExtractionConfig,
        metrics: ExtractionMetrics,
    ) -> None:
        self.sessionmaker = sessionmaker
        self.embeddings = embeddings
        self.llm = llm
        self.config = config
        self.metrics = metrics

    async def process(self, token: uuid.UUID, jobs: Sequence[ClaimedJob]) -> BatchResult:
        """Run one claim's jobs (all of one user and conversation) to their next state."""
        user_id = jobs[0].user_id
        if any(j.user_id != user_id for j in jobs):
            raise ValueError("a claim holds one user's jobs")
        try:
            async with (
                user_session(self.sessionmaker, claim_scope(jobs)) as session,
                session.begin(),
            ):
                batch = await self._read(session, user_id, jobs)
        except ServiceError as exc:  # the embedder failed
            return await self._settle(user_id, token, jobs, "retry", error=exc.message)
        if not batch.turns:  # the jobs' messages are not user turns: nothing to extract
            return await self._settle(
                user_id, token, jobs, "done", outcome={"skipped": ["no turn"]}
            )
        messages = build_messages(batch.turns, batch.known)
        worst = estimate_prompt_tokens(messages) + self.llm.max_output_tokens
        share = math.ceil(worst / len(jobs))
        if any(j.tokens_used + share > self.config.job_token_cap for j in jobs):
            return await self._refuse(
                user_id,
                token,
                jobs,
                f"job token cap: this call may use up to {share} tokens per job and the "
                f"cap is {self.config.job_token_cap} per job (PGRECALL_EXTRACTION_JOB_TOKEN_CAP)",
            )
        day = datetime.now(UTC).date()
        async with user_session(self.sessionmaker, user_id) as session, session.begin():
            reserved = await ExtractionRepository(session).reserve_tokens(
                user_id, day, worst, self.config.user_daily_token_cap
            )
        if not reserved:
            return await self._refuse(
                user_id,
                token,
                jobs,
                f"user token cap: {self.config.user_daily_token_cap} tokens per day "
                "reached (PGRECALL_EXTRACTION_USER_DAILY_TOKEN_CAP)",
            )
        return await self._call_and_store(user_id, token, jobs, batch, messages, _Usage(day, worst))

    async def _call_and_store(
        self,
        user_id: str,
        token: uuid.UUID,
        jobs: Sequence[ClaimedJob],
        batch: _Batch,
        messages: list[dict[str, str]],
        usage: _Usage,
    ) -> BatchResult:
        try:
            completion = await self.llm.complete(messages)
        except LLMError as exc:
            log.warning("extraction call failed for %d job(s): %s", len(jobs), exc)
            if exc.spent:  # an answer came back, unreadable: count the worst case
                usage.used = usage.reserved
                self.metrics.calls += 1
                self.metrics.malformed += 1
                self.metrics.tokens += usage.used
                self.metrics.tokens_by_user[user_id] += usage.used
            state = "retry" if exc.retryable else "failed"
            return await self._settle(user_id, token, jobs, state, error=str(exc), usage=usage)
        # Without a usage report the worst case is counted: a cap must not be dodged.
        usage.used = completion.total_tokens if completion.usage_reported else usage.reserved
        self.metrics.calls += 1
        self.metrics.tokens += usage.used
        self.metrics.tokens_by_user[user_id] += usage.used
        try:
            output = parse_output(completion.text)
        except MalformedOutputError as exc:
            self.metrics.malformed += 1
            log.warning("extraction answer dropped (malformed): %s", exc)
            error = f"malformed answer: {exc}"
            return await self._settle(user_id, token, jobs, "retry", error=error, usage=usage)
        kept, dropped = check_facts(
            output,
            {t.alias: t.evidence for t in batch.turns},
            {k.alias: k.text for k in batch.known},
        )
        for d in dropped:
            log.warning("extracted fact dropped: %s", d.reason)
        try:
            return await self._store(
                user_id, token, jobs, batch, kept, usage, dropped=[d.reason for d in dropped]
            )
        except ServiceError as exc:  # e.g. the embedder failed: nothing of the batch is stored
            log.warning("storing extracted facts failed: %s", exc.message)
            error = f"store failed: {exc.message}"
            return await self._settle(user_id, token, jobs, "retry", error=error, usage=usage)

    async def _read(
        self, session: AsyncSession, user_id: str, jobs: Sequence[ClaimedJob]
    ) -> _Batch:
        batch = _Batch()
        rows = await ExtractionRepository(session).messages(user_id, [j.message_id for j in jobs])
        # Only the user's own words are sources, whatever was queued.
        users = [m for m in rows if m.role == "user"]
        for n, m in enumerate(users, start=1):
            batch.turns.append(Turn(f"t{n}", m.content, m.created_at))
            batch.sources[f"t{n}"] = _Source(m.id, m.created_at)
        if not users or not self.config.candidates:
            return batch
        vectors = [
            m.embedding
            if m.embedding is not None and m.embedding_model == self.embeddings.model
            else None
            for m in users
        ]
        missing = [i for i, v in enumerate(vectors) if v is None]
        if missing:
            fresh = await self.embeddings.embed(
                [users[i].content for i in missing], priority=Priority.BULK
            )
            for i, v in zip(missing, fresh, strict=True):
                vectors[i] = v
        admin = AdminMemoryRepository(session)
        near = await admin.nearest(
            user_id,
            self.embeddings.model,
            vectors,
            min_cosine=_CANDIDATE_MIN_COSINE,
            k=self.config.candidates,
        )
        best: dict[uuid.UUID, float] = {}
        for hits in near:
            for item_id, cosine in hits:
                best[item_id] = max(cosine, best.get(item_id, -1.0))
        chosen = sorted(best, key=lambda i: -best[i])[: self.config.candidates]
        items = {m.id: m for m in await admin.get_many(user_id, chosen)}
        for item_id in chosen:
            item = items.get(item_id)
            if item is not None:
                alias = f"k{len(batch.known) + 1}"
                batch.known.append(Known(alias, item.content, item.type))
                batch.known_ids[alias] = item_id
        return batch

    async def _store(
        self,
        user_id: str,
        token: uuid.UUID,
        jobs: Sequence[ClaimedJob],
        batch: _Batch,
        kept: Sequence[Kept],
        usage: _Usage,
        *,
        dropped: list[str],
    ) -> BatchResult:
        outcome: dict[str, list[str]] = {
            "added": [],
            "updated": [],
            "known": [],
            "dropped": dropped,
        }
        ids = [j.id for j in jobs]
        async with user_session(self.sessionmaker, claim_scope(jobs)) as session, session.begin():
            repo = ExtractionRepository(session)
            # The fence first: it locks the jobs; a claim that lost them stores nothing.
            if await repo.hold(user_id, token, ids) != len(ids):
                await session.rollback()
                return await self._lost(user_id, jobs, usage)
            for fact in kept:
                if fact.action == "none":
                    outcome["known"].append(fact.content)
                    continue
                try:
                    async with session.begin_nested():
                        stored = await self._write(session, user_id, batch, fact)
                except (ConflictError, NotFoundError, ValidationFailedError) as exc:
                    # This fact only (e.g. its memory was replaced meanwhile): the rest stand.
                    log.warning("extracted fact not stored: %s", exc.message)
                    outcome["dropped"].append(f"not stored: {exc.message}")
                    continue
                key = ("updated" if fact.action == "update" else "added") if stored else "known"
                outcome[key].append(fact.content)
            await repo.settle(
                user_id,
                token,
                ids,
                split_tokens(usage.used, len(ids)),
                state="done",
                outcome=json.dumps(outcome),
            )
            await repo.settle_tokens(user_id, usage.day, usage.reserved, usage.used)
        for key in ("added", "updated", "known", "dropped"):
            self.metrics.facts[key] += len(outcome[key])
        self.metrics.jobs["done"] += len(jobs)
        return BatchResult("done", len(jobs), usage.used, outcome=outcome)

    async def _write(
        self, session: AsyncSession, user_id: str, batch: _Batch, fact: Kept
    ) -> uuid.UUID | None:
        """Store one checked fact; None when the user has its text already."""
        cited = [batch.sources[a] for a in fact.sources]
        observed = max(s.said_at for s in cited)
        metadata = {
            "via": ORIGIN,
            "source_message_ids": [str(s.message_id) for s in cited],
            "observed_at": observed.isoformat(),
            "model": self.llm.model,
        }
        replaces = None  # ADD; an UPDATE names the known memory it replaces
        if fact.action == "update":
            assert fact.replaces is not None  # check_facts guarantees it
            replaces = batch.known_ids[fact.replaces]
        return await write_fact(
            session,
            self.embeddings,
            user_id,
            fact.content,
            fact.type,
            replaces=replaces,
            observed_at=observed,
            source_message_id=cited[0].message_id,
            metadata=metadata,
        )

    async def _lost(self, user_id: str, jobs: Sequence[ClaimedJob], usage: _Usage) -> BatchResult:
        """Another claim took the jobs over (this one's lease ran out): count the tokens,
        store nothing."""
        async with user_session(self.sessionmaker, user_id) as session, session.begin():
            await ExtractionRepository(session).settle_tokens(
                user_id, usage.day, usage.reserved, usage.used
            )
        log.warning("extraction claim lost its %d job(s) before storing; nothing stored", len(jobs))
        return BatchResult("lost", len(jobs), usage.used)

    async def _refuse(
        self, user_id: str, token: uuid.UUID, jobs: Sequence[ClaimedJob], error: str
    ) -> BatchResult:
        """A token cap refuses the call: the jobs fail with `error`, counted as a refusal."""
        self.metrics.cap_refusals += 1
        return await self._settle(user_id, token, jobs, "failed", error=error)

    async def _settle(
        self,
        user_id: str,
        token: uuid.UUID,
        jobs: Sequence[ClaimedJob],
        state: str,
        *,
        error: str | None = None,
        usage: _Usage | None = None,
        outcome: dict[str, list[str]] | None = None,
    ) -> BatchResult:
        """End the claim without storing memories: done (nothing to do), failed, or retry."""
        used = usage.used if usage else 0
        attempts = max(j.attempts for j in jobs)
        async with user_session(self.sessionmaker, user_id) as session, session.begin():
            repo = ExtractionRepository(session)
            states = await repo.settle(
                user_id,
                token,
                [j.id for j in jobs],
                split_tokens(used, len(jobs)),
                state=state,
                error=error,
                delay_s=self.config.backoff(attempts),
                max_attempts=self.config.max_attempts,
                outcome=json.dumps(outcome or {}),
            )
            if usage is not None:
                await repo.settle_tokens(user_id, usage.day, usage.reserved, used)
        for new_state in states.values():
            self.metrics.jobs["retried" if new_state == "queued" else new_state] += 1
        final = "dead" if "dead" in states.values() else state
        return BatchResult(final, len(jobs), used, error=error, outcome=outcome or {})
