"""One deadline per outbound call: connect, headers, every chunk of the body, in total.

httpx's (and so the openai SDK's) timeouts bound each network operation alone: an upstream that
answers its headers and then one byte every 2 s never trips a 10 s read timeout, and held a
chat proxy request 90 s and an extraction attempt 120 s (issue 44). A `Deadline` is one point in
time that every wait of the call ends by; past it the wait raises `TimeoutError`, which the
callers map to their own timeout errors.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from typing import TypeVar

T = TypeVar("T")


class Deadline:
    """`seconds` from now (on the running loop's clock)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.at = asyncio.get_running_loop().time() + seconds

    @property
    def remaining(self) -> float:
        return max(0.0, self.at - asyncio.get_running_loop().time())

    async def wait(self, awaitable: Awaitable[T]) -> T:
        """The awaitable's result, or TimeoutError at the deadline (the awaitable cancelled)."""
        async with asyncio.timeout_at(self.at):
            return await awaitable

    async def chunks(self, iterator: AsyncIterator[T]) -> AsyncIterator[T]:
        """The iterator's items, each awaited until the deadline at most.

        Only the wait for the next item is under the timeout, never the consumer's work between
        items: a timeout scope spanning a `yield` would cancel whatever the consumer awaits."""
        while True:
            try:
                async with asyncio.timeout_at(self.at):
                    item = await anext(iterator)
            except StopAsyncIteration:
                return
            yield item


async def within(seconds: float, awaitable: Awaitable[T]) -> T:
    """The awaitable's result, or TimeoutError after `seconds` in all."""
    return await Deadline(seconds).wait(awaitable)
