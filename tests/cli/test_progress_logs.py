"""Log lines during a long command print above the progress bar instead of splitting it."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest
from tqdm import tqdm

from app.cli.common import logs_above_bars
from app.observability import configure_logging


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    """The pgrecall log handler, writing to a buffer the bar also draws on."""
    configure_logging("INFO", "text")
    (handler,) = [h for h in logging.getLogger().handlers if getattr(h, "_pgrecall", False)]
    assert isinstance(handler, logging.StreamHandler)
    buffer = io.StringIO()
    previous = handler.setStream(buffer)
    try:
        yield buffer
    finally:
        handler.setStream(previous)


def _segments_with(buffer: io.StringIO, text: str) -> list[str]:
    # What a terminal shows on one line is what follows the last carriage return.
    return [s for line in buffer.getvalue().split("\n") for s in line.split("\r") if text in s]


def test_a_log_line_during_a_bar_starts_its_own_line(stream: io.StringIO) -> None:
    with logs_above_bars(), tqdm(total=10, file=stream, ascii=True) as bar:
        bar.update(3)
        logging.getLogger("app.test").info("batch done")
        bar.update(3)
    (segment,) = _segments_with(stream, "batch done")
    assert "INFO app.test" in segment and "/10 [" not in segment
    assert segment.index("INFO") < 30  # the timestamp, then the level: nothing of the bar


def test_without_it_the_bar_is_split(stream: io.StringIO) -> None:
    """The failure the redirect prevents (so the test above can fail)."""
    with tqdm(total=10, file=stream, ascii=True) as bar:
        bar.update(3)
        logging.getLogger("app.test").info("batch done")
    (segment,) = _segments_with(stream, "batch done")
    assert "/10 [" in segment


def test_handlers_are_restored(stream: io.StringIO) -> None:
    before = list(logging.getLogger().handlers)
    with logs_above_bars():
        assert logging.getLogger().handlers != before
    assert logging.getLogger().handlers == before
