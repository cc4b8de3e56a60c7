"""Is the newer of two memories a revision of the older? A pair model for newer wins.

The ranking reads each memory against the question alone, so of two memories about one thing
("Tama wants to study architecture", months later "Tama is set on an electrical
apprenticeship") the older may come first. app/retrieval/topics.py lifts the newer of a pair
to where the older stands when the pair is one topic. Which pairs are one topic was a set of
hand-set cosine thresholds (`decision_link`; `tie_link` and `tie_ratio`: a near tie of close
memories); this model learns it from the corpus's old/new pairs, beside them. It reads a
pair of memories the question found, the older ranked above the newer, and gives P(the newer
revises the older, so the newer should come first), from:

- the cosine between the two memories' stored vectors (one subject);
- how close the newer's relevance to the question stands to the older's (log of the ratio);
- whether both are decisions (a stance a later one revises), and whether they are of one type;
- each one's relevance (a newer memory the question hardly finds is a neighbour, not the
  answer);
- whether the newer one's words say that something changed ("moved to", "from January",
  "now", "no longer", "took over": CHANGE_WORDS, English), and how many content words the two
  share (the same rent, car or appointment).

The model reads only pairs of memories as long as those it was fitted on (`max_words`, the
longest calibration memory): a long account (a runbook, a care plan) shares a topic and a
"now" with its neighbours without revising them, and the fit has never seen one.

How old either memory is is not a feature: an agent writes both through the API seconds
apart as often as months apart, and the corpus's ages are how its writers chose them.

Fitted per embedder (the cosines are its) by `python -m eval.fit_revision` (logistic
regression on the calibration people's ranked pairs, numpy) into
`revision_models/<embedder>.json`; pure arithmetic here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from app.retrieval.phatic import content_words
from app.retrieval.relevance import file_stem, model_body, model_text, rounded, sigmoid

MODELS_DIR = Path(__file__).with_name("revision_models")
REVISION_FEATURES = (
    "cosine",  # between the two memories' stored vectors
    "log_ratio",  # log(the newer's relevance / the older's), the older ranked first
    "both_decisions",  # 1: both are decisions
    "same_type",  # 1: both of one type
    "newer_relevance",
    "older_relevance",
    "newer_says_change",  # 1: the newer memory's words say that something changed
    "shared_words",  # content words (phatic.content_words) the two share (at most SHARED_CAP)
)
DECISION = "decision"
# How an update is worded in English: a memory that records a change usually says so.
CHANGE_WORDS = re.compile(
    r"\b(now|no longer|any ?more|instead|since|moved|moving|switch(?:ed|ing)?|chang(?:ed|es|ing)"
    r"|replac(?:ed|es|ing)|resched\w*|postponed|pushed back|brought forward|took over"
    r"|taken over|new|updated?|from (?:next|this|now|the start of|january|february|march|april"
    r"|may|june|july|august|september|october|november|december|\d))\b",
    re.IGNORECASE,
)
SHARED_CAP = 5
_SMALLEST = 1e-4  # relevance under this reads as this (the log of a ratio stays finite)


@dataclass(frozen=True)
class MemoryText:
    """What the model reads of one memory, worked out once per memory (a memory is in up to
    seven of a question's pairs): its type, its length in words, its content words, and
    whether its words say that something changed."""

    type: str | None
    words: int
    content: frozenset[str]
    says_change: bool


def memory_text(text: str, kind: str | None) -> MemoryText:
    """A memory's MemoryText (`kind`: its type, None for a turn or when unknown)."""
    return MemoryText(
        kind,
        len(text.split()),
        frozenset(content_words(text)),
        CHANGE_WORDS.search(text) is not None,
    )


def revision_features(
    cosine: float,
    older_relevance: float,
    newer_relevance: float,
    older: MemoryText,
    newer: MemoryText,
) -> list[float]:
    """REVISION_FEATURES of one pair."""
    ratio = max(newer_relevance, _SMALLEST) / max(older_relevance, _SMALLEST)
    same = older.type is not None and older.type == newer.type
    return [
        cosine,
        math.log(ratio),
        float(same and older.type == DECISION),
        float(same),
        newer_relevance,
        older_relevance,
        float(newer.says_change),
        float(min(len(older.content & newer.content), SHARED_CAP)),
    ]


@dataclass(frozen=True)
class RevisionModel:
    """REVISION_FEATURES -> logistic regression -> P(the newer revises the older)."""

    weights: tuple[float, ...]
    bias: float
    # The longest memory (in words) of the pairs it was fitted on: longer ones it does not read.
    max_words: int
    version: str = ""

    def reads(self, *words: int) -> bool:
        """Whether memories of these lengths (in words) are all within the lengths the model
        was fitted on."""
        return max(words) <= self.max_words

    def probability(self, x: Sequence[float]) -> float:
        if len(x) != len(self.weights):
            raise ValueError(f"{len(x)} revision features for {len(self.weights)} weights")
        return sigmoid(self.bias + sum(w * v for w, v in zip(self.weights, x, strict=True)))

    def to_json(self, extra: dict[str, object] | None = None) -> str:
        body = {
            "version": self.version,
            "features": list(REVISION_FEATURES),
            "weights": rounded(self.weights),
            "bias": round(self.bias, 6),
            "max_words": self.max_words,
        }
        return model_text(body, extra)

    @classmethod
    def from_json(cls, text: str) -> RevisionModel:
        body = model_body(text, REVISION_FEATURES, "revision")
        return cls(
            weights=tuple(float(w) for w in body["weights"]),
            bias=float(body["bias"]),
            max_words=int(body["max_words"]),
            version=str(body.get("version", "")),
        )


def revision_file(embedder: str, directory: Path = MODELS_DIR) -> Path:
    """The revision model over `embedder`'s cosines (whether or not it exists)."""
    return directory / (file_stem(embedder) + ".json")


@cache
def revision_model_for(embedder: str) -> RevisionModel | None:
    """The embedder's revision model (read once per process), None when it has none."""
    path = revision_file(embedder)
    return RevisionModel.from_json(path.read_text()) if path.exists() else None
