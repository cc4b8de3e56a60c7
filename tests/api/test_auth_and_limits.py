"""Credentials, identity, ownership and input limits: the 401/403/404/413/422 paths."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from tests.helpers import headers, new_conversation

SERVICE_KEY = "service-key-0123456789"
ADMIN_KEY = "admin-key-9876543210"


def auth(user: str, key: str = SERVICE_KEY, **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", **headers(user, **extra)}


@pytest.fixture
async def secured(make_client: Callable[..., Any]) -> AsyncIterator[httpx.AsyncClient]:
    """An app with service and admin keys set."""
    async with make_client(api_key=SecretStr(SERVICE_KEY), admin_api_key=SecretStr(ADMIN_KEY)) as (
        client,
        _,
    ):
        yield client


def assert_422(response: httpx.Response, field: str) -> None:
    """A 422 in the one error shape, naming the field in `detail` and in `fields`."""
    assert response.status_code == 422, response.text
    body = response.json()
    # One name for every invalid input, the schema's refusals and the services' rules alike.
    assert body["error"] == "ValidationError"
    assert field in body["detail"], body
    assert any(f["field"] == field for f in body["fields"]), body
    assert all(set(f) == {"field", "reason"} for f in body["fields"])


# -- credentials ------------------------------------------------------------------------------

V1_ROUTES = [
    ("POST", "/v1/conversations", {"title": "t"}),
    ("GET", "/v1/conversations", None),
    ("GET", "/v1/conversations/{cid}", None),
    ("POST", "/v1/conversations/{cid}/messages", {"role": "user", "content": "hi"}),
    (
        "POST",
        "/v1/conversations/{cid}/messages:bulk",
        {"messages": [{"role": "user", "content": "hi"}]},
    ),
    ("GET", "/v1/conversations/{cid}/messages", None),
    ("GET", "/v1/conversations/{cid}/session", None),
]


@pytest.mark.parametrize(("method", "path", "body"), V1_ROUTES)
async def test_every_v1_route_needs_the_service_key(
    secured: httpx.AsyncClient, user_id: str, method: str, path: str, body: Any
) -> None:
    created = await secured.post("/v1/conversations", json={}, headers=auth(user_id))
    assert created.status_code == 201
    url = path.format(cid=created.json()["id"])

    missing = await secured.request(method, url, json=body, headers=headers(user_id))
    assert missing.status_code == 401
    assert missing.json()["error"] == "AuthenticationError"

    wrong = await secured.request(method, url, json=body, headers=auth(user_id, key="nope"))
    assert wrong.status_code == 403
    assert wrong.json()["error"] == "PermissionDeniedError"

    right = await secured.request(method, url, json=body, headers=auth(user_id))
    assert 200 <= right.status_code < 300, right.text


async def test_malformed_authorization_is_401(secured: httpx.AsyncClient, user_id: str) -> None:
    for value in ("Basic abc", "Bearer", "Bearer   ", SERVICE_KEY):
        response = await secured.get(
            "/v1/conversations", headers={"Authorization": value, **headers(user_id)}
        )
        assert response.status_code == 401, value


async def test_admin_key_is_accepted_on_service_routes(
    secured: httpx.AsyncClient, user_id: str
) -> None:
    response = await secured.get("/v1/conversations", headers=auth(user_id, key=ADMIN_KEY))
    assert response.status_code == 200


async def test_health_and_ready_need_no_key(secured: httpx.AsyncClient) -> None:
    assert (await secured.get("/health")).status_code == 200
    assert (await secured.get("/ready")).status_code == 200


# -- identity ---------------------------------------------------------------------------------


async def test_missing_user_header_is_422_naming_it(secured: httpx.AsyncClient) -> None:
    response = await secured.get(
        "/v1/conversations", headers={"Authorization": f"Bearer {SERVICE_KEY}"}
    )
    assert_422(response, "header.X-User-Id")


@pytest.mark.parametrize(
    "bad_user",
    ["has space", "x" * 256, "tab\there", "del\x7f", b"caf\xc3\xa9".decode("latin-1"), ""],
    ids=["space", "too-long", "tab", "control", "non-ascii", "empty"],
)
async def test_invalid_user_id_is_422(secured: httpx.AsyncClient, bad_user: str) -> None:
    response = await secured.get(
        "/v1/conversations",
        headers=[
            ("Authorization", f"Bearer {SERVICE_KEY}"),
            ("X-User-Id", bad_user.encode("latin-1")),
        ],
    )
    assert_422(response, "header.X-User-Id")


async def test_longest_valid_user_id_is_accepted(secured: httpx.AsyncClient) -> None:
    user = "u" * 255
    created = await secured.post("/v1/conversations", json={}, headers=auth(user))
    assert created.status_code == 201, created.text


async def test_other_users_conversation_is_404(
    secured: httpx.AsyncClient, user_id: str, other_user_id: str
) -> None:
    created = await secured.post("/v1/conversations", json={}, headers=auth(user_id))
    cid = created.json()["id"]
    added = await secured.post(
        f"/v1/conversations/{cid}/messages",
        json={"role": "user", "content": "private"},
        headers=auth(user_id),
    )
    assert added.status_code == 201
    unknown = str(uuid.uuid4())
    for target in (cid, unknown):
        responses = [
            await secured.get(f"/v1/conversations/{target}", headers=auth(other_user_id)),
            await secured.get(f"/v1/conversations/{target}/messages", headers=auth(other_user_id)),
            await secured.get(f"/v1/conversations/{target}/session", headers=auth(other_user_id)),
            await secured.post(
                f"/v1/conversations/{target}/messages",
                json={"role": "user", "content": "intrusion"},
                headers=auth(other_user_id),
            ),
            await secured.post(
                f"/v1/conversations/{target}/messages:bulk",
                json={"messages": [{"role": "user", "content": "intrusion"}]},
                headers=auth(other_user_id),
            ),
        ]
        # Foreign and unknown ids look the same: no existence leak.
        assert [r.status_code for r in responses] == [404] * 5
        assert {r.json()["detail"] for r in responses} == {"conversation not found"}
    # The owner's data is untouched.
    listed = await secured.get(f"/v1/conversations/{cid}/messages", headers=auth(user_id))
    assert [m["content"] for m in listed.json()["items"]] == ["private"]


@pytest.mark.parametrize("path", ["/v1/conversations/not-a-uuid", "/v1/conversations/123/messages"])
async def test_malformed_uuid_path_is_422(
    secured: httpx.AsyncClient, user_id: str, path: str
) -> None:
    assert_422(await secured.get(path, headers=auth(user_id)), "path.conversation_id")


async def test_bad_query_parameters_are_422(secured: httpx.AsyncClient, user_id: str) -> None:
    assert_422(await secured.get("/v1/conversations?limit=0", headers=auth(user_id)), "query.limit")
    assert_422(
        await secured.get("/v1/conversations?offset=-1", headers=auth(user_id)), "query.offset"
    )
    cid = (await secured.post("/v1/conversations", json={}, headers=auth(user_id))).json()["id"]
    assert_422(
        await secured.get(f"/v1/conversations/{cid}/messages?after=x", headers=auth(user_id)),
        "query.after",
    )


# -- bodies -----------------------------------------------------------------------------------


async def test_body_over_limit_with_content_length_is_413(
    make_client: Callable[..., Any], user_id: str
) -> None:
    async with make_client(max_body_bytes=2048) as (client, _):
        cid = await new_conversation(client, user_id)
        response = await client.post(
            f"/v1/conversations/{cid}/messages",
            json={"role": "user", "content": "x" * 3000},
            headers=headers(user_id),
        )
        assert response.status_code == 413, response.text
        assert response.json()["error"] == "PayloadTooLargeError"
        assert "2048" in response.json()["detail"]
        fits = await client.post(
            f"/v1/conversations/{cid}/messages",
            json={"role": "user", "content": "x" * 1500},
            headers=headers(user_id),
        )
        assert fits.status_code == 201, fits.text
        listed = await client.get(f"/v1/conversations/{cid}/messages", headers=headers(user_id))
        assert [len(m["content"]) for m in listed.json()["items"]] == [1500]


async def test_streamed_body_over_limit_is_413(
    make_client: Callable[..., Any], user_id: str
) -> None:
    async with make_client(max_body_bytes=2048) as (client, _):
        cid = await new_conversation(client, user_id)
        payload = b'{"role": "user", "content": "' + b"y" * 5000 + b'"}'

        async def chunks() -> AsyncIterator[bytes]:
            for start in range(0, len(payload), 512):
                yield payload[start : start + 512]

        request = client.build_request(
            "POST",
            f"/v1/conversations/{cid}/messages",
            content=chunks(),
            headers={**headers(user_id), "Content-Type": "application/json"},
        )
        assert "content-length" not in request.headers  # really chunked
        response = await client.send(request)
        assert response.status_code == 413, response.text
        assert response.json()["error"] == "PayloadTooLargeError"

        # A streamed body within the limit is still read whole.
        small = b'{"role": "user", "content": "streamed"}'

        async def small_chunks() -> AsyncIterator[bytes]:
            for start in range(0, len(small), 7):
                yield small[start : start + 7]

        ok = await client.send(
            client.build_request(
                "POST",
                f"/v1/conversations/{cid}/messages",
                content=small_chunks(),
                headers={**headers(user_id), "Content-Type": "application/json"},
            )
        )
        assert ok.status_code == 201, ok.text
        listed = await client.get(f"/v1/conversations/{cid}/messages", headers=headers(user_id))
        assert [m["content"] for m in listed.json()["items"]] == ["streamed"]


async def test_content_too_long_is_422(client: httpx.AsyncClient, user_id: str) -> None:
    cid = await new_conversation(client, user_id)
    url = f"/v1/conversations/{cid}/messages"
    response = await client.post(
        url, json={"role": "user", "content": "z" * 32001}, headers=headers(user_id)
    )
    assert_422(response, "body.content")
    at_limit = await client.post(
        url, json={"role": "user", "content": "z " * 16000}, headers=headers(user_id)
    )
    assert at_limit.status_code == 201, at_limit.text


@pytest.mark.parametrize("content", ["", "   ", "\n\t ", "nul\x00byte"])
async def test_empty_blank_or_nul_content_is_422(
    client: httpx.AsyncClient, user_id: str, content: str
) -> None:
    cid = await new_conversation(client, user_id)
    response = await client.post(
        f"/v1/conversations/{cid}/messages",
        json={"role": "user", "content": content},
        headers=headers(user_id),
    )
    assert_422(response, "body.content")


async def test_unknown_role_is_422(client: httpx.AsyncClient, user_id: str) -> None:
    cid = await new_conversation(client, user_id)
    response = await client.post(
        f"/v1/conversations/{cid}/messages",
        json={"role": "robot", "content": "beep"},
        headers=headers(user_id),
    )
    assert_422(response, "body.role")


async def test_extra_fields_are_422(client: httpx.AsyncClient, user_id: str) -> None:
    created = await client.post(
        "/v1/conversations", json={"title": "t", "owner": "someone"}, headers=headers(user_id)
    )
    assert_422(created, "body.owner")
    cid = await new_conversation(client, user_id)
    response = await client.post(
        f"/v1/conversations/{cid}/messages",
        json={"role": "user", "content": "hi", "user_id": "someone-else"},
        headers=headers(user_id),
    )
    assert_422(response, "body.user_id")


async def test_bulk_item_errors_name_the_index(client: httpx.AsyncClient, user_id: str) -> None:
    cid = await new_conversation(client, user_id)
    response = await client.post(
        f"/v1/conversations/{cid}/messages:bulk",
        json={"messages": [{"role": "user", "content": "fine"}, {"role": "user", "content": " "}]},
        headers=headers(user_id),
    )
    assert_422(response, "body.messages.1.content")
    empty = await client.post(
        f"/v1/conversations/{cid}/messages:bulk", json={"messages": []}, headers=headers(user_id)
    )
    assert_422(empty, "body.messages")
    # All or nothing: the valid first item was not stored.
    listed = await client.get(f"/v1/conversations/{cid}/messages", headers=headers(user_id))
    assert listed.json()["items"] == []


async def test_invalid_json_is_422(client: httpx.AsyncClient, user_id: str) -> None:
    cid = await new_conversation(client, user_id)
    response = await client.post(
        f"/v1/conversations/{cid}/messages",
        content=b'{"role": "user", "content": ',
        headers={**headers(user_id), "Content-Type": "application/json"},
    )
    assert response.status_code == 422
    body = response.json()
    assert body["error"] == "ValidationError" and body["fields"]


@pytest.mark.parametrize("value", ["not-a-uuid", "1234", "' OR 1=1 --"])
async def test_bad_correlation_id_is_422(
    client: httpx.AsyncClient, user_id: str, value: str
) -> None:
    response = await client.get(
        "/v1/conversations", headers=headers(user_id, **{"X-Correlation-ID": value})
    )
    assert_422(response, "header.X-Correlation-ID")


# -- encodings (app/encoding.py) ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("application/json", '{"title": "caf\u00e9"}'.encode("utf-16")),  # with its BOM
        ("application/json", '{"title": "x"}'.encode("utf-16-le")),  # no BOM: NUL bytes
        ("application/json", b'{"title": "caf\xe9"}'),  # latin-1 bytes
    ],
    ids=["utf-16", "utf-16-le", "latin-1-bytes"],
)
async def test_a_body_that_is_not_utf8_is_422(
    secured: httpx.AsyncClient, user_id: str, content_type: str, body: bytes
) -> None:
    response = await secured.post(
        "/v1/conversations",
        content=body,
        headers={**auth(user_id), "Content-Type": content_type},
    )
    assert_422(response, "body")
    listed = await secured.get("/v1/conversations", headers=auth(user_id))
    assert listed.json()["items"] == []


@pytest.mark.parametrize("charset", ["latin-1", "utf-16", "ISO-8859-1"])
async def test_a_charset_other_than_utf8_is_415(
    secured: httpx.AsyncClient, user_id: str, charset: str
) -> None:
    response = await secured.post(
        "/v1/conversations",
        content=b'{"title": "plain"}',
        headers={**auth(user_id), "Content-Type": f"application/json; charset={charset}"},
    )
    assert response.status_code == 415, response.text
    assert response.json()["error"] == "UnsupportedMediaTypeError"
    assert charset.lower() in response.json()["detail"]


async def test_utf8_charset_is_accepted(secured: httpx.AsyncClient, user_id: str) -> None:
    response = await secured.post(
        "/v1/conversations",
        content='{"title": "caf\u00e9"}'.encode(),
        headers={**auth(user_id), "Content-Type": "application/json; charset=UTF-8"},
    )
    assert response.status_code == 201, response.text


async def test_a_query_string_that_is_not_utf8_is_422_naming_it(
    secured: httpx.AsyncClient, user_id: str
) -> None:
    response = await secured.get(
        f"/v1/admin/memories?user_id={user_id}&q=%FF",
        headers={"Authorization": f"Bearer {ADMIN_KEY}"},
    )
    assert_422(response, "query.q")
    fine = await secured.get(
        f"/v1/admin/memories?user_id={user_id}&q=caf%C3%A9",
        headers={"Authorization": f"Bearer {ADMIN_KEY}"},
    )
    assert fine.status_code == 200, fine.text


async def test_auth_off_a_non_key_bearer_token_says_why_the_user_is_missing(client) -> None:
    response = await client.get("/v1/conversations", headers={"Authorization": "Bearer sk-123"})
    assert response.status_code == 422
    assert response.json()["fields"][0]["field"] == "header.X-User-Id"
    assert "not a per-user key" in response.json()["detail"]
