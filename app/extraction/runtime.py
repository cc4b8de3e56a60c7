"""Extraction built from settings: the model client, the worker tasks and their counters."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.config import ExtractionMode, Settings
from app.extraction.llm import ExtractionLLM
from app.extraction.metrics import ExtractionMetrics
from app.extraction.service import ExtractionConfig, ExtractionProcessor
from app.extraction.summary import ConversationSummarizer
from app.extraction.worker import ExtractionWorker
from app.services.embedding import EmbeddingService


def extraction_config(settings: Settings) -> ExtractionConfig:
    return ExtractionConfig(
        batch_messages=settings.extraction_batch_messages,
        candidates=settings.extraction_candidates,
        max_attempts=settings.extraction_max_attempts,
        backoff_s=settings.extraction_backoff_s,
        backoff_max_s=settings.extraction_backoff_max_s,
        job_token_cap=settings.extraction_job_token_cap,
        user_daily_token_cap=settings.extraction_user_daily_token_cap,
        lease_s=settings.extraction_lease_s,
        poll_interval_s=settings.extraction_poll_interval_s,
        workers=settings.extraction_workers,
    )


@dataclass
class Extraction:
    llm: ExtractionLLM
    metrics: ExtractionMetrics
    worker: ExtractionWorker
    # How long a stop waits for the batches in hand: one model call and the store after it.
    grace_s: float

    async def aclose(self) -> None:
        await self.worker.stop(self.grace_s)
        await self.llm.aclose()


def build_extraction(
    settings: Settings,
    sessionmaker: async_sessionmaker[AsyncSession],
    embeddings: EmbeddingService,
) -> Extraction | None:
    """The extraction runtime, or None when PGRECALL_EXTRACTION is off. Not started."""
    if settings.extraction != ExtractionMode.LLM:
        return None
    key = settings.extraction_api_key
    llm = ExtractionLLM(
        model=settings.extraction_model,
        base_url=settings.extraction_base_url,
        api_key=key.get_secret_value() if key else None,
        timeout_s=settings.extraction_timeout_s,
        max_output_tokens=settings.extraction_max_output_tokens,
    )
    metrics = ExtractionMetrics()
    config = extraction_config(settings)
    processor = ExtractionProcessor(sessionmaker, embeddings, llm, config, metrics)
    summarizer = (
        ConversationSummarizer(
            sessionmaker,
            llm,
            metrics,
            max_tokens=settings.extraction_summary_tokens,
            user_daily_token_cap=settings.extraction_user_daily_token_cap,
        )
        if settings.extraction_summary_tokens
        else None
    )
    worker = ExtractionWorker(sessionmaker, processor, config, summarizer)
    return Extraction(llm, metrics, worker, grace_s=settings.extraction_timeout_s + 5)
