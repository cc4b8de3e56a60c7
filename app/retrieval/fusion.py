"""Rank fusion: reciprocal rank fusion and a convex combination of normalised scores."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

K = TypeVar("K", bound=Hashable)

RRF_K = 60


def rrf(
    rankings: Sequence[Sequence[K]], weights: Sequence[float] | None = None, k: int = RRF_K
) -> list[tuple[K, float]]:
    """score(d) = sum_i w_i / (k + rank_i(d)), ranks 1-based; best first, ties by first seen."""
    if weights is None:
        weights = [1.0] * len(rankings)
    if len(weights) != len(rankings):
        raise ValueError("one weight per ranking")
    scores: dict[K, float] = {}
    for ranking, weight in zip(rankings, weights, strict=True):
        for rank, key in enumerate(ranking, start=1):
            scores[key] = scores.get(key, 0.0) + weight / (k + rank)
    return sorted(scores.items(), key=lambda kv: -kv[1])


def min_max(scores: Mapping[K, float]) -> dict[K, float]:
    """Scale to [0, 1] within one list; a list of equal scores maps to 1.0."""
    if not scores:
        return {}
    low, high = min(scores.values()), max(scores.values())
    if high - low <= 1e-12:
        return dict.fromkeys(scores, 1.0)
    return {key: (value - low) / (high - low) for key, value in scores.items()}


def max_scaled(scores: Mapping[K, float]) -> dict[K, float]:
    """Divide by the list's best score (keeps ratios; the worst candidate is not forced to 0)."""
    if not scores:
        return {}
    high = max(scores.values())
    if high <= 1e-12:
        return dict.fromkeys(scores, 0.0)
    return {key: max(value, 0.0) / high for key, value in scores.items()}


def z_scored(scores: Mapping[K, float]) -> dict[K, float]:
    """Standard scores within one list, squashed to (0, 1) with a logistic."""
    import math

    if not scores:
        return {}
    values = list(scores.values())
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values)) or 1.0
    return {key: 1.0 / (1.0 + math.exp(-(value - mean) / std)) for key, value in scores.items()}


def convex(
    score_maps: Sequence[Mapping[K, float]], weights: Sequence[float]
) -> list[tuple[K, float]]:
    """sum_i w_i * s_i(d) over already-normalised scores (missing = 0); best first."""
    if len(weights) != len(score_maps):
        raise ValueError("one weight per score map")
    fused: dict[K, float] = {}
    for scores, weight in zip(score_maps, weights, strict=True):
        for key, value in scores.items():
            fused[key] = fused.get(key, 0.0) + weight * value
    return sorted(fused.items(), key=lambda kv: -kv[1])
