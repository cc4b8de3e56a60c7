"""What the model must answer, parsed strictly, and the checks that keep to the user's word.

Pure (no I/O). The model sees the batch's user turns as `t1, t2, ...` and the user's closest
stored memories as `k1, k2, ...`; these short aliases are all it may cite. A fact is kept only
if it cites at least one of the batch's user turns, every alias it cites is one, the cited
turns support its words, and an UPDATE names one of the memories it was shown. Anything else is
dropped with a reason, never stored in part.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

MAX_FACTS = 50
MAX_FACT_CHARS = 1000
# Share of a fact's content words that must appear in the turns it cites (paraphrase is fine:
# "User relocated to Lisbon" for "we moved to Lisbon"). Names and numbers must all appear.
MIN_SUPPORT = 0.34
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_TOKEN = re.compile(r"[^\W_]+(?:'[^\W_]+)?", re.UNICODE)
# Words that say nothing about support (the model writes "User prefers ..." for "I prefer ...").
_FILLER_WORDS = """
the a an and or but of to in on at for with from by as is are was were be been being has have
had do does did not no this that these those it its his her their they them he she we you your
our i me my mine user users s t now also very really just"""
_FILLER = frozenset(_FILLER_WORDS.split())


class MalformedOutputError(ValueError):
    """The model's answer is not exactly the JSON object the schema describes."""


class ExtractedFact(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    content: str = Field(min_length=1, max_length=MAX_FACT_CHARS)
    type: Literal["fact", "preference", "decision"]
    sources: list[str] = Field(min_length=1, max_length=20)
    action: Literal["add", "update", "none"]
    replaces: str | None = None


class ExtractionOutput(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    facts: list[ExtractedFact] = Field(max_length=MAX_FACTS)


def parse_output(raw: str | None) -> ExtractionOutput:
    """The model's answer as ExtractionOutput; MalformedOutputError for anything else (no
    fences, no prose around the object, no extra keys, no missing ones)."""
    if raw is None or not raw.strip():
        raise MalformedOutputError("empty answer")
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise MalformedOutputError(f"not JSON: {exc.msg} at {exc.pos}") from None
    try:
        return ExtractionOutput.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "answer"
        raise MalformedOutputError(f"{where}: {first['msg']}") from None


@dataclass(frozen=True)
class Kept:
    """A fact that passed every check, with its sources resolved to turn aliases."""

    content: str
    type: str
    action: str  # add | update | none
    sources: tuple[str, ...]
    replaces: str | None


@dataclass(frozen=True)
class Dropped:
    content: str
    reason: str


def words(value: str) -> list[str]:
    """Lower-case content words (letters and digits), filler removed."""
    return [w for w in _WORD.findall(value.lower()) if w not in _FILLER]


def _matches(word: str, vocabulary: set[str]) -> bool:
    """The word, or one sharing its first five letters (prefer/prefers, moved/moving)."""
    if word in vocabulary:
        return True
    if len(word) < 5:
        return False
    stem = word[:5]
    return any(v.startswith(stem) for v in vocabulary if len(v) >= 5)


def specifics(content: str) -> list[str]:
    """Names and numbers in a fact: tokens with a digit, and capitalised words after the
    first word (lower-cased). These are what a fact invented from elsewhere brings in."""
    found = []
    for n, token in enumerate(_TOKEN.findall(content)):
        bare = token.split("'")[0]
        specific = any(c.isdigit() for c in bare) or (n > 0 and bare[:1].isupper())
        if specific and bare.lower() not in _FILLER:
            found.append(bare.lower())
    return found


def support(content: str, turns: Sequence[str]) -> float:
    """Share of the fact's content words found in the turns (0.0 for a fact of filler only)."""
    needed = words(content)
    if not needed:
        return 0.0
    vocabulary = {w for t in turns for w in words(t)}
    return sum(_matches(w, vocabulary) for w in needed) / len(needed)


def check_facts(
    output: ExtractionOutput,
    turns: Mapping[str, str],
    memories: Mapping[str, str],
) -> tuple[list[Kept], list[Dropped]]:
    """Keep the facts the user's own turns support; drop the rest with a reason.

    `turns`: alias -> text of the batch's user turns (the only citable sources).
    `memories`: alias -> text of the stored memories the model was shown.
    """
    kept: list[Kept] = []
    dropped: list[Dropped] = []
    seen: set[str] = set()
    for fact in output.facts:
        content = " ".join(fact.content.split())
        reason = _reject(fact, content, turns, memories)
        if reason is None and content.lower() in seen and fact.action != "none":
            reason = "repeated in the same answer"
        if reason is not None:
            dropped.append(Dropped(content, reason))
            continue
        seen.add(content.lower())
        kept.append(
            Kept(content, fact.type, fact.action, tuple(dict.fromkeys(fact.sources)), fact.replaces)
        )
    return kept, dropped


def _reject(
    fact: ExtractedFact, content: str, turns: Mapping[str, str], memories: Mapping[str, str]
) -> str | None:
    if not content:
        return "empty content"
    foreign = [s for s in fact.sources if s not in turns]
    if foreign:
        return f"cites {', '.join(sorted(set(foreign)))}, not a user turn of this batch"
    if fact.action == "update":
        if fact.replaces is None or fact.replaces not in memories:
            return f"update of {fact.replaces!r}, not one of the memories shown"
    elif fact.replaces is not None:
        return f"{fact.action} with replaces set"
    if fact.action != "none":
        cited = [turns[s] for s in fact.sources]
        vocabulary = {w for t in cited for w in words(t)}
        unknown = [w for w in specifics(content) if not _matches(w, vocabulary)]
        if unknown:
            return f"names {', '.join(unknown)}, which the cited user turns do not"
        share = support(content, cited)
        if share < MIN_SUPPORT:
            return f"not supported by the cited user turns (support {share:.2f})"
    return None
