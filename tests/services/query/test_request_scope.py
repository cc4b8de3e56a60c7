"""A query's memory scope has one form for the user's whole memory (pure; no server)."""

from __future__ import annotations

from dataclasses import replace

from app.domain import MemoryScope
from app.retrieval.presets import get_preset
from app.services.query.model import QueryRequest, _cache_key


def test_the_whole_memory_is_one_request_and_one_cache_key() -> None:
    """Given as None or as the user's whole-memory scope (as agent_memory's turn search does),
    the request is the same and so is its cached answer; an agent's scope is another key."""
    plain = QueryRequest(user_id="ana", query="Where is my passport?", limit=5, min_score=0.0)
    given = replace(plain, memory=MemoryScope("ana"))
    assert given.memory is None and given == plain
    preset = get_preset("default")
    assert _cache_key(given, preset, 500) == _cache_key(plain, preset, 500)
    agent = replace(plain, memory=MemoryScope("ana", agent_id="support"))
    assert agent.memory is not None
    assert _cache_key(agent, preset, 500) != _cache_key(plain, preset, 500)
    # An agent's answer is cached; the same agent reading a space must not be served it.
    shared = replace(plain, memory=MemoryScope("ana", agent_id="support", spaces=("team",)))
    assert _cache_key(shared, preset, 500) != _cache_key(agent, preset, 500)
