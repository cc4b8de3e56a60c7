"""The query service's memo of users' sizes (app/services/query/sizes.py): pure, a fake clock."""

from __future__ import annotations

import pytest

from app.repositories.retrieval import SearchSize
from app.services.query.sizes import SearchSizes


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_size_is_remembered_for_ttl_seconds() -> None:
    clock = Clock()
    sizes = SearchSizes(ttl_s=10.0, clock=clock)
    assert sizes.get("ann", 11) is None
    sizes.put("ann", 11, SearchSize(3, 8, True))
    clock.now += 9.9
    assert sizes.get("ann", 11) == SearchSize(3, 8, True)
    clock.now += 0.1
    assert sizes.get("ann", 11) is None
    assert sizes.get("ann", 11) is None  # an expired entry is dropped, not brought back


def test_the_passage_cap_and_the_user_are_both_part_of_the_key() -> None:
    sizes = SearchSizes(ttl_s=10.0, clock=Clock())
    sizes.put("ann", 11, SearchSize(3, 8))
    assert sizes.get("ann", 0) is None  # counted without passages: another question
    assert sizes.get("bob", 11) is None
    assert sizes.get("ann", 11) == SearchSize(3, 8)


def test_the_most_recently_stored_users_are_kept() -> None:
    sizes = SearchSizes(ttl_s=10.0, max_users=2, clock=Clock())
    sizes.put("a", 0, SearchSize(1, 0))
    sizes.put("b", 0, SearchSize(2, 0))
    sizes.put("a", 0, SearchSize(5, 0))  # stored again: the newest
    sizes.put("c", 0, SearchSize(3, 0))
    assert sizes.get("b", 0) is None
    assert sizes.get("a", 0) == SearchSize(5, 0)
    assert sizes.get("c", 0) == SearchSize(3, 0)


def test_ttl_zero_remembers_nothing() -> None:
    sizes = SearchSizes(ttl_s=0.0, clock=Clock())
    sizes.put("ann", 0, SearchSize(3, 0))
    assert sizes.get("ann", 0) is None


def test_max_users_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_users"):
        SearchSizes(max_users=0)
