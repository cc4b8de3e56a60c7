"""Extraction built from settings: the model client, the worker tasks and their counters."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.config import ExtractionMode, Settings
from app.extraction.llm import ExtractionLLM
from app.extraction.metrics import ExtractionMetrics
from app.extraction.service import ExtractionConfig, ExtractionProcessor
from app.extraction.summary import ConversationSummarizer
from app.extraction.worker import ExtractionWorker
from app.services.embedding import EmbeddingService


def extraction_config(settings: Settings) -> ExtractionConfig:
    """Each ExtractionConfig field is the Settings field `extraction_<name>` (the defaults live
    in app/config.py)."""
    return ExtractionConfig(
        **{f.name: getattr(settings, f"extraction_{f.name}") for f in fields(ExtractionConfig)}
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
    llm = ExtractionLLM(
        **asdict(settings.extraction_endpoint),
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
