"""Who a question is about: participant names it mentions, matched against the turns' speakers.

In a conversation of named participants (a group chat, a transcript, a support thread), a
question about one of them ("What books has Tim read?") is usually answered by that person's
own turns, not by the others' reactions to them. The service knows a turn's speaker when the
writer gave it (`metadata.speaker` on the message); this module only reads names. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import TypeVar

from app.retrieval.scoring import Ranked

K = TypeVar("K")

# A speaker value is used only if it looks like a name: 2-64 characters with a letter in it.
MAX_NAME_CHARS = 64
_HAS_LETTER = re.compile(r"[^\W\d_]")


def usable_speaker(value: object) -> str | None:
    """The speaker as a name to match, or None for a missing, empty, odd or oversized value."""
    if not isinstance(value, str):
        return None
    name = " ".join(value.split())
    if not 2 <= len(name) <= MAX_NAME_CHARS or not _HAS_LETTER.search(name):
        return None
    return name


def named_speakers(question: str, speakers: Iterable[str]) -> set[str]:
    """The speakers the question names: whole words, case-insensitive ("Tim's" names Tim,
    "Timothy" and "time" do not)."""
    named: set[str] = set()
    for speaker in set(speakers):
        pattern = r"(?<!\w)" + re.escape(speaker.casefold()) + r"(?!\w)"
        if re.search(pattern, question.casefold()):
            named.add(speaker)
    return named


def prefer_named(
    ranked: list[Ranked[K]],
    speakers: Mapping[K, str],
    question: str,
    factor: float,
) -> list[Ranked[K]]:
    """The turns of the speakers the question names get fused and relevance x (1 + factor),
    relevance capped at 1, and the ranking is re-sorted.

    Relevance moves too: the turn's own words rarely hold its speaker's name, yet who said it
    is what the question asks about, so the agent tool's floor and relative cut should see the
    match. A multiplier keeps a turn that matched nothing at nothing. factor <= 0 is off.
    """
    if factor <= 0.0 or not speakers:
        return ranked
    named = named_speakers(question, speakers.values())
    if not named:
        return ranked
    out = [
        Ranked(
            r.key,
            r.fused * (1.0 + factor),
            min(1.0, r.relevance * (1.0 + factor)),
            r.keyword,
            r.semantic,
        )
        if speakers.get(r.key) in named
        else r
        for r in ranked
    ]
    out.sort(key=lambda r: (-r.fused, -r.relevance))
    return out
