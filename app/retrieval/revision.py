"""Is the newer of two memories a revision of the older? A pair model for newer wins.

The ranking reads each memory against the question alone, so of two memories about one thing
("Tama wants to study architecture", months later "Tama is set on an electrical
apprenticeship") the older may come first. app/retrieval/topics.py lifts the newer of a pair
to where the older stands when the pair is one topic. Which pairs are one topic was a set of
hand-set cosine thresholds (`decision_link`; `tie_link` and `tie_ratio`: a near tie of close
memories); this model learns it from the corpus's old/new pairs, beside them. It reads a pair of memories the
question found, the older ranked above the newer, and gives P(the newer revises the older,
so the newer should come first), from:

- the cosine between the two memories' stored vectors (one subject);
- how close the newer's relevance to the question stands to the older's (log of the ratio);
- whether both are decisions (a stance a later one revises), and whether they are of one type;
- each one's relevance (a newer memory the question hardly finds is a neighbour, not the
  answer).

How old either memory is is not a feature: an agent writes both through the API seconds
apart as often as months apart, and the corpus's ages are how its writers chose them.

Fitted per embedder (the cosines are its) by `python -m eval.fit_revision` (logistic
regression on the calibration people's ranked pairs, numpy) into
`revision_models/<embedder>.json`; pure arithmetic here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from app.retrieval.relevance import file_stem

MODELS_DIR = Path(__file__).with_name("revision_models")
REVISION_FEATURES = (
    "cosine",  # between the two memories' stored vectors
    "log_ratio",  # log(the newer's relevance / the older's), the older ranked first
    "both_decisions",  # 1: both are decisions
    "same_type",  # 1: both of one type
    "newer_relevance",
    "older_relevance",
)
DECISION = "decision"
_SMALLEST = 1e-4  # relevance under this reads as this (the log of a ratio stays finite)


def revision_features(
    cosine: float,
    older_relevance: float,
    newer_relevance: float,
    older_type: str | None,
    newer_type: str | None,
) -> list[float]:
    """REVISION_FEATURES of one pair (types: the memories' own, None when unknown)."""
    ratio = max(newer_relevance, _SMALLEST) / max(older_relevance, _SMALLEST)
    same = older_type is not None and older_type == newer_type
    return [
        cosine,
        math.log(ratio),
        float(same and older_type == DECISION),
        float(same),
        newer_relevance,
        older_relevance,
    ]


@dataclass(frozen=True)
class RevisionModel:
    """REVISION_FEATURES -> logistic regression -> P(the newer revises the older)."""

    weights: tuple[float, ...]
    bias: float
    version: str = ""

    def probability(self, x: Sequence[float]) -> float:
        if len(x) != len(self.weights):
            raise ValueError(f"{len(x)} revision features for {len(self.weights)} weights")
        z = self.bias + sum(w * v for w, v in zip(self.weights, x, strict=True))
        z = max(-30.0, min(30.0, z))
        return 1.0 / (1.0 + math.exp(-z))

    def to_json(self, extra: dict[str, object] | None = None) -> str:
        body = {
            "version": self.version,
            "features": list(REVISION_FEATURES),
            "weights": [round(v, 6) for v in self.weights],
            "bias": round(self.bias, 6),
            **(extra or {}),
        }
        return json.dumps(body, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> RevisionModel:
        body = json.loads(text)
        if body["features"] != list(REVISION_FEATURES):
            raise ValueError(f"revision model features {body['features']}, not this code's")
        return cls(
            weights=tuple(float(w) for w in body["weights"]),
            bias=float(body["bias"]),
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
