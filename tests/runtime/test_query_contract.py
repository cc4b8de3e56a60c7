"""One query contract: a filter is a field of QueryFilters (app/schemas/query.py) and of the
service's QueryRequest, and nothing else. A fresh interpreter adds one to both before the doors
are imported; the tool catalog, the OpenAPI document, the chat proxy's `memory` object and both
clients then carry it to the service's request without a change anywhere else."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import asyncio, dataclasses, json

    import httpx

    # The diff a new filter is: one field in the filters model ...
    import app.schemas.query as query_schemas

    class Extended(query_schemas.QueryFilters):
        min_importance: float | None = None

    query_schemas.QueryFilters = Extended

    # ... and one in the service's request (a test-local subclass stands for that edit).
    import app.runtime.query as runtime_query
    from app.services.query import QueryRequest

    @dataclasses.dataclass(frozen=True)
    class ExtendedRequest(QueryRequest):
        min_importance: float | None = None

    runtime_query.QueryRequest = ExtendedRequest

    from app.config import Settings
    from app.main import create_app
    from app.proxy.schemas import ChatRequest
    from app.schemas.memory import MemoryQueryRequest, QueryMemoryArgs
    from app.tools import get_tool
    from pgrecall.client import AsyncClient, Client

    seen = {}
    catalog = get_tool("query_memory").parameters["properties"]
    seen["catalog"] = catalog["min_importance"]["type"]
    document = create_app(Settings(embedded_database=False)).openapi()
    seen["openapi"] = sorted(document["components"]["schemas"]["MemoryQueryRequest"]["properties"])
    proxy = ChatRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}],
         "memory": {"min_importance": 0.25}}
    )
    config = runtime_query.query_config(Settings(embedded_database=False))
    seen["proxy"] = runtime_query.query_request(config, "u", "hi", proxy.memory).min_importance

    EMPTY = {"memories": [], "formatted": "",
             "metadata": {"count": 0, "truncated": False, "token_count": 0}}
    LISTING = {"items": [], "total_count": 0, "query_embedding_ms": 0, "retrieval_ms": 0,
               "token_count": 0, "truncated": False}

    def service(request):
        body = json.loads(request.content)
        if request.url.path == "/v1/tools/query_memory":
            args = QueryMemoryArgs.model_validate(body)
            answer = EMPTY
        else:
            args = MemoryQueryRequest.model_validate(body)
            answer = LISTING
        made = runtime_query.query_request(config, "u", args.query, args)
        seen.setdefault("requests", []).append([request.url.path, made.min_importance])
        return httpx.Response(200, json=answer)

    http = httpx.Client(transport=httpx.MockTransport(service))
    sync = Client("http://x", user_id="u", http=http)
    sync.query_memory("hi", min_importance=0.5)
    sync.memory_query("hi", min_importance=0.75)

    async def asynchronous():
        http = httpx.AsyncClient(transport=httpx.MockTransport(service))
        async with AsyncClient("http://x", user_id="u", http=http) as client:
            await client.query_memory("hi", min_importance=0.5)
            await client.memory_query("hi", min_importance=0.75)

    asyncio.run(asynchronous())
    print(json.dumps(seen))
    """
)


def test_a_new_filter_is_a_change_in_the_filters_model_and_the_service_only() -> None:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["catalog"] == "number"
    assert "min_importance" in seen["openapi"]
    assert seen["proxy"] == 0.25
    assert seen["requests"] == [
        ["/v1/tools/query_memory", 0.5],
        ["/v1/memory/query", 0.75],
    ] * 2


def test_query_config_reads_every_field_from_the_settings_of_the_same_name() -> None:
    from dataclasses import asdict

    from app.config import Settings
    from app.retrieval.presets import get_preset
    from app.runtime.query import query_config

    settings = Settings()
    config = asdict(query_config(settings))
    assert config.pop("preset") == asdict(get_preset(settings.retrieval_preset))
    assert config.pop("timeout_s") == settings.query_timeout_s
    assert config == {name: getattr(settings, name) for name in config}
