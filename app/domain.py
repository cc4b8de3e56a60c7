"""The words of the stored data every layer shares: memory types, message roles and the rules of
a tag. The ORM models (and the table's check constraints), the wire schemas, the services, the
console and the CLI all read them from here; this module imports nothing of the project, so
the schemas need not import the models to validate what the tables hold. Also the keyword
index's context weights, which the retrieval preset carries and the index's writers apply."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

USER_ID_LENGTH = 255
MemoryType = Literal["fact", "preference", "decision", "note"]
MEMORY_TYPES: tuple[MemoryType, ...] = get_args(MemoryType)
MESSAGE_ROLES = ("user", "assistant", "system")
# Tags on a memory (migration 0014_tags_usage): at most MAX_TAGS labels of 1-MAX_TAG_CHARS
# characters each, lowercase letters, digits and `_ - . :` (the schemas validate, the table's
# check constraint holds the count).
MAX_TAGS = 16
MAX_TAG_CHARS = 32
TAG_PATTERN_TEXT = rf"^[a-z0-9][a-z0-9_.:-]{{0,{MAX_TAG_CHARS - 1}}}$"


@dataclass(frozen=True)
class ContextWeights:
    """How the lexemes of a turn's context count in the keyword index: the item's own text
    counts fully, the neighbouring turns of a dialogue with these weights, so a turn is found by
    the words of the exchange it belongs to without outranking the turn that says them. Chosen
    on LoCoMo (docs/retrieval.md)."""

    previous: float = 0.5
    next: float = 0.5
