"""The MCP client configurations in docs/agents.md work as written.

Each JSON block with `mcpServers` is read from the doc and used as a client would: the stdio
ones start their `command` by name, found on a PATH that holds only what `make install-cli`
put there (and the system's directories), with the doc's `args` and `env` names; the HTTP one
connects to its `url` with its `headers`. The only changes are the doc's placeholders (the key,
the data dir, the database and Redis URLs, the host and port), replaced by this test's values;
the test fails if the doc's placeholders change, so a new one must be handled here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db import create_engine, create_sessionmaker
from app.embedded import EmbeddedPostgres
from app.services.api_keys import ApiKeyService
from tests.redis_server import RedisServer
from tests.served import ROOT, Served, serving

DOC = ROOT / "docs" / "agents.md"
KEY = "pgr_..."
PLACEHOLDERS = {
    "PGRECALL_MCP_KEY": KEY,
    "PGRECALL_DATA_DIR": "/home/you/pgrecall/.data",
    "PGRECALL_DATABASE_URL": "postgresql://pgrecall@localhost:5432/pgrecall",
    "PGRECALL_REDIS_URL": "redis://localhost:6379/0",
}
DOC_BASE = "http://127.0.0.1:8000"


def configs() -> list[dict[str, Any]]:
    """Every server entry of every ```json block with mcpServers in docs/agents.md."""
    blocks = re.findall(r"```json\n(.*?)```", DOC.read_text(), flags=re.S)
    found = [json.loads(b)["mcpServers"]["pgrecall"] for b in blocks if "mcpServers" in b]
    return found


def stdio_configs() -> list[dict[str, Any]]:
    return [c for c in configs() if "command" in c]


def test_the_doc_has_the_three_configurations() -> None:
    stdio = stdio_configs()
    assert [sorted(c["env"]) for c in stdio] == [
        ["PGRECALL_DATA_DIR", "PGRECALL_MCP_KEY"],
        ["PGRECALL_DATABASE_URL", "PGRECALL_MCP_KEY", "PGRECALL_REDIS_URL"],
    ]
    for config in stdio:
        assert config["command"] == "pgrecall" and config["args"] == ["mcp"]
        for name, value in config["env"].items():
            assert value == PLACEHOLDERS[name], f"new placeholder {name}={value}: handle it here"
    (http,) = [c for c in configs() if "url" in c]
    assert http == {"url": f"{DOC_BASE}/mcp", "headers": {"Authorization": f"Bearer {KEY}"}}


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    with serving("pgr-docs-mcp-") as server:
        yield server


@pytest.fixture(scope="module")
def on_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`make install-cli` into a fresh BINDIR; the directory a client's PATH would hold."""
    bindir = tmp_path_factory.mktemp("bin")
    make = shutil.which("make")
    assert make is not None
    done = subprocess.run(
        [make, "-s", "install-cli", f"BINDIR={bindir}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (bindir / "pgrecall").exists()
    return bindir


def create_key_with_cli(data_dir: Path, user: str) -> str:
    """The token `pgrecall keys create` prints, on the served app's embedded database."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGRECALL_")}
    env["PGRECALL_DATA_DIR"] = str(data_dir)
    done = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "pgrecall"), "keys", "create", "--user", user],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


async def exercise(client: Client) -> None:
    names = {t.name for t in (await client.list_tools()).tools}
    assert {"save_memory", "query_memory", "forget_memory"} <= names, names
    saved = await client.call_tool(
        "save_memory", {"content": "I brew my own kombucha", "type": "fact"}
    )
    assert not saved.is_error, saved.content
    found = await client.call_tool("query_memory", {"query": "what do I brew?"})
    assert not found.is_error, found.content
    assert "kombucha" in json.dumps(found.structured_content)


def stdio_params(config: dict[str, Any], values: dict[str, str]) -> StdioServerParameters:
    env = {name: values[name] for name in config["env"]}  # the doc's names, the test's values
    env["PGRECALL_LOG_LEVEL"] = "WARNING"
    return StdioServerParameters(command=config["command"], args=config["args"], env=env)


@pytest.fixture
def client_path(on_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The PATH an MCP client passes on: the install-cli directory and the system's, not
    .venv/bin."""
    monkeypatch.setenv("PATH", f"{on_path}:/usr/local/bin:/usr/bin:/bin")


async def test_stdio_config_with_the_embedded_database(served: Served, client_path: None) -> None:
    data_dir = served.log.parent / "data"
    token = create_key_with_cli(data_dir, f"docs-{uuid.uuid4()}")
    (config, _) = stdio_configs()
    values = {"PGRECALL_MCP_KEY": token, "PGRECALL_DATA_DIR": str(data_dir)}
    async with Client(stdio_params(config, values)) as client:
        await exercise(client)


@pytest.fixture
async def sessions(pg: EmbeddedPostgres) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    engine = create_engine(pg.url, pool_size=2)
    try:
        yield create_sessionmaker(engine)
    finally:
        await engine.dispose()


async def test_stdio_config_with_own_postgres_and_redis(
    pg: EmbeddedPostgres,
    redis_srv: RedisServer,
    sessions: async_sessionmaker[AsyncSession],
    client_path: None,
) -> None:
    async with sessions() as session, session.begin():
        created = await ApiKeyService(session).create(f"docs-{uuid.uuid4()}", "write")
    (_, config) = stdio_configs()
    values = {
        "PGRECALL_MCP_KEY": created.token,
        "PGRECALL_DATABASE_URL": pg.url,
        "PGRECALL_REDIS_URL": redis_srv.url,
    }
    async with Client(stdio_params(config, values)) as client:
        await exercise(client)


@asynccontextmanager
async def http_from(config: dict[str, Any], base: str, token: str) -> AsyncIterator[Client]:
    url = config["url"].replace(DOC_BASE, base)
    headers = {k: v.replace(KEY, token) for k, v in config["headers"].items()}
    async with (
        httpx.AsyncClient(headers=headers, timeout=30) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


async def test_http_config_against_the_served_app(served: Served) -> None:
    token = create_key_with_cli(served.log.parent / "data", f"docs-{uuid.uuid4()}")
    (config,) = [c for c in configs() if "url" in c]
    async with http_from(config, served.base, token) as client:
        await exercise(client)
