"""Who a call is for: the one set of rules every door (HTTP, MCP, the chat proxy, the console)
applies to the credential it read.

A door only reads its credential from where it travels (an `Authorization: Bearer` header,
`X-Pgrecall-Key`, a console session) and hands it to `resolve_caller`: a per-user key fixes the
user (X-User-Id absent or equal, else 403); the service or admin key, no auth configured, or an
operator the door signed in itself (the console's admin) names the user in X-User-Id (the
console: in its `user` query parameter).
"""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING

from app.errors import AuthenticationError, PermissionDeniedError, ValidationFailedError
from app.schemas.common import check_user_id
from app.services.api_keys import Caller, looks_like_key

if TYPE_CHECKING:
    from app.runtime.resources import Resources

USER_HEADER = "X-User-Id"


HEADER_FIELD = f"header.{USER_HEADER}"


def validate_user_id(value: str, field: str = HEADER_FIELD) -> str:
    """User ids are 1-255 printable ASCII characters without spaces; `field` is where the door
    read the id (the refusal names it)."""
    try:
        return check_user_id(value)
    except ValueError as exc:
        raise ValidationFailedError(f"{field}: {exc}", field=field) from None


def matches(token: str, key: str | None) -> bool:
    """`token` is `key` (compared in constant time); never for an unset key."""
    return key is not None and hmac.compare_digest(token.encode(), key.encode())


def is_service_key(resources: Resources, token: str | None) -> bool:
    """The service key or the admin key (both let the caller name the user)."""
    return token is not None and (
        matches(token, resources.api_key) or matches(token, resources.admin_api_key)
    )


async def resolve_caller(
    resources: Resources,
    token: str | None,
    claimed_user: str | None,
    *,
    missing: str = "missing Authorization: Bearer <key>",
    per_user_only: str | None = None,
    trusted: bool = False,
    user_field: str = HEADER_FIELD,
) -> Caller:
    """Who a call acts for, from the credential a door read (`token`, None when it presented
    none) and the user it names (`claimed_user`, the X-User-Id header).

    `missing` is what a caller without a credential is told where one is required;
    `per_user_only` (MCP) accepts per-user keys alone and is the refusal of anything else;
    `trusted` says the door signed the operator in itself (the console), who names the user;
    `user_field` is where the door read `claimed_user` (`query.user` in the console), which a
    refusal of a missing or invalid user id names.
    """
    service = trusted or is_service_key(resources, token)
    if token is not None and not service and looks_like_key(token):
        caller = await resources.keys.authenticate(token)
        if claimed_user is not None and claimed_user != caller.user_id:
            raise PermissionDeniedError("X-User-Id names another user than the API key's")
        return caller
    if per_user_only is not None:
        if token is None:
            raise AuthenticationError(missing)
        raise PermissionDeniedError(per_user_only)
    if resources.api_key is not None and not service:
        if token is None:
            raise AuthenticationError(missing)
        raise PermissionDeniedError("invalid API key")
    if claimed_user is None:
        reason = f"{user_field}: Field required"
        if token is not None and not service:
            # A token that is not a per-user key (auth off): say why the user is missing.
            reason += " (the Bearer token is not a per-user key 'pgr_...', so name the user)"
        raise ValidationFailedError(reason, field=user_field)
    return Caller(validate_user_id(claimed_user, user_field))
