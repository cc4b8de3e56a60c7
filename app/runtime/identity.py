"""Who a call is for: the one set of rules every door (HTTP, MCP, the chat proxy, the console)
applies to the credential it read.

A door only reads its credential from where it travels (an `Authorization: Bearer` header,
`X-Pgrecall-Key`, a console session) and hands it to `resolve_caller`: a per-user key fixes the
user (X-User-Id absent or equal, else 403); the service or admin key, no auth configured, or an
operator the door signed in itself (the console's admin) names the user in X-User-Id (the
console: in its `user` query parameter).
"""

from __future__ import annotations

import dataclasses
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from app.domain import SPACE_ID_PATTERN_TEXT
from app.errors import AuthenticationError, PermissionDeniedError, ValidationFailedError
from app.schemas.common import check_user_id
from app.services.api_keys import Caller, looks_like_key

if TYPE_CHECKING:
    from app.runtime.resources import Resources

USER_HEADER = "X-User-Id"


HEADER_FIELD = f"header.{USER_HEADER}"
# The memory scope within the user's (docs/agents.md): every door reads these headers (MCP over
# stdio: its command's options) and hands them to resolve_caller as a ScopeClaim.
AGENT_HEADER = "X-Agent-Id"
RUN_HEADER = "X-Run-Id"
SCOPE_MODE_HEADER = "X-Scope-Mode"
SPACES_HEADER = "X-Spaces"
SCOPE_MODES = ("inherit", "own")
MAX_SPACES = 8
_SPACE_ID = re.compile(SPACE_ID_PATTERN_TEXT)
_ONE_SPACE = SPACE_ID_PATTERN_TEXT.strip("^$")
# What X-Spaces may hold, as its OpenAPI schema states it.
SPACES_PATTERN_TEXT = rf"^{_ONE_SPACE}(,{_ONE_SPACE}){{0,{MAX_SPACES - 1}}}$"


@dataclass(frozen=True)
class ScopeClaim:
    """The scope a request names: an agent, a run, whether it reads that agent's (run's) own
    memory only (`own`) or with the user's unscoped memory (`inherit`, the default), and the
    shared spaces a query reads besides. Built by `scope_claim`, which validates it."""

    agent_id: str | None = None
    run_id: str | None = None
    own: bool = False
    spaces: tuple[str, ...] = ()


NO_CLAIM = ScopeClaim()


class ScopeFields(NamedTuple):
    """How a door names the four scope fields when it refuses one (ValidationFailedError)."""

    agent: str
    run: str
    mode: str
    spaces: str


HEADER_FIELDS = ScopeFields(
    f"header.{AGENT_HEADER}",
    f"header.{RUN_HEADER}",
    f"header.{SCOPE_MODE_HEADER}",
    f"header.{SPACES_HEADER}",
)


def scope_claim(
    agent_id: str | None = None,
    run_id: str | None = None,
    mode: str | None = None,
    spaces: str | None = None,
    *,
    fields: ScopeFields = HEADER_FIELDS,
) -> ScopeClaim:
    """The scope named by a door's headers (or its own fields: `fields` are their names in a
    refusal): agent and run ids follow the user ids' rule; the mode is `inherit` or `own`
    (which narrows nothing without an agent or a run); spaces are a comma-separated list of at
    most MAX_SPACES ids."""
    agent = validate_user_id(agent_id, fields.agent) if agent_id is not None else None
    run = validate_user_id(run_id, fields.run) if run_id is not None else None
    if mode is not None and mode not in SCOPE_MODES:
        raise ValidationFailedError(
            f"{fields.mode}: must be one of {', '.join(SCOPE_MODES)}", fields.mode
        )
    own = mode == "own"  # without an agent or a run it narrows nothing
    chosen: tuple[str, ...] = ()
    if spaces is not None:
        parts = spaces.split(",")
        if not all(_SPACE_ID.fullmatch(p) for p in parts):
            raise ValidationFailedError(
                f"{fields.spaces}: comma-separated space ids (lowercase letters, digits, _ . -)",
                fields.spaces,
            )
        if len(parts) > MAX_SPACES:
            raise ValidationFailedError(
                f"{fields.spaces}: at most {MAX_SPACES} space ids", fields.spaces
            )
        chosen = tuple(dict.fromkeys(parts))  # a space named twice is read once
    return ScopeClaim(agent, run, own, chosen)


def headers_claim(headers: Mapping[str, str]) -> ScopeClaim:
    """The scope named by a request's headers (X-Agent-Id, X-Run-Id, X-Scope-Mode, X-Spaces),
    for a door that reads them itself (MCP over HTTP, the chat proxy)."""
    return scope_claim(
        headers.get(AGENT_HEADER),
        headers.get(RUN_HEADER),
        headers.get(SCOPE_MODE_HEADER),
        headers.get(SPACES_HEADER),
    )


def with_claim(caller: Caller, claim: ScopeClaim) -> Caller:
    """The caller within the claimed scope. A key bound to an agent keeps it: a claim naming
    another agent is refused (403)."""
    agent = claim.agent_id
    if caller.agent_id is not None:
        if agent is not None and agent != caller.agent_id:
            raise PermissionDeniedError(f"{AGENT_HEADER} names another agent than the API key's")
        agent = caller.agent_id
    return dataclasses.replace(
        caller, agent_id=agent, run_id=claim.run_id, own=claim.own, spaces=claim.spaces
    )


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
    claim: ScopeClaim = NO_CLAIM,
) -> Caller:
    """Who a call acts for, from the credential a door read (`token`, None when it presented
    none) and the user it names (`claimed_user`, the X-User-Id header).

    `missing` is what a caller without a credential is told where one is required;
    `per_user_only` (MCP) accepts per-user keys alone and is the refusal of anything else;
    `trusted` says the door signed the operator in itself (the console), who names the user;
    `user_field` is where the door read `claimed_user` (`query.user` in the console), which a
    refusal of a missing or invalid user id names; `claim` is the memory scope the call names
    (its agent, run and spaces: scope_claim).
    """
    service = trusted or is_service_key(resources, token)
    if token is not None and not service and looks_like_key(token):
        caller = await resources.keys.authenticate(token)
        if claimed_user is not None and claimed_user != caller.user_id:
            raise PermissionDeniedError("X-User-Id names another user than the API key's")
        return with_claim(caller, claim)
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
    return with_claim(Caller(validate_user_id(claimed_user, user_field)), claim)
