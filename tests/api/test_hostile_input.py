"""Reproducers of a hostile-input run (issue 10): each once answered 500, now a clear 4xx.

Texts Postgres cannot store (NUL, lone surrogates), numbers and times out of range, loosely typed
JSON, routing errors, and the documents that must not be public when keys are set.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from tests.api.test_auth_and_limits import ADMIN_KEY, SERVICE_KEY, assert_422
from tests.helpers import headers, new_conversation

LONE_SURROGATE = "\\ud800"  # as JSON text: json.loads turns it into an unpaired surrogate
OUT_OF_RANGE_TIME = "9999-12-31T23:59:59-23:59"  # year 10000 once converted to UTC


def raw(body: str) -> dict[str, Any]:
    """Request kwargs for a JSON body sent byte for byte (httpx would refuse to encode it)."""
    return {"content": body.encode(), "headers": {"content-type": "application/json"}}


async def test_nul_in_conversation_title(client: httpx.AsyncClient, user_id: str) -> None:
    response = await client.post(
        "/v1/conversations", json={"title": "a\x00b"}, headers=headers(user_id)
    )
    assert_422(response, "body.title")


@pytest.mark.parametrize(
    ("metadata", "field"),
    [
        ('{"k\\u0000": 1}', "body.metadata"),
        ('{"k": "v\\u0000"}', "body.metadata"),
        ('{"k": "' + LONE_SURROGATE + '"}', "body.metadata"),
        ('{"' + LONE_SURROGATE + '": 1}', "body.metadata"),
        ('{"k": {"nested": ["\\u0000"]}}', "body.metadata"),
        ('{"k": NaN}', "body.metadata.k"),
    ],
)
async def test_unstorable_message_metadata(
    client: httpx.AsyncClient, user_id: str, metadata: str, field: str
) -> None:
    cid = await new_conversation(client, user_id)
    body = '{"role": "user", "content": "hello", "metadata": ' + metadata + "}"
    kwargs = raw(body)
    kwargs["headers"].update(headers(user_id))
    response = await client.post(f"/v1/conversations/{cid}/messages", **kwargs)
    assert response.status_code == 422, response.text
    assert any(f["field"].startswith(field) for f in response.json()["fields"]), response.json()
    listed = await client.get(f"/v1/conversations/{cid}/messages", headers=headers(user_id))
    assert listed.json()["items"] == []


async def test_lone_surrogate_in_content(client: httpx.AsyncClient, user_id: str) -> None:
    cid = await new_conversation(client, user_id)
    kwargs = raw('{"role": "user", "content": "a' + LONE_SURROGATE + '"}')
    kwargs["headers"].update(headers(user_id))
    response = await client.post(f"/v1/conversations/{cid}/messages", **kwargs)
    assert_422(response, "body.content")


async def test_nul_in_session_goal(client: httpx.AsyncClient, user_id: str) -> None:
    cid = await new_conversation(client, user_id)
    response = await client.put(
        f"/v1/conversations/{cid}/session", json={"goal": "x\x00"}, headers=headers(user_id)
    )
    assert_422(response, "body.goal")


@pytest.mark.parametrize("after", ["9223372036854775808", str(10**30), "-1"])
async def test_message_listing_cursor_out_of_range(
    client: httpx.AsyncClient, user_id: str, after: str
) -> None:
    cid = await new_conversation(client, user_id)
    response = await client.get(
        f"/v1/conversations/{cid}/messages", params={"after": after}, headers=headers(user_id)
    )
    assert_422(response, "query.after")


async def test_largest_cursor_is_accepted(client: httpx.AsyncClient, user_id: str) -> None:
    cid = await new_conversation(client, user_id)
    response = await client.get(
        f"/v1/conversations/{cid}/messages",
        params={"after": str(2**63 - 1)},
        headers=headers(user_id),
    )
    assert response.status_code == 200, response.text
    assert response.json()["items"] == []


async def test_import_time_out_of_range(client: httpx.AsyncClient, user_id: str) -> None:
    cid = await new_conversation(client, user_id)
    response = await client.post(
        f"/v1/conversations/{cid}/messages:bulk",
        json={"messages": [{"role": "user", "content": "x", "created_at": OUT_OF_RANGE_TIME}]},
        headers=headers(user_id),
    )
    assert_422(response, "body.messages.0.created_at")


async def test_admin_inputs_postgres_cannot_take(client: httpx.AsyncClient, user_id: str) -> None:
    item = {"user_id": user_id, "content": "likes tea", "type": "preference"}
    response = await client.post("/v1/admin/memories", json={**item, "source": "s\x00"})
    assert_422(response, "body.source")
    response = await client.post("/v1/admin/memories", json={**item, "metadata": {"a\x00": 1}})
    assert response.status_code == 422, response.text
    for params, field in [
        ({"user_id": user_id, "q": "tea\x00"}, "query.q"),
        ({"user_id": user_id, "created_after": OUT_OF_RANGE_TIME}, "query.created_after"),
    ]:
        response = await client.get("/v1/admin/memories", params=params)
        assert_422(response, field)
    listing = await client.get("/v1/admin/memories", params={"user_id": user_id})
    assert listing.json()["total"] == 0


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"query": "tea", "limit": True}, "body.limit"),
        ({"query": "tea", "limit": "5"}, "body.limit"),
        ({"query": "tea", "min_score": "0.5"}, "body.min_score"),
        ({"query": "tea", "token_budget": 10.5}, "body.token_budget"),
        ({"query": "tea", "sources": ["memory", "memory"]}, "body.sources"),
        ({"query": " \u3000\t"}, "body.query"),
    ],
)
async def test_loosely_typed_query_fields(
    client: httpx.AsyncClient, user_id: str, body: dict[str, Any], field: str
) -> None:
    response = await client.post("/v1/memory/query", json=body, headers=headers(user_id))
    assert_422(response, field)


async def test_routing_errors_use_the_error_body(client: httpx.AsyncClient) -> None:
    missing = await client.get("/v1/nothing-here")
    assert missing.status_code == 404
    assert missing.json() == {"error": "NotFound", "detail": "Not Found"}
    wrong_method = await client.delete("/v1/conversations")
    assert wrong_method.status_code == 405
    assert wrong_method.json()["error"] == "MethodNotAllowed"
    assert wrong_method.headers["allow"] == "GET, POST"


async def test_unreadable_json_is_a_422_in_the_error_body(
    client: httpx.AsyncClient, user_id: str
) -> None:
    response = await client.post(
        "/v1/conversations", **{**raw('{"title": '), "headers": {**headers(user_id)}}
    )
    assert response.status_code == 422, response.text
    assert response.json()["error"] == "ValidationError"


@pytest.mark.parametrize("path", ["/metrics", "/openapi.json", "/docs"])
async def test_documents_need_a_key_when_keys_are_set(
    make_client: Callable[..., Any], path: str
) -> None:
    async with make_client(api_key=SecretStr(SERVICE_KEY), admin_api_key=SecretStr(ADMIN_KEY)) as (
        client,
        _,
    ):
        assert (await client.get(path)).status_code == 401
        assert (
            await client.get(path, headers={"Authorization": "Bearer wrong"})
        ).status_code == 403
        ok = await client.get(path, headers={"Authorization": f"Bearer {SERVICE_KEY}"})
        assert ok.status_code == 200
    async with make_client() as (open_client, _):
        assert (await open_client.get(path)).status_code == 200


async def test_openapi_describes_errors_and_rules(client: httpx.AsyncClient) -> None:
    document = (await client.get("/openapi.json")).json()
    schemas = document["components"]["schemas"]
    assert "HTTPValidationError" not in schemas
    assert set(schemas["ErrorBody"]["required"]) == {"error", "detail"}
    for path, item in document["paths"].items():
        for method, operation in item.items():
            for status, response in operation["responses"].items():
                if status.startswith(("4", "5")) and path not in {"/ready"}:
                    ref = response["content"]["application/json"]["schema"]["$ref"]
                    assert ref.endswith("/ErrorBody"), (method, path, status)
            if path.startswith("/v1"):
                assert {"422", "503"} <= set(operation["responses"]) or method == "get"
    append = document["paths"]["/v1/conversations/{conversation_id}/messages"]["post"]
    assert {"401", "403", "404", "413", "422", "503"} <= set(append["responses"])
    user_header = next(p for p in append["parameters"] if p["name"] == "X-User-Id")
    assert user_header["schema"]["pattern"] == r"^(?!space:)[\x21-\x7e]{1,255}$"
    message = schemas["MessageCreate"]["properties"]["content"]
    assert "pattern" in message and message["maxLength"] == 32_000
    query = schemas["MemoryQueryRequest"]["properties"]
    assert query["sources"]["uniqueItems"] is True
    assert json.dumps(document)  # serialisable as served


async def test_a_per_user_key_reads_its_own_openapi_document(
    make_client: Callable[..., Any], user_id: str
) -> None:
    """Both ways to name the user are described; the per-user key's holder gets X-User-Id
    optional (its key fixes the user), the service key's holder required."""
    from app.db import user_session
    from app.services.api_keys import ApiKeyService

    async with make_client(api_key=SecretStr(SERVICE_KEY)) as (client, app):
        async with (
            user_session(app.state.resources.sessionmaker, user_id) as session,
            session.begin(),
        ):
            token = (await ApiKeyService(session).create(user_id, "write")).token
        mine = await client.get("/openapi.json", headers={"Authorization": f"Bearer {token}"})
        service = await client.get(
            "/openapi.json", headers={"Authorization": f"Bearer {SERVICE_KEY}"}
        )
        revoked = await client.get("/openapi.json", headers={"Authorization": "Bearer pgr_nope"})
    assert (mine.status_code, service.status_code, revoked.status_code) == (200, 200, 403)

    def user_headers(document: dict[str, Any]) -> list[bool]:
        return [
            p["required"]
            for item in document["paths"].values()
            for operation in item.values()
            for p in operation.get("parameters", [])
            if p["name"] == "X-User-Id"
        ]

    assert len(user_headers(mine.json())) > 20
    assert set(user_headers(mine.json())) == {False}
    assert set(user_headers(service.json())) == {True}
    for document in (mine.json(), service.json()):
        assert set(document["components"]["securitySchemes"]) == {"serviceKey", "userKey"}
        append = document["paths"]["/v1/conversations/{conversation_id}/messages"]["post"]
        assert append["security"] == [{"serviceKey": []}, {"userKey": []}]
        assert "415" in append["responses"]
