"""The words of the stored data every layer shares: memory types, message roles and the rules of
a tag. The ORM models (and the table's check constraints), the wire schemas, the services, the
console and the CLI all read them from here; this module imports nothing of the project, so
the schemas need not import the models to validate what the tables hold. Also the keyword
index's context weights, which the retrieval preset carries and the index's writers apply."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

USER_ID_LENGTH = 255
# Shared spaces (migration 0019_memory_scopes, docs/agents.md): a space's memories are stored
# under the owner key `space:<id>` in place of a user id; user ids may not start with it.
SPACE_PREFIX = "space:"
SPACE_ID_LENGTH = 64
SPACE_ID_PATTERN_TEXT = r"^[a-z0-9][a-z0-9_.-]{0,63}$"
SpaceAccess = Literal["read", "write"]
SPACE_ACCESS: tuple[SpaceAccess, ...] = ("read", "write")
MemoryType = Literal["fact", "preference", "decision", "note"]
MEMORY_TYPES: tuple[MemoryType, ...] = get_args(MemoryType)
MESSAGE_ROLES = ("user", "assistant", "system")
# Tags on a memory (migration 0014_tags_usage): at most MAX_TAGS labels of 1-MAX_TAG_CHARS
# characters each, lowercase letters, digits and `_ - . :` (the schemas validate, the table's
# check constraint holds the count).
MAX_TAGS = 16
MAX_TAG_CHARS = 32
TAG_PATTERN_TEXT = rf"^[a-z0-9][a-z0-9_.:-]{{0,{MAX_TAG_CHARS - 1}}}$"


def space_owner(space_id: str) -> str:
    """The owner key a space's rows carry in their user_id column."""
    return SPACE_PREFIX + space_id


# The unit separator joins a signed scope's parts (ids are printable ASCII: none holds it).
SCOPE_SEPARATOR = "\x1f"


@dataclass(frozen=True)
class MemoryScope:
    """Whose memory a request reads and writes (docs/agents.md).

    The user's, always. With `agent_id` (or `run_id`), the rows of that agent (run) and the
    user's unscoped rows, never another agent's (run's); with `own` as well, only that agent's
    (run's) rows. Writes are stamped with the agent and run. `spaces`: the shared spaces a query
    reads besides (each needs the user's grant; row-level security checks it)."""

    user_id: str
    agent_id: str | None = None
    run_id: str | None = None
    own: bool = False
    spaces: tuple[str, ...] = ()

    @property
    def whole(self) -> bool:
        """Whether this is the user's whole memory: no agent, run, own flag or space."""
        return self == MemoryScope(self.user_id)

    def signed_message(self) -> str:
        """What the database's scope key signs (migration 0019: pgrecall_scope_user()): the
        user alone when no agent, run or own flag is set, else all four joined."""
        own = "on" if self.own else ""
        rest = SCOPE_SEPARATOR.join((self.agent_id or "", self.run_id or "", own))
        if rest == SCOPE_SEPARATOR * 2:
            return self.user_id
        return self.user_id + SCOPE_SEPARATOR + rest


def as_scope(user: str | MemoryScope) -> MemoryScope:
    """A user id as the scope of that user's whole memory; a scope as it is."""
    return user if isinstance(user, MemoryScope) else MemoryScope(user)


@dataclass(frozen=True)
class ContextWeights:
    """How the lexemes of a turn's context count in the keyword index: the item's own text
    counts fully, the neighbouring turns of a dialogue with these weights, so a turn is found by
    the words of the exchange it belongs to without outranking the turn that says them. Chosen
    on LoCoMo (docs/retrieval.md)."""

    previous: float = 0.5
    next: float = 0.5
