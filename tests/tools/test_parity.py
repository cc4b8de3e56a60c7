"""HTTP and MCP are generated from one tool catalog (app/tools): driven by that catalog, every
tool must have the same name, description and argument schema through both doors, and answer
the same arguments the same way - the same result, or the same error class and detail.

MCP is the SDK's real client over the streamable HTTP endpoint of the app in-process; HTTP is
`GET /v1/tools` and `POST /v1/tools/<name>` on the same app, with the same per-user key.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from app.tools import TOOLS
from tests.helpers import make_key
from tests.mcp.conftest import http_client

NAMES = [t.name for t in TOOLS]
WRITES = [t.name for t in TOOLS if t.writes]
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?")


def sample(schema: dict[str, Any]) -> dict[str, Any]:
    """Valid values for a tool's required arguments, read off its published schema."""
    out: dict[str, Any] = {}
    for name in schema.get("required", []):
        prop = schema["properties"][name]
        if prop.get("format") == "uuid":
            out[name] = str(uuid.uuid4())
        elif "enum" in prop:
            out[name] = prop["enum"][0]
        else:
            assert prop["type"] == "string", (name, prop)
            out[name] = "I keep bees on my allotment"
    return out


def normalized(value: Any) -> Any:
    """Ids and times differ between two users' rows; everything else must not."""
    if isinstance(value, dict):
        return {k: normalized(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [normalized(v) for v in value]
    if isinstance(value, str):
        return _TIME.sub("<time>", _UUID.sub("<id>", value))
    return value


class Doors:
    """One call, two doors: each answer as ("ok", result) or ("error", "Class: detail")."""

    def __init__(self, http: httpx.AsyncClient, http_token: str, mcp: Client) -> None:
        self.http, self.token, self.mcp = http, http_token, mcp

    async def over_http(self, name: str, args: dict[str, Any]) -> tuple[str, Any]:
        response = await self.http.post(
            f"/v1/tools/{name}", json=args, headers={"Authorization": f"Bearer {self.token}"}
        )
        body = response.json()
        if response.status_code == 200:
            return "ok", body
        assert response.status_code != 500, body
        # The HTTP body names the location of a bad argument ("body.x"); MCP has no body.
        return "error", f"{body['error']}: {body['detail'].replace('body.', '')}"

    async def over_mcp(self, name: str, args: dict[str, Any]) -> tuple[str, Any]:
        result = await self.mcp.call_tool(name, args)
        if result.is_error:
            return "error", result.content[0].text
        return "ok", result.structured_content


@pytest.fixture
def doors(make_client: Callable[..., Any]) -> Callable[..., Any]:
    """`async with doors(scope) as (a, b):` user a over HTTP and user b over MCP, each with a
    key of that scope, on the same running app."""

    @asynccontextmanager
    async def connect(scope: str = "write") -> AsyncIterator[tuple[Doors, Doors, FastAPI]]:
        async with make_client() as (http, app):
            a, b = f"parity-a-{uuid.uuid4()}", f"parity-b-{uuid.uuid4()}"
            token_a = (await make_key(app, a, scope)).token
            token_b = (await make_key(app, b, scope)).token
            async with http_client(app, token_b) as transport_client:
                transport = streamable_http_client("http://test/mcp", http_client=transport_client)
                async with Client(transport) as mcp:
                    yield Doors(http, token_a, mcp), Doors(http, token_b, mcp), app

    return connect


async def test_every_tool_has_one_name_description_and_schema(
    doors: Callable[..., Any],
) -> None:
    async with doors() as (a, _, _app):
        response = await a.http.get("/v1/tools", headers={"Authorization": f"Bearer {a.token}"})
        over_http = {t["function"]["name"]: t["function"] for t in response.json()["tools"]}
        over_mcp = {t.name: t for t in (await a.mcp.list_tools()).tools}
    assert list(over_http) == NAMES
    assert set(over_mcp) == set(NAMES)
    for tool in TOOLS:
        published = over_mcp[tool.name]
        assert over_http[tool.name]["description"] == published.description == tool.description
        assert over_http[tool.name]["parameters"] == published.input_schema == tool.parameters
        schema = tool.parameters
        assert schema["additionalProperties"] is False, tool.name
        for name, prop in schema["properties"].items():  # an argument a model can read
            assert prop.get("description"), (tool.name, name)
        assert not {"user", "user_id", "userId"} & set(schema["properties"]), tool.name


async def test_the_same_arguments_get_the_same_answer_through_both_doors(
    doors: Callable[..., Any],
) -> None:
    async with doors() as (http, mcp, _app):
        for door in (http, mcp):  # the same memory for each door's own user
            call = door.over_http if door is http else door.over_mcp
            kind, _ = await call("save_memory", {"content": "My bees are Buckfast", "type": "fact"})
            assert kind == "ok"
        for tool in TOOLS:
            args = sample(tool.parameters)
            got_http = await http.over_http(tool.name, args)
            got_mcp = await mcp.over_mcp(tool.name, args)
            assert normalized(got_http) == normalized(got_mcp), tool.name
            if got_http[0] == "ok":
                tool.result.model_validate(got_http[1])


@pytest.mark.parametrize("name", NAMES)
async def test_an_unknown_argument_is_refused_by_both_doors_naming_it(
    doors: Callable[..., Any], name: str
) -> None:
    tool = next(t for t in TOOLS if t.name == name)
    args = {**sample(tool.parameters), "importnce": 0.9}
    async with doors() as (http, mcp, _app):
        response = await http.http.post(
            f"/v1/tools/{name}", json=args, headers={"Authorization": f"Bearer {http.token}"}
        )
        assert response.status_code == 422, response.text
        assert response.json()["fields"] == [
            {"field": "body.importnce", "reason": "Extra inputs are not permitted"}
        ]
        result = await mcp.mcp.call_tool(name, args)
        assert result.is_error
        refused = "ValidationError: importnce: Extra inputs are not permitted"
        assert result.content[0].text == refused
        assert await http.over_http(name, args) == await mcp.over_mcp(name, args)
        # Nothing was written through either door.
        for door, call in ((http, http.over_http), (mcp, mcp.over_mcp)):
            kind, page = await call("list_memories", {})
            assert kind == "ok" and page["total"] == 0, door


async def test_a_bad_value_is_the_same_validation_error(doors: Callable[..., Any]) -> None:
    args = {"content": "I keep bees", "type": "hobby"}
    async with doors() as (http, mcp, _app):
        got_http = await http.over_http("save_memory", args)
        got_mcp = await mcp.over_mcp("save_memory", args)
    assert got_http == got_mcp
    assert got_http[0] == "error" and got_http[1].startswith("ValidationError: type: ")


async def test_a_read_key_is_refused_every_write_tool_alike(doors: Callable[..., Any]) -> None:
    async with doors("read") as (http, mcp, _app):
        for tool in TOOLS:
            args = sample(tool.parameters)
            got_http = await http.over_http(tool.name, args)
            got_mcp = await mcp.over_mcp(tool.name, args)
            assert normalized(got_http) == normalized(got_mcp), tool.name
            refused = ("error", "PermissionDeniedError: this API key is read-only")
            assert (got_http == refused) is tool.writes, (tool.name, got_http)
