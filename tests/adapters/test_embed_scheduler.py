"""The embedding scheduler: interactive before bulk, bulk in turns, a cap, cancellation.

The ordering tests are pure asyncio with a gated fake embed function (which chunk runs when is
decided by the test, not by timing). The last tests use the real local model.
"""

from __future__ import annotations

import asyncio
import os
import threading
import zlib
from collections.abc import Sequence

import numpy as np
import pytest

from app.adapters.embed_scheduler import EmbedScheduler, Priority
from app.adapters.embedder import LocalEmbedder, Vectors
from app.services.embedding import EmbeddingService

DIM = 8


def _vector(text: str) -> np.ndarray:
    rng = np.random.default_rng(zlib.crc32(text.encode()))
    v = rng.standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)


class GatedEmbed:
    """Records each chunk it is given; a chunk finishes only when the test opens its gate."""

    def __init__(self, gated: bool = True) -> None:
        self.calls: list[list[str]] = []
        self.gated = gated
        self._gates: list[asyncio.Event] = []
        self.started = asyncio.Event()
        self.fail_on: str | None = None

    async def __call__(self, texts: list[str]) -> Vectors:
        self.calls.append(list(texts))
        gate = asyncio.Event()
        self._gates.append(gate)
        self.started.set()
        if self.gated:
            await gate.wait()
        if self.fail_on is not None and self.fail_on in texts:
            raise RuntimeError("embedder failed")
        return np.stack([_vector(t) for t in texts])

    async def open_next(self) -> None:
        """Let the oldest running chunk finish, then let the loop settle."""
        for gate in self._gates:
            if not gate.is_set():
                gate.set()
                break
        await _settle()

    @property
    def running(self) -> int:
        return sum(1 for gate in self._gates if not gate.is_set())


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def _texts(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i:02d}" for i in range(n)]  # equal lengths: chunks keep input order


def _scheduler(fake: GatedEmbed, **kwargs: int) -> EmbedScheduler:
    options = {"slots": 1, "bulk_slots": 1, "chunk": 4, "interactive_max": 2} | kwargs
    return EmbedScheduler(fake, DIM, **options)


async def test_interactive_waits_for_one_bulk_chunk_at_most() -> None:
    fake = GatedEmbed()
    scheduler = _scheduler(fake)
    bulk = asyncio.create_task(scheduler.embed(_texts("b", 12), Priority.BULK))
    await _settle()
    query = asyncio.create_task(scheduler.embed(["q"], Priority.INTERACTIVE))
    await _settle()
    assert fake.calls == [_texts("b", 4)]  # the query waits for the chunk in progress only
    await fake.open_next()
    assert fake.calls[-1] == ["q"]
    await fake.open_next()
    assert query.done()
    while not bulk.done():
        await fake.open_next()
    assert fake.calls == [_texts("b", 12)[0:4], ["q"], _texts("b", 12)[4:8], _texts("b", 12)[8:]]
    np.testing.assert_allclose(query.result()[0], _vector("q"))


async def test_a_slot_is_kept_for_interactive_work() -> None:
    fake = GatedEmbed()
    scheduler = _scheduler(fake, slots=2, bulk_slots=1)
    first = asyncio.create_task(scheduler.embed(_texts("a", 8), Priority.BULK))
    second = asyncio.create_task(scheduler.embed(_texts("b", 8), Priority.BULK))
    await _settle()
    assert fake.running == 1  # bulk never takes the second slot
    query = asyncio.create_task(scheduler.embed(["q"], Priority.INTERACTIVE))
    await _settle()
    assert fake.running == 2 and fake.calls[-1] == ["q"]  # runs beside the bulk chunk
    # Finish the query's chunk (the second gate) while the bulk chunk is still running.
    fake._gates[1].set()
    await _settle()
    assert query.done() and not first.done()
    while not (first.done() and second.done()):
        await fake.open_next()


async def test_bulk_requests_take_turns_chunk_by_chunk() -> None:
    fake = GatedEmbed()
    scheduler = _scheduler(fake)
    a = asyncio.create_task(scheduler.embed(_texts("a", 12), Priority.BULK))
    await _settle()
    b = asyncio.create_task(scheduler.embed(_texts("b", 8), Priority.BULK))
    await _settle()
    while not (a.done() and b.done()):
        await fake.open_next()
    assert [call[0][0] for call in fake.calls] == ["a", "b", "a", "b", "a"]


async def test_large_interactive_request_is_scheduled_as_bulk() -> None:
    fake = GatedEmbed()
    scheduler = _scheduler(fake, interactive_max=2)
    assert scheduler.effective_priority(3, Priority.INTERACTIVE) is Priority.BULK
    assert scheduler.effective_priority(2, Priority.INTERACTIVE) is Priority.INTERACTIVE
    big = asyncio.create_task(scheduler.embed(_texts("x", 6), Priority.INTERACTIVE))
    await _settle()
    small = asyncio.create_task(scheduler.embed(["q1", "q2"], Priority.INTERACTIVE))
    await _settle()
    while not (big.done() and small.done()):
        await fake.open_next()
    # The 6-text request was cut into bulk chunks of 4, and the real interactive one overtook it.
    assert fake.calls == [_texts("x", 6)[:4], ["q1", "q2"], _texts("x", 6)[4:]]


async def test_results_come_back_in_input_order() -> None:
    fake = GatedEmbed(gated=False)
    scheduler = _scheduler(fake, chunk=3)
    texts = ["a much longer text than the others", "b", "cc", "ddd dd", "e", "ffff f f", "g"]
    vectors = await scheduler.embed(texts, Priority.BULK)
    np.testing.assert_allclose(vectors, np.stack([_vector(t) for t in texts]))
    # Chunks group texts of similar length (less padding).
    assert [len(c) for c in fake.calls] == [3, 3, 1]
    assert fake.calls[0] == ["b", "e", "g"]
    empty = await scheduler.embed([], Priority.BULK)
    assert empty.shape == (0, DIM)


async def test_cancelled_waiter_is_skipped_and_running_chunk_keeps_its_slot() -> None:
    fake = GatedEmbed()
    scheduler = _scheduler(fake)
    bulk = asyncio.create_task(scheduler.embed(_texts("b", 4), Priority.BULK))
    await _settle()
    waiting = asyncio.create_task(scheduler.embed(["gone"], Priority.INTERACTIVE))
    await _settle()
    waiting.cancel()
    bulk.cancel()  # cancelled while its chunk runs: the caller leaves, the chunk goes on
    await _settle()
    assert waiting.cancelled() and bulk.cancelled()
    assert scheduler.busy == 1  # the chunk still holds the embedder
    later = asyncio.create_task(scheduler.embed(["q"], Priority.INTERACTIVE))
    await _settle()
    assert fake.calls == [_texts("b", 4)]
    await fake.open_next()  # the abandoned chunk ends; the next waiter (not "gone") runs
    assert fake.calls == [_texts("b", 4), ["q"]]
    await fake.open_next()
    assert later.done() and scheduler.busy == 0


async def test_failure_reaches_the_caller_and_frees_the_slot() -> None:
    fake = GatedEmbed(gated=False)
    fake.fail_on = "bad"
    scheduler = _scheduler(fake)
    with pytest.raises(RuntimeError, match="embedder failed"):
        await scheduler.embed(["bad"], Priority.INTERACTIVE)
    assert scheduler.busy == 0
    assert (await scheduler.embed(["fine"], Priority.INTERACTIVE)).shape == (1, DIM)


async def test_bulk_chunks_go_to_the_bulk_runner() -> None:
    interactive, bulk = GatedEmbed(gated=False), GatedEmbed(gated=False)
    scheduler = EmbedScheduler(interactive, DIM, embed_bulk=bulk, slots=2, bulk_slots=1, chunk=2)
    await scheduler.embed(["q"], Priority.INTERACTIVE)
    await scheduler.embed(_texts("b", 3), Priority.BULK)
    assert interactive.calls == [["q"]]
    assert bulk.calls == [_texts("b", 3)[:2], _texts("b", 3)[2:]]


async def test_waiting_interactive_requests_share_one_inference() -> None:
    fake = GatedEmbed()
    scheduler = _scheduler(fake, batch_max=4)
    first = asyncio.create_task(scheduler.embed(["q0"], Priority.INTERACTIVE))
    await _settle()
    assert fake.calls == [["q0"]]  # a free slot: runs at once, alone
    # While it runs, five more arrive (one of them cancelled before its turn).
    waiting = {
        name: asyncio.create_task(scheduler.embed(texts, Priority.INTERACTIVE))
        for name, texts in {
            "a": ["a"],
            "b": ["b1", "b2"],
            "gone": ["gone"],
            "c": ["c"],
            "d": ["d"],
        }.items()
    }
    await _settle()
    waiting["gone"].cancel()
    await _settle()
    await fake.open_next()
    # One inference for the next requests in line, up to batch_max texts; "d" waits for the next.
    assert fake.calls[1] == ["a", "b1", "b2", "c"]
    await fake.open_next()
    assert fake.calls[2] == ["d"]
    await fake.open_next()
    assert first.done() and all(t.done() for t in waiting.values())
    assert waiting["gone"].cancelled() and scheduler.busy == 0
    for name, task in waiting.items():
        if name != "gone":
            texts = {"a": ["a"], "b": ["b1", "b2"], "c": ["c"], "d": ["d"]}[name]
            np.testing.assert_allclose(task.result(), np.stack([_vector(t) for t in texts]))


async def test_a_shared_inference_failure_reaches_every_caller() -> None:
    fake = GatedEmbed()
    fake.fail_on = "bad"
    scheduler = _scheduler(fake)
    running = asyncio.create_task(scheduler.embed(["first"], Priority.INTERACTIVE))
    await _settle()
    shared = [
        asyncio.create_task(scheduler.embed([text], Priority.INTERACTIVE)) for text in ("ok", "bad")
    ]
    await _settle()
    await fake.open_next()
    await fake.open_next()
    assert running.done() and fake.calls[1] == ["ok", "bad"]
    for task in shared:
        with pytest.raises(RuntimeError, match="embedder failed"):
            task.result()
    assert scheduler.busy == 0


def test_bad_configuration_is_refused() -> None:
    with pytest.raises(ValueError):
        EmbedScheduler(GatedEmbed(), DIM, slots=1, bulk_slots=2)
    with pytest.raises(ValueError):
        EmbedScheduler(GatedEmbed(), DIM, interactive_max=8, batch_max=4)


# -- the real model ----------------------------------------------------------------------------


def _long_texts(n: int) -> list[str]:
    words = ("notebook", "postgres", "deadline", "coffee", "meeting", "vector", "garden", "museum")
    return [" ".join(words[(i + j) % len(words)] for j in range(700)) + f" #{i}" for i in range(n)]


def _cosines(a: np.ndarray, b: np.ndarray) -> Sequence[float]:
    return [float(x @ y) for x, y in zip(a, b, strict=True)]


async def test_real_model_query_overtakes_a_bulk_import(embedder: LocalEmbedder) -> None:
    service = EmbeddingService(embedder)  # no cache: every text reaches the model
    texts = _long_texts(24)
    bulk = asyncio.create_task(service.embed(texts, priority=Priority.BULK))
    await _settle()
    assert service.scheduler.busy == 1  # the first bulk chunk is running in its thread
    query = await service.embed(
        ["where did I leave the blue notebook?"], priority=Priority.INTERACTIVE
    )
    assert not bulk.done()  # 6 chunks of 4 long texts are far from done
    vectors = await bulk
    assert min(_cosines(vectors, embedder.embed_sync(texts))) > 0.999
    assert (
        min(_cosines(query, embedder.embed_sync(["where did I leave the blue notebook?"]))) > 0.999
    )


async def test_real_model_bulk_runs_on_a_lower_priority_thread(embedder: LocalEmbedder) -> None:
    def nice() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    service = EmbeddingService(embedder)
    await service.embed(["a bulk text"], priority=Priority.BULK)
    assert embedder._background is not None
    background_nice = embedder._background.submit(nice).result()
    assert background_nice >= min(19, nice() + 10)
