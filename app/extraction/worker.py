"""Worker tasks: claim a batch (FOR UPDATE SKIP LOCKED), process it, repeat; stop gracefully.

They run inside `pgrecall serve` (started by the app's lifespan when PGRECALL_EXTRACTION=llm)
or alone in `pgrecall worker`; any number of processes may run them against one database. A
stop lets the batch in hand finish (up to a grace period); a batch cut short stays `running`
until its lease runs out and is then claimed again - its memories were never committed, so
nothing is stored twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db import job_queue_sessions
from app.extraction.service import BatchResult, ExtractionConfig, ExtractionProcessor
from app.extraction.summary import ConversationSummarizer
from app.repositories.extraction import ExtractionRepository

log = logging.getLogger(__name__)


class ExtractionWorker:
    def __init__(
        self,
        sessionmaker: async_sessionmaker[AsyncSession],
        processor: ExtractionProcessor,
        config: ExtractionConfig,
        summarizer: ConversationSummarizer | None = None,
    ) -> None:
        # Claims span users (a worker serves everyone) but see only job rows; the work on a
        # user's rows runs in that user's scope (ExtractionProcessor).
        self.claims = job_queue_sessions(sessionmaker)
        self.processor = processor
        self.config = config
        # Keeps each conversation's rolling summary after its batches (None: no summaries).
        self.summarizer = summarizer
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def run_once(self) -> BatchResult | None:
        """Claim and process one batch; None when no job is due."""
        token = uuid.uuid4()
        async with self.claims() as session, session.begin():
            jobs = await ExtractionRepository(session).claim(
                token, batch=self.config.batch_messages, lease_s=self.config.lease_s
            )
        if not jobs:
            return None
        result = await self.processor.process(token, jobs)
        if result.state == "done" and self.summarizer is not None:
            try:
                await self.summarizer.update(jobs[0].user_id, jobs[0].conversation_id)
            except (SQLAlchemyError, OSError) as exc:  # the batch stands; the next one retries
                log.warning("conversation summary not updated: %s", type(exc).__name__)
        return result

    async def drain(self, *, limit: int = 1000) -> list[BatchResult]:
        """Process batches until none is due (tests, and `pgrecall worker --once`)."""
        results = []
        while len(results) < limit:
            result = await self.run_once()
            if result is None:
                break
            results.append(result)
        return results

    async def _loop(self, number: int) -> None:
        while not self._stop.is_set():
            try:
                result = await self.run_once()
            except (SQLAlchemyError, OSError) as exc:  # database away: wait, then try again
                log.warning("extraction worker %d: %s", number, type(exc).__name__)
                result = None
            except Exception:  # a bug must not end the worker silently, nor spin
                log.exception("extraction worker %d: batch failed", number)
                result = None
            if result is None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), self.config.poll_interval_s)

    def start(self) -> None:
        """Start `config.workers` tasks on the running loop."""
        self._stop.clear()
        self._tasks = [
            asyncio.create_task(self._loop(n), name=f"extraction-worker-{n}")
            for n in range(self.config.workers)
        ]
        log.info("extraction: %d worker task(s) started", len(self._tasks))

    async def stop(self, grace_s: float) -> None:
        """Ask the tasks to stop after their current batch; cancel them after `grace_s`."""
        self._stop.set()
        if not self._tasks:
            return
        _, pending = await asyncio.wait(self._tasks, timeout=grace_s)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)
            log.warning(
                "extraction: %d batch(es) cut short; their jobs retry after the lease", len(pending)
            )
        self._tasks = []

    async def wait(self) -> None:
        """Until the tasks end (after stop())."""
        if self._tasks:
            await asyncio.wait(self._tasks)
