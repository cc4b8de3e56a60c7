"""Calibration of raw arm scores into a relevance in [0, 1], and the final ranking."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from app.retrieval.fusion import convex, min_max, rrf
from app.retrieval.presets import RetrievalPreset

K = TypeVar("K", bound=Hashable)


def clamp01(value: float) -> float:
    return 0.0 if value < 0.0 else 1.0 if value > 1.0 else value


def vector_relevance(cosine: float, floor: float, ceiling: float) -> float:
    """Linear map of cosine similarity: floor -> 0, ceiling -> 1."""
    return clamp01((cosine - floor) / max(ceiling - floor, 1e-9))


def keyword_relevance(bm25: float, max_bm25: float, saturation: float) -> float:
    """BM25 as a share of the best score the query could reach, saturating at `saturation`."""
    if max_bm25 <= 0.0 or bm25 <= 0.0:
        return 0.0
    return clamp01(bm25 / (max_bm25 * saturation))


@dataclass(frozen=True)
class Ranked(Generic[K]):
    key: K
    fused: float  # the fusion score that orders results
    relevance: float  # calibrated, comparable with min_score
    keyword: float  # calibrated keyword relevance
    semantic: float  # calibrated semantic relevance


def rank(
    keyword_scores: Mapping[K, float],
    max_bm25: float,
    cosines: Mapping[K, float],
    preset: RetrievalPreset,
) -> list[Ranked[K]]:
    """Fuse the two arms and calibrate; items with no signal at all are dropped.

    An item is kept only if it matched a keyword or its cosine is above the floor: an unrelated
    query returns nothing instead of the least-bad nearest neighbours.
    """
    kw_rel = {
        k: keyword_relevance(v, max_bm25, preset.keyword_saturation) for k, v in keyword_scores.items()
    }
    vec_rel = {
        k: vector_relevance(v, preset.vector_floor, preset.vector_ceiling) for k, v in cosines.items()
    }
    wk = preset.keyword_weight if preset.use_keyword else 0.0
    wv = preset.vector_weight if preset.use_vector else 0.0
    total = (wk + wv) or 1.0
    keys = [k for k in {**keyword_scores, **cosines} if kw_rel.get(k, 0.0) > 0 or vec_rel.get(k, 0.0) > 0]

    if preset.fusion == "rrf":
        by_kw = sorted((k for k in keys if k in keyword_scores), key=lambda k: -keyword_scores[k])
        by_vec = sorted((k for k in keys if k in cosines), key=lambda k: -cosines[k])
        fused = dict(rrf([by_kw, by_vec], [wk, wv], k=preset.rrf_k))
    else:
        kw_norm = min_max({k: keyword_scores[k] for k in keys if k in keyword_scores})
        vec_norm = min_max({k: cosines[k] for k in keys if k in cosines})
        fused = dict(convex([kw_norm, vec_norm], [wk / total, wv / total]))

    results = [
        Ranked(
            key=k,
            fused=fused.get(k, 0.0),
            relevance=(wk * kw_rel.get(k, 0.0) + wv * vec_rel.get(k, 0.0)) / total,
            keyword=kw_rel.get(k, 0.0),
            semantic=vec_rel.get(k, 0.0),
        )
        for k in keys
    ]
    results = [r for r in results if r.relevance > 0.0]
    results.sort(key=lambda r: (-r.fused, -r.relevance))
    return results


def apply_thresholds(
    ranked: list[Ranked[K]], min_score: float, relative_cutoff: float
) -> list[Ranked[K]]:
    """Keep items at or above min_score and within `relative_cutoff` of the best relevance."""
    kept = [r for r in ranked if r.relevance >= min_score]
    if relative_cutoff > 0.0 and kept:
        best = max(r.relevance for r in kept)
        kept = [r for r in kept if r.relevance >= relative_cutoff * best]
    return kept
