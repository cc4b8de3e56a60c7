"""The last search size of each user, remembered for a few seconds by the query service.

A query asks Postgres for its user's size first (RetrievalRepository.search_size): it picks
exact or ANN search, whether passages re-score, and the plans of the statements after it. An
agent asks several questions in a row, and a size a few seconds old picks the same path: a
user that grows past a threshold meanwhile is searched the old way for at most `ttl_s`, which
is slower for that while, never wrong (every path returns the user's own best items). A
remembered size saves that statement's round trip: about 0.6 ms of CPU per query for a small
user, 1.2 ms for a 5,520-turn user whose passages are counted (docs/performance.md).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from app.repositories.retrieval import SearchSize

DEFAULT_TTL_S = 10.0
DEFAULT_MAX_USERS = 10_000


class SearchSizes:
    """user (and the passage cap it was counted with) -> SearchSize, for `ttl_s` seconds;
    the `max_users` most recently stored are kept. One per process, shared by its requests."""

    def __init__(
        self,
        ttl_s: float = DEFAULT_TTL_S,
        max_users: int = DEFAULT_MAX_USERS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_users < 1:
            raise ValueError("max_users must be at least 1")
        self.ttl_s = ttl_s
        self.max_users = max_users
        self._clock = clock
        self._sizes: OrderedDict[tuple[str, int], tuple[float, SearchSize]] = OrderedDict()

    def get(self, user_id: str, up_to: int) -> SearchSize | None:
        """The size stored for this user and cap less than `ttl_s` ago, else None."""
        if self.ttl_s <= 0:
            return None
        entry = self._sizes.get((user_id, up_to))
        if entry is None:
            return None
        stored_at, size = entry
        if self._clock() - stored_at >= self.ttl_s:
            del self._sizes[(user_id, up_to)]
            return None
        return size

    def put(self, user_id: str, up_to: int, size: SearchSize) -> None:
        if self.ttl_s <= 0:
            return
        key = (user_id, up_to)
        self._sizes[key] = (self._clock(), size)
        self._sizes.move_to_end(key)
        while len(self._sizes) > self.max_users:
            self._sizes.popitem(last=False)
