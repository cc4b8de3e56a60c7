"""An AsyncClient on the real app (embedded Postgres, real Redis) over the ASGI transport."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from pgrecall.client import AsyncClient


@pytest.fixture
def make_pgrecall(make_client: Callable[..., Any]) -> Callable[..., Any]:
    """`async with make_pgrecall(user_id, **client_kwargs) as pgr:` on a fresh app."""

    @asynccontextmanager
    async def factory(user_id: str, **kwargs: Any) -> AsyncIterator[AsyncClient]:
        settings = kwargs.pop("settings", {})
        async with make_client(**settings) as (http, _):
            yield AsyncClient("http://test", user_id=user_id, http=http, **kwargs)

    return factory
