"""Who a chat proxy request acts for.

`Authorization` normally belongs to the upstream (an OpenAI key), so pgrecall's own credential
travels in `X-Pgrecall-Key`. A per-user key (`pgr_...`) is recognised wherever it is: in
`X-Pgrecall-Key`, or as `Authorization: Bearer pgr_...` (then it is pgrecall's, never sent
upstream); it fixes the user, so `X-User-Id` may be left out. The service key names the user in
`X-User-Id`; as `Authorization: Bearer` it is accepted only when PGRECALL_CHAT_UPSTREAM_KEY is
set (the caller's Authorization does not go upstream then).
"""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Header, Request

from app.errors import AuthenticationError, PermissionDeniedError, ValidationFailedError
from app.proxy.upstream import ChatUpstream
from app.runtime import Resources
from app.runtime.identity import validate_user_id
from app.services.api_keys import looks_like_key

KEY_HEADER = "X-Pgrecall-Key"


def get_resources(request: Request) -> Resources:
    return request.app.state.resources  # type: ignore[no-any-return]


ResourcesDep = Annotated[Resources, Depends(get_resources)]


async def get_upstream(request: Request) -> ChatUpstream:
    return request.app.state.chat_upstream  # type: ignore[no-any-return]


UpstreamDep = Annotated[ChatUpstream, Depends(get_upstream)]


def pgrecall_token(
    upstream: ChatUpstream, key_header: str | None, authorization: str | None
) -> str | None:
    """pgrecall's credential of the request, None when it presents none."""
    if key_header:
        return key_header.strip()
    scheme, _, token = (authorization or "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token if upstream.key is not None or looks_like_key(token) else None


async def proxy_caller(
    resources: ResourcesDep,
    upstream: UpstreamDep,
    x_user_id: Annotated[str | None, Header(alias="X-User-Id")] = None,
    x_pgrecall_key: Annotated[str | None, Header(alias=KEY_HEADER)] = None,
    authorization: Annotated[str | None, Header()] = None,
) -> str:
    """The user the turns are stored for (the proxy writes: a read-only key is refused)."""
    presented = pgrecall_token(upstream, x_pgrecall_key, authorization)
    keys = [k for k in (resources.api_key, resources.admin_api_key) if k]
    service = presented is not None and any(
        hmac.compare_digest(presented.encode(), k.encode()) for k in keys
    )
    if presented is not None and not service and looks_like_key(presented):
        caller = await resources.keys.authenticate(presented)
        if x_user_id is not None and x_user_id != caller.user_id:
            raise PermissionDeniedError("X-User-Id names another user than the API key's")
        if not caller.can_write:
            raise PermissionDeniedError("this API key is read-only (the proxy stores turns)")
        return caller.user_id
    if resources.api_key is not None:
        if not presented:
            raise AuthenticationError(f"missing {KEY_HEADER}: <service key or per-user key>")
        if not service:
            raise PermissionDeniedError("invalid API key")
    if x_user_id is None:
        raise ValidationFailedError("header.X-User-Id: Field required", field="header.X-User-Id")
    return validate_user_id(x_user_id)


ProxyUserDep = Annotated[str, Depends(proxy_caller)]
