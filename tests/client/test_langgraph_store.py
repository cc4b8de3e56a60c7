"""The LangGraph store's own surface, without a service: what it tells LangGraph about TTLs and
its index (issue 41: its docstring said "No TTL support" and it had no `index_config`)."""

from __future__ import annotations

import pytest

langgraph_store = pytest.importorskip("pgrecall.langgraph_store")


def test_it_says_what_it_supports() -> None:
    doc = langgraph_store.__doc__ or ""
    assert "No TTL support" not in doc and "TTLs are supported" in doc
    store = langgraph_store.PgrecallStore("http://127.0.0.1:9")
    try:
        assert store.supports_ttl
        assert store.index_config is None
    finally:
        store.close()
    index = {"dims": 384, "embed": "pgrecall", "fields": ["content"]}
    store = langgraph_store.PgrecallStore("http://127.0.0.1:9", index=index)  # type: ignore[arg-type]
    try:
        assert store.index_config == index
    finally:
        store.close()
