"""`pgrecall worker`: extraction worker tasks without the HTTP service.

Runs beside `pgrecall serve` (or instead of the tasks inside it: PGRECALL_EXTRACTION_WORKERS=0
there) against the same database; any number of workers may run at once (jobs are claimed
with FOR UPDATE SKIP LOCKED). SIGINT/SIGTERM stop it after the batches in hand.
"""

from __future__ import annotations

import asyncio
import signal
from typing import Annotated

import typer

from app.cli.common import Runtime, fail, run, settings_or_exit
from app.config import ExtractionMode


def worker(
    once: Annotated[bool, typer.Option("--once", help="process every due job, then exit")] = False,
    workers: Annotated[
        int | None, typer.Option(min=1, max=64, help="overrides PGRECALL_EXTRACTION_WORKERS")
    ] = None,
) -> None:
    """Run LLM extraction jobs (needs PGRECALL_EXTRACTION=llm)."""
    # Lazy: the extraction pipeline imports the OpenAI SDK (about 1 s); only this command runs it.
    from app.extraction.runtime import build_extraction

    async def work(rt: Runtime) -> int:
        assert rt.embeddings is not None
        settings = rt.settings
        if workers is not None:
            settings = settings.model_copy(update={"extraction_workers": workers})
        extraction = build_extraction(settings, rt.sessionmaker, rt.embeddings)
        assert extraction is not None  # checked below, before the database starts
        try:
            if once:
                return len(await extraction.worker.drain())
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            extraction.worker.start()
            typer.echo(f"pgrecall worker: {settings.extraction_workers} task(s); Ctrl-C stops")
            await stop.wait()
            return 0
        finally:
            await extraction.aclose()

    if settings_or_exit().extraction != ExtractionMode.LLM:
        raise fail("PGRECALL_EXTRACTION is off: set it to llm to run extraction workers", 2)
    batches = run(work, embedder=True)
    if once:
        typer.echo(f"processed {batches} batch(es)")
