"""Per-user keys over the admin API (/v1/admin/keys), through the typed client on the app."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from pgrecall.client import AsyncClient, PgrecallError

SERVICE, ADMIN = "svc-key", "adm-key"


@pytest.fixture
async def app_http(make_client: Callable[..., Any]) -> AsyncIterator[httpx.AsyncClient]:
    async with make_client(api_key=SecretStr(SERVICE), admin_api_key=SecretStr(ADMIN)) as (
        http,
        _,
    ):
        yield http


def admin(http: httpx.AsyncClient) -> AsyncClient:
    return AsyncClient("http://test", api_key=SERVICE, admin_key=ADMIN, http=http)


async def test_create_use_list_revoke(app_http: httpx.AsyncClient, user_id: str) -> None:
    pgr = admin(app_http)
    created = await pgr.create_key(user_id, scope="write", expires_in="30d")
    assert created.token.startswith("pgr_") and created.key.user_id == user_id
    assert created.key.state == "active" and created.key.expires_at is not None

    as_user = AsyncClient("http://test", api_key=created.token, http=app_http)  # no X-User-Id
    conversation = await as_user.create_conversation("via a key made over HTTP")
    assert (await as_user.get_conversation(conversation.id)).title == "via a key made over HTTP"

    listed = await pgr.list_keys(user_id)
    assert [k.id for k in listed.items] == [created.key.id]
    assert created.token not in listed.model_dump_json()  # tokens are never listed
    assert listed.next_offset is None

    revoked = await pgr.revoke_key(created.key.id)
    assert revoked.state == "revoked" and revoked.revoked_at is not None
    again = await pgr.revoke_key(created.key.id)
    assert again.revoked_at == revoked.revoked_at  # idempotent, first time kept
    with pytest.raises(PgrecallError) as refused:
        await as_user.list_conversations()  # this process forgot the key at once
    assert (refused.value.status, refused.value.detail) == (401, "API key revoked")


async def test_read_scope_and_paging(app_http: httpx.AsyncClient, user_id: str) -> None:
    pgr = admin(app_http)
    read = await pgr.create_key(user_id, scope="read")
    write = await pgr.create_key(user_id)
    reader = AsyncClient("http://test", api_key=read.token, http=app_http)
    await reader.list_conversations()
    with pytest.raises(PgrecallError) as denied:
        await reader.create_conversation()
    assert denied.value.status == 403
    first = await pgr.list_keys(user_id, limit=1)
    assert len(first.items) == 1 and first.next_offset == 1
    second = await pgr.list_keys(user_id, limit=1, offset=1)
    assert second.next_offset is None
    assert {first.items[0].id, second.items[0].id} == {read.key.id, write.key.id}


async def test_only_the_admin_key_reaches_the_routes(
    app_http: httpx.AsyncClient, user_id: str
) -> None:
    created = await admin(app_http).create_key(user_id)
    for key in (created.token, SERVICE, None):
        outsider = AsyncClient("http://test", api_key=key, admin_key=key, http=app_http)
        with pytest.raises(PgrecallError) as refused:
            await outsider.list_keys()
        assert refused.value.status in (401, 403)
    with pytest.raises(PgrecallError) as unknown:
        await admin(app_http).revoke_key("00000000-0000-0000-0000-000000000000")
    assert unknown.value.status == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"user_id": "has space"}, "user_id"),
        ({"user_id": "u", "scope": "admin"}, "scope"),
        ({"user_id": "u", "expires_in": "tomorrow"}, "expires_in"),
        ({"user_id": "u", "expires_in": "0d"}, "expires_in"),
        ({"user_id": "u", "extra": 1}, "extra"),
    ],
)
async def test_bad_input_is_422_naming_the_field(
    app_http: httpx.AsyncClient, body: dict[str, Any], field: str
) -> None:
    response = await app_http.post(
        "/v1/admin/keys", json=body, headers={"Authorization": f"Bearer {ADMIN}"}
    )
    assert response.status_code == 422, response.text
    assert any(field in f["field"] for f in response.json()["fields"]), response.json()
