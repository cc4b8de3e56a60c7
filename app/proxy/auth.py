"""Who a chat proxy request acts for.

`Authorization` normally belongs to the upstream (an OpenAI key), so pgrecall's own credential
travels in `X-Pgrecall-Key`. A per-user key (`pgr_...`) is recognised wherever it is: in
`X-Pgrecall-Key`, or as `Authorization: Bearer pgr_...` (then it is pgrecall's, never sent
upstream); it fixes the user, so `X-User-Id` may be left out. The service key names the user in
`X-User-Id`; as `Authorization: Bearer` it is accepted only when PGRECALL_CHAT_UPSTREAM_KEY is
set (the caller's Authorization does not go upstream then).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request

from app.domain import MemoryScope
from app.errors import PermissionDeniedError
from app.http.deps import ResourcesDep
from app.proxy.upstream import ChatUpstream
from app.runtime.identity import headers_claim, resolve_caller
from app.services.api_keys import looks_like_key

KEY_HEADER = "X-Pgrecall-Key"


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
    request: Request,
    resources: ResourcesDep,
    upstream: UpstreamDep,
    x_user_id: Annotated[str | None, Header(alias="X-User-Id")] = None,
    x_pgrecall_key: Annotated[str | None, Header(alias=KEY_HEADER)] = None,
    authorization: Annotated[str | None, Header()] = None,
) -> MemoryScope:
    """The user (and agent, run, spaces) the turns are stored for and the memories read from
    (the proxy writes: a read-only key is refused)."""
    caller = await resolve_caller(
        resources,
        pgrecall_token(upstream, x_pgrecall_key, authorization),
        x_user_id,
        missing=f"missing {KEY_HEADER}: <service key or per-user key>",
        claim=headers_claim(request.headers),
    )
    if not caller.can_write:
        raise PermissionDeniedError("this API key is read-only (the proxy stores turns)")
    return caller.memory


ProxyUserDep = Annotated[MemoryScope, Depends(proxy_caller)]
