"""A learned relevance: the probability that an item answers the question.

A logistic regression over a few features of each candidate, all computed from what the two
arms already return (no extra SQL): the cosine and its gap to the best cosine of the query, BM25
as a share of the ideal score, the same share over the question's words that are not names
(app/retrieval/names.py), a name-only-match flag, and whether the item is a dialogue turn (the
model weighs short curated memories and long turns differently). Fitted offline by
`python -m eval.fit_relevance` (numpy, fixed data, cross-validated by user); the coefficients
live in `relevance_model.json` beside this file and are loaded once. Pure.
"""

from __future__ import annotations

import json
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TypeVar

K = TypeVar("K", bound=Hashable)

MODEL_PATH = Path(__file__).with_name("relevance_model.json")

FEATURES: tuple[str, ...] = (
    "cosine",  # the item's cosine (a turn's blended with its best sentence's)
    "cosine_gap",  # cosine - the best cosine among the query's candidates (<= 0)
    "keyword",  # BM25 / the ideal document's BM25 (every query lexeme)
    "plain",  # the same over the lexemes that are not names
    "name_only",  # 1: the item matched the question's names and nothing else
    "keyword_top",  # BM25 / the best BM25 among the query's candidates
    "message",  # 1: a dialogue turn, 0: a curated memory
    "message_cosine",  # message x cosine
    "message_plain",  # message x plain
)


@dataclass(frozen=True)
class RelevanceModel:
    """weights . features + bias -> logit of P(answers the question)."""

    version: str
    weights: tuple[float, ...]
    bias: float

    def logit(self, x: Sequence[float]) -> float:
        return self.bias + sum(w * v for w, v in zip(self.weights, x, strict=True))

    def probability(self, x: Sequence[float]) -> float:
        z = self.logit(x)
        # clipped so the odds stay finite (the stages multiply odds)
        z = max(-30.0, min(30.0, z))
        return 1.0 / (1.0 + math.exp(-z))

    def to_json(self, extra: Mapping[str, object] | None = None) -> str:
        body = {
            "version": self.version,
            "features": list(FEATURES),
            "weights": {name: round(w, 6) for name, w in zip(FEATURES, self.weights, strict=True)},
            "bias": round(self.bias, 6),
            **(extra or {}),
        }
        return json.dumps(body, indent=2) + "\n"


def parse_model(text: str) -> RelevanceModel:
    """The model of a JSON document; ValueError when its features are not FEATURES."""
    body = json.loads(text)
    weights = body["weights"]
    if list(body.get("features", [])) != list(FEATURES) or set(weights) != set(FEATURES):
        raise ValueError(f"relevance model features {body.get('features')} != {list(FEATURES)}")
    return RelevanceModel(
        version=str(body["version"]),
        weights=tuple(float(weights[name]) for name in FEATURES),
        bias=float(body["bias"]),
    )


@cache
def load_model(path: Path = MODEL_PATH) -> RelevanceModel:
    """The committed model (read once per process)."""
    return parse_model(path.read_text())


def features(
    keyword_scores: Mapping[K, float],
    plain_scores: Mapping[K, float],
    max_bm25: float,
    cosines: Mapping[K, float],
    is_message: Mapping[K, bool],
) -> dict[K, tuple[float, ...]]:
    """FEATURES for every candidate of either arm, in FEATURES order.

    An item the vector arm did not return gets the lowest cosine it returned (its own is at
    most that); an item the keyword arm did not return matched no query lexeme (0).
    """
    keys = list({**keyword_scores, **cosines})
    floor = min(cosines.values(), default=0.0)
    best_cos = max(cosines.values(), default=0.0)
    best_bm25 = max(keyword_scores.values(), default=0.0)
    ideal = max_bm25 if max_bm25 > 0.0 else 1.0
    out: dict[K, tuple[float, ...]] = {}
    for k in keys:
        cos = cosines.get(k, floor)
        bm25 = keyword_scores.get(k, 0.0)
        plain = plain_scores.get(k, bm25) if bm25 > 0.0 else 0.0
        message = 1.0 if is_message.get(k, False) else 0.0
        kw, pl = bm25 / ideal, plain / ideal
        out[k] = (
            cos,
            cos - best_cos,
            kw,
            pl,
            1.0 if bm25 > 0.0 and plain <= 0.0 else 0.0,
            bm25 / best_bm25 if best_bm25 > 0.0 else 0.0,
            message,
            message * cos,
            message * pl,
        )
    return out


def odds(probability: float) -> float:
    """p / (1 - p): the ranking score of the learned preset (stages multiply it)."""
    p = min(probability, 1.0 - 1e-9)
    return p / (1.0 - p)


def probability_of(odds_value: float) -> float:
    return odds_value / (1.0 + odds_value) if odds_value > 0.0 else 0.0


def recency(age_days: float, half_life_days: float) -> float:
    """exp(-age / half_life): 1 for an item of today, 1/e after one half-life (issue 28's form)."""
    if half_life_days <= 0.0:
        return 0.0
    return math.exp(-max(age_days, 0.0) / half_life_days)


def blend(relevance: float, age_days: float, weight: float, half_life_days: float) -> float:
    """(1 - w) * relevance + w * exp(-age_days / half_life): what issue 28 specifies for a
    per-request recency weight w."""
    if weight <= 0.0:
        return relevance
    return (1.0 - weight) * relevance + weight * recency(age_days, half_life_days)
