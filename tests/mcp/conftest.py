"""MCP tests: the SDK's own client against the real app (in-process ASGI or a subprocess)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import pytest
from fastapi import FastAPI
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


def http_client(app: FastAPI, token: str | None, **headers: str) -> httpx2.AsyncClient:
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return httpx2.AsyncClient(
        transport=httpx2.ASGITransport(app=app), base_url="http://test", headers=headers
    )


@pytest.fixture
def mcp_client() -> Callable[..., Any]:
    """`async with mcp_client(app, token) as client:` an initialised mcp.Client on /mcp."""

    @asynccontextmanager
    async def connect(
        app: FastAPI, token: str, mode: str = "auto", **headers: str
    ) -> AsyncIterator[Client]:
        async with http_client(app, token, **headers) as http:
            transport = streamable_http_client("http://test/mcp", http_client=http)
            async with Client(transport, mode=mode) as client:
                yield client

    return connect
