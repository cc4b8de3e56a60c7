"""Fair use of the embedder: interactive work never queues behind bulk work.

Two priority classes share a fixed number of inference slots:
- INTERACTIVE (a query's embedding, a single append): may take any free slot, first in line.
- BULK (messages:bulk, seeding, re-embedding): cut into chunks of a few texts; bulk work may
  hold at most `bulk_slots` slots, so with `slots > bulk_slots` one slot is always left for
  interactive work. After each chunk a bulk request goes to the back of the bulk line, so
  concurrent bulk requests take turns chunk by chunk (none holds the embedder for more than
  one chunk while another waits).
An interactive request with more than `interactive_max` texts is scheduled as bulk (the
per-request cap: a caller cannot buy priority for a large batch by calling it interactive).
Interactive requests that wait for a slot at the same moment share one call to the embedder
(up to `batch_max` texts). With the float graph (`all-MiniLM-L6-v2-onnx-int8`) that is one
inference: about 7 ms of CPU for one short query and about 4 ms per query in a batch of 4. The
default int8-arithmetic graph embeds one text per inference (about 2 ms for a short query), so
there the shared call saves only the per-call overhead (docs/performance.md).
The local model runs bulk chunks on a thread with a raised nice value, so on a busy CPU the
operating system also serves queries (and Postgres) first.

A chunk runs to completion once started (inference cannot be interrupted): a caller that is
cancelled (a query timing out) returns at once, and its slot is released when the chunk ends.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from app.adapters.embedder import Embedder, InProcessEmbedder, Vectors


class Priority(IntEnum):
    INTERACTIVE = 0
    BULK = 1


# Local model (measured on a 2-core EPYC, int8 MiniLM, 1 thread per inference, 256-token
# texts): ~170-190 ms per text in chunks of 1-4 texts and 230-270 ms per text in chunks of
# 8-32, so small chunks cost no throughput. Two slots: one for bulk, one kept for interactive.
LOCAL_SLOTS, LOCAL_BULK_SLOTS, LOCAL_CHUNK = 2, 1, 4
# Remote APIs: requests wait on the network, not on our CPU; batch more, run more at once.
REMOTE_SLOTS, REMOTE_BULK_SLOTS, REMOTE_CHUNK = 8, 4, 64
INTERACTIVE_MAX = 4
# Texts of waiting interactive requests run as one inference, at most this many.
INTERACTIVE_BATCH = 16


@dataclass(eq=False)
class _Waiter:
    """An interactive request waiting for the next shared inference."""

    texts: list[str]
    result: asyncio.Future[Vectors]


class EmbedScheduler:
    """Runs embedding requests chunk by chunk over a fixed number of slots, by priority."""

    def __init__(
        self,
        embed: Callable[[list[str]], Awaitable[Vectors]],
        dimension: int,
        *,
        embed_bulk: Callable[[list[str]], Awaitable[Vectors]] | None = None,
        slots: int = LOCAL_SLOTS,
        bulk_slots: int = LOCAL_BULK_SLOTS,
        chunk: int = LOCAL_CHUNK,
        interactive_max: int = INTERACTIVE_MAX,
        batch_max: int = INTERACTIVE_BATCH,
    ) -> None:
        if not 1 <= bulk_slots <= slots or chunk < 1 or not 1 <= interactive_max <= batch_max:
            raise ValueError(
                "need 1 <= bulk_slots <= slots, chunk >= 1, 1 <= interactive_max <= batch_max"
            )
        self._embed = embed
        self._embed_bulk = embed_bulk or embed
        self.dimension = dimension
        self.slots, self.bulk_slots = slots, bulk_slots
        self.chunk, self.interactive_max, self.batch_max = chunk, interactive_max, batch_max
        self._free = slots
        # Interactive requests waiting for the next shared inference, and whether a runner is
        # already waiting for a slot on their behalf (the task is kept: the loop holds weakly).
        self._batch: deque[_Waiter] = deque()
        self._runner: asyncio.Task[None] | None = None
        self._bulk_running = 0
        self._waiting: dict[Priority, deque[asyncio.Future[None]]] = {
            Priority.INTERACTIVE: deque(),
            Priority.BULK: deque(),
        }

    @classmethod
    def for_embedder(cls, embedder: Embedder) -> EmbedScheduler:
        if isinstance(embedder, InProcessEmbedder):
            slots, bulk_slots, chunk = LOCAL_SLOTS, LOCAL_BULK_SLOTS, LOCAL_CHUNK
            # Bulk chunks on a low-priority thread: they also yield the CPU to queries.
            embed_bulk = embedder.embed_background
        else:
            slots, bulk_slots, chunk = REMOTE_SLOTS, REMOTE_BULK_SLOTS, REMOTE_CHUNK
            embed_bulk = None
        return cls(
            embedder.embed,  # type: ignore[arg-type]
            embedder.dimension,
            embed_bulk=embed_bulk,  # type: ignore[arg-type]
            slots=slots,
            bulk_slots=bulk_slots,
            chunk=chunk,
        )

    # -- public ------------------------------------------------------------------------------

    def effective_priority(self, count: int, priority: Priority) -> Priority:
        """Interactive only for small requests (the per-request cap)."""
        if priority is Priority.INTERACTIVE and count > self.interactive_max:
            return Priority.BULK
        return priority

    async def embed(self, texts: Sequence[str], priority: Priority) -> Vectors:
        """Vectors for `texts`, in order; bulk requests run chunk by chunk, taking turns."""
        result = np.empty((len(texts), self.dimension), dtype=np.float32)
        if not texts:
            return result
        priority = self.effective_priority(len(texts), priority)
        size = self.chunk if priority is Priority.BULK else self.interactive_max
        # Similar lengths in one chunk keep the padding (wasted compute) small.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), size):
            idx = order[start : start + size]
            result[idx] = await self._run_chunk([texts[i] for i in idx], priority)
        return result

    @property
    def busy(self) -> int:
        """Slots in use (for tests and metrics)."""
        return self.slots - self._free

    # -- slots -------------------------------------------------------------------------------

    async def _run_chunk(self, chunk: list[str], priority: Priority) -> Vectors:
        if priority is Priority.INTERACTIVE:
            return await self._run_shared(chunk)
        await self._acquire(priority)
        embed = self._embed_bulk if priority is Priority.BULK else self._embed
        task = asyncio.ensure_future(embed(chunk))

        def finished(done: asyncio.Future[Vectors]) -> None:
            self._release(priority)
            if not done.cancelled():
                done.exception()  # retrieved here too, in case the caller has gone

        task.add_done_callback(finished)
        # Shielded: a cancelled caller leaves at once; the slot frees when the chunk ends.
        vectors = await asyncio.shield(task)
        if vectors.shape != (len(chunk), self.dimension):
            raise ValueError(f"embedder returned {vectors.shape} for {len(chunk)} texts")
        return vectors

    async def _run_shared(self, chunk: list[str]) -> Vectors:
        """Join the next interactive inference; a caller cancelled before it starts leaves it."""
        waiter = _Waiter(chunk, asyncio.get_running_loop().create_future())
        self._batch.append(waiter)
        if self._runner is None:
            self._runner = asyncio.ensure_future(self._run_batch())
        try:
            # Shielded: the inference is shared, a cancelled caller only stops waiting for it.
            return await asyncio.shield(waiter.result)
        except asyncio.CancelledError:
            if waiter in self._batch:
                self._batch.remove(waiter)
            raise

    async def _run_batch(self) -> None:
        """Wait for a slot, then embed the texts of every request waiting by then (up to
        batch_max) in one call and hand each request its rows."""
        try:
            await self._acquire(Priority.INTERACTIVE)
        finally:
            self._runner = None
        batch: list[_Waiter] = []
        size = 0
        while self._batch and size + len(self._batch[0].texts) <= self.batch_max:
            waiter = self._batch.popleft()
            batch.append(waiter)
            size += len(waiter.texts)
        if self._batch:  # more than one inference's worth: the rest waits for the next slot
            self._runner = asyncio.ensure_future(self._run_batch())
        try:
            if batch:
                await self._embed_shared(batch, size)
        finally:
            self._release(Priority.INTERACTIVE)

    async def _embed_shared(self, batch: list[_Waiter], size: int) -> None:
        try:
            vectors = await self._embed([t for w in batch for t in w.texts])
            if vectors.shape != (size, self.dimension):
                raise ValueError(f"embedder returned {vectors.shape} for {size} texts")
        except Exception as exc:
            for w in batch:
                w.result.set_exception(exc)
                w.result.exception()  # retrieved here too, in case the caller has gone
            return
        start = 0
        for w in batch:
            w.result.set_result(vectors[start : start + len(w.texts)])
            start += len(w.texts)

    async def _acquire(self, priority: Priority) -> None:
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting[priority].append(granted)
        self._dispatch()
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self._release(priority)  # granted, but the caller went away before using it
            raise

    def _release(self, priority: Priority) -> None:
        self._free += 1
        if priority is Priority.BULK:
            self._bulk_running -= 1
        self._dispatch()

    def _dispatch(self) -> None:
        """Hand free slots to waiters: interactive first, bulk within its share."""
        while self._free > 0:
            waiting = self._waiting[Priority.INTERACTIVE]
            priority = Priority.INTERACTIVE
            if not waiting:
                if self._bulk_running >= self.bulk_slots:
                    return
                waiting, priority = self._waiting[Priority.BULK], Priority.BULK
            if not waiting:
                return
            granted = waiting.popleft()
            if granted.done():  # its caller was cancelled while waiting
                continue
            self._free -= 1
            if priority is Priority.BULK:
                self._bulk_running += 1
            granted.set_result(None)
