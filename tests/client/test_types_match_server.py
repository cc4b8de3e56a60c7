"""The client's own response models (pgrecall/types.py) match the service's JSON.

The client may not import the server's schemas (it is installed without them), so it declares
its models itself. This compares each with the component of the running app's OpenAPI document
it reads: the same field names, which are required, their JSON types (formats, enums, nested
models) and defaults. A field added, dropped or retyped on either side fails here.
"""

from __future__ import annotations

from typing import Any

import httpx
from pydantic import BaseModel

from pgrecall import types as t

# Client model -> the server's response schema (its OpenAPI component name).
SERVER_NAME: dict[type[BaseModel], str] = {
    t.Conversation: "ConversationOut",
    t.ConversationPage: "ConversationPage",
    t.Message: "MessageOut",
    t.MessageList: "MessageList",
    t.MessagePage: "MessagePage",
    t.MessagePopped: "MessagePopped",
    t.SessionOut: "SessionOut",
    t.AgentMemory: "MemoryOut",
    t.MemoryHistory: "MemoryHistory",
    t.SaveMemoryResult: "SaveMemoryResult",
    t.ForgetMemoryResult: "ForgetMemoryResult",
    t.RateMessageResult: "RateMessageResult",
    t.ToolMemory: "ToolMemory",
    t.ToolMetadata: "ToolMetadata",
    t.QueryMemoryResult: "QueryMemoryResult",
    t.MemoryItemOut: "MemoryItemOut",
    t.MemoryQueryResponse: "MemoryQueryResponse",
    t.Key: "KeyOut",
    t.KeyCreated: "KeyCreated",
    t.KeyPage: "KeyPage",
    t.Memory: "AdminMemoryOut",
    t.Duplicate: "DuplicateOut",
    t.AdminBulkResult: "AdminBulkResult",
    t.AdminMemoryPage: "AdminMemoryPage",
    t.AdminMemoryHistory: "AdminMemoryHistory",
    t.StoreItem: "StoreItemOut",
    t.StoreItemPage: "StoreItemPage",
    t.Space: "SpaceOut",
    t.SpaceList: "SpaceList",
    t.SpaceMember: "MemberOut",
    t.SpaceMemberList: "MemberList",
}
CLIENT_TO_SERVER = {model.__name__: name for model, name in SERVER_NAME.items()}


def _component(name: str) -> str:
    # FastAPI names a model's response schema `X-Output` when its input schema differs.
    return name.removesuffix("-Output").removesuffix("-Input")


def shape(schema: dict[str, Any], rename: dict[str, str]) -> Any:
    """A property's JSON type without its prose: nested models by (server) name."""
    if "$ref" in schema:
        name = _component(schema["$ref"].rsplit("/", 1)[-1])
        return ("model", rename.get(name, name))
    for union in ("anyOf", "oneOf"):
        if union in schema:
            return ("union", frozenset(shape(s, rename) for s in schema[union]))
    if len(schema.get("allOf", ())) == 1:
        return shape(schema["allOf"][0], rename)
    if "const" in schema or "enum" in schema:
        return ("enum", frozenset(schema.get("enum", [schema.get("const")])))
    kind = schema.get("type")
    if kind == "array":
        return ("array", shape(schema.get("items", {}), rename))
    if kind == "object":
        extra = schema.get("additionalProperties", True)
        return ("object", shape(extra, rename) if isinstance(extra, dict) else extra)
    return (kind, schema.get("format"))


def fields(schema: dict[str, Any], rename: dict[str, str]) -> dict[str, Any]:
    required = set(schema.get("required", ()))
    return {
        name: (
            shape(prop, rename),
            name in required,
            # No default and a null one read alike: the server's document leaves some nulls out.
            repr(prop.get("default")),
        )
        for name, prop in schema["properties"].items()
    }


def test_the_comparison_sees_a_difference() -> None:
    class Narrower(BaseModel):
        id: str
        title: str | None

    class Retyped(BaseModel):
        id: int
        title: str | None
        created_at: str
        updated_at: str

    server = t.Conversation.model_json_schema()
    same = fields(server, {})
    assert fields(Narrower.model_json_schema(), {}) != same
    assert fields(Retyped.model_json_schema(), {}) != same


async def test_every_client_model_matches_the_service_schema(client: httpx.AsyncClient) -> None:
    components = (await client.get("/openapi.json")).json()["components"]["schemas"]
    servers = {_component(name): schema for name, schema in components.items()}
    declared = {getattr(t, name) for name in t.__all__}
    assert declared == set(SERVER_NAME), "map every model of pgrecall.types to its server schema"
    for model, server_name in SERVER_NAME.items():
        assert server_name in servers, f"{server_name} is not in the service's OpenAPI document"
        mine = fields(model.model_json_schema(), CLIENT_TO_SERVER)
        theirs = fields(servers[server_name], {})
        assert mine == theirs, (model.__name__, server_name)
