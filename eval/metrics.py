"""Pure retrieval metrics, per-case scoring, aggregation and quality gates.

Conventions shared by every ranking metric:
- ``ranked`` is best-first; only its first ``k`` entries count.
- An id repeated in ``ranked`` counts once (at its first position), so a
  service that returns duplicates cannot inflate a score.
- ``relevant`` empty means there was nothing to find: recall is then 1.0; the
  other metrics reward returning nothing (1.0) and punish returning anything (0.0).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

__all__ = [
    "MEMORY_THRESHOLDS",
    "CaseResult",
    "Summary",
    "Threshold",
    "ThresholdResult",
    "check_thresholds",
    "hit_at_k",
    "mrr_at_k",
    "ndcg_at_k",
    "percentile",
    "precision_at_k",
    "recall_at_k",
    "score_case",
    "summarise",
]

# Rank cut-offs that do not follow the caller's k (the LoCoMo protocol fixes them).
MRR_K = 10
RECALL_CURVE_MAX_K = 10

# Mean scores are sums of floats; without a little slack a run that truly meets
# "recall@5 >= 0.80" could fail on 0.7999999999999999.
_THRESHOLD_TOLERANCE = 1e-9


def _check_k(k: int) -> None:
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")


def _first_hits(ranked: Sequence[str], relevant: Collection[str], k: int) -> list[int]:
    """0-based positions in ranked[:k] of relevant ids, each id counted at its first position."""
    _check_k(k)
    seen: set[str] = set()
    positions: list[int] = []
    for position, item in enumerate(ranked[:k]):
        if item in relevant and item not in seen:
            seen.add(item)
            positions.append(position)
    return positions


def recall_at_k(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    """Share of relevant ids found in the top k (1.0 when there is nothing to find)."""
    hits = _first_hits(ranked, relevant, k)
    if not relevant:
        return 1.0
    return len(hits) / len(set(relevant))


def precision_at_k(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    """Relevant ids among the (at most k) returned ones."""
    hits = _first_hits(ranked, relevant, k)
    returned = len(ranked[:k])
    if returned == 0:
        # Returning nothing is only right when nothing was relevant.
        return 1.0 if not relevant else 0.0
    return len(hits) / returned


def _empty_relevant_score(ranked: Sequence[str]) -> float:
    # With nothing relevant, the only correct answer is an empty one.
    return 1.0 if len(ranked) == 0 else 0.0


def hit_at_k(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    """1.0 if any relevant id is in the top k, else 0.0."""
    hits = _first_hits(ranked, relevant, k)
    if not relevant:
        return _empty_relevant_score(ranked)
    return 1.0 if hits else 0.0


def mrr_at_k(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    """Reciprocal rank of the first relevant id in the top k, else 0.0."""
    hits = _first_hits(ranked, relevant, k)
    if not relevant:
        return _empty_relevant_score(ranked)
    return 1.0 / (hits[0] + 1) if hits else 0.0


def ndcg_at_k(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    """Binary-gain nDCG with log2 discount; ideal ranking puts min(k, |relevant|) hits first."""
    hits = _first_hits(ranked, relevant, k)
    if not relevant:
        return _empty_relevant_score(ranked)
    dcg = sum(1.0 / math.log2(position + 2) for position in hits)
    ideal_hits = min(k, len(set(relevant)))
    idcg = sum(1.0 / math.log2(position + 2) for position in range(ideal_hits))
    return dcg / idcg


def percentile(values: Sequence[float], p: float) -> float:
    """p-th percentile (0-100) with linear interpolation, like numpy.percentile; 0.0 if empty."""
    if not 0.0 <= p <= 100.0:
        raise ValueError(f"percentile must be within [0, 100], got {p}")
    if len(values) == 0:
        return 0.0
    ordered = sorted(float(v) for v in values)
    rank = (len(ordered) - 1) * p / 100.0
    lower = math.floor(rank)
    upper = min(lower + 1, len(ordered) - 1)
    fraction = rank - lower
    return ordered[lower] + (ordered[upper] - ordered[lower]) * fraction


@dataclass(frozen=True)
class CaseResult:
    """Outcome of one evaluation query."""

    case_id: str
    category: str
    ranked: tuple[str, ...]  # returned ids/keys, best first
    relevant: frozenset[str]
    latency_ms: float
    token_count: int
    token_budget: int
    cross_user_leak: bool = False  # set when any returned item belonged to another user
    error: str | None = None  # an errored case keeps whatever it returned (usually nothing)


def metric_names(k: int = 5) -> tuple[str, ...]:
    """Keys of score_case's result, in display order."""
    return (
        f"recall@{k}",
        f"precision@{k}",
        f"hit@{k}",
        f"mrr@{MRR_K}",
        f"ndcg@{k}",
        f"recall@{MRR_K}",
    )


def score_case(r: CaseResult, k: int = 5) -> dict[str, float]:
    """All ranking metrics of one case; mrr and recall@10 are always at 10."""
    names = metric_names(k)
    values = (
        recall_at_k(r.ranked, r.relevant, k),
        precision_at_k(r.ranked, r.relevant, k),
        hit_at_k(r.ranked, r.relevant, k),
        mrr_at_k(r.ranked, r.relevant, MRR_K),
        ndcg_at_k(r.ranked, r.relevant, k),
        recall_at_k(r.ranked, r.relevant, MRR_K),
    )
    return dict(zip(names, values, strict=True))


@dataclass
class Summary:
    """Aggregated scores of a run."""

    overall: dict[str, float] = field(default_factory=dict)
    by_category: dict[str, dict[str, float]] = field(default_factory=dict)
    recall_curve: list[float] = field(default_factory=list)  # mean recall@k, k = 1..10


def _mean(values: Iterable[float]) -> float:
    collected = list(values)
    return sum(collected) / len(collected) if collected else 0.0


def _mean_scores(scores: Sequence[dict[str, float]], names: Sequence[str]) -> dict[str, float]:
    return {name: _mean(s[name] for s in scores) for name in names}


def summarise(results: Sequence[CaseResult], k: int = 5) -> Summary:
    """Mean metrics overall and per category, latency percentiles, safety shares, recall curve.

    With no results every share is 0.0 (not a vacuous 1.0), so an empty run fails its gates.
    """
    _check_k(k)
    names = metric_names(k)
    scores = [score_case(r, k) for r in results]
    count = len(results)
    latencies = [r.latency_ms for r in results]

    overall = _mean_scores(scores, names)
    overall["latency_p50_ms"] = percentile(latencies, 50)
    overall["latency_p95_ms"] = percentile(latencies, 95)
    overall["token_compliance"] = _mean(
        1.0 if r.token_count <= r.token_budget else 0.0 for r in results
    )
    overall["cross_user_safety"] = _mean(0.0 if r.cross_user_leak else 1.0 for r in results)
    overall["cases"] = float(count)
    overall["errors"] = float(sum(1 for r in results if r.error is not None))

    by_category: dict[str, dict[str, float]] = {}
    for category in sorted({r.category for r in results}):
        members = [s for r, s in zip(results, scores, strict=True) if r.category == category]
        row = _mean_scores(members, names)
        row["cases"] = float(len(members))
        by_category[category] = row

    curve = [
        _mean(recall_at_k(r.ranked, r.relevant, depth) for r in results)
        for depth in range(1, RECALL_CURVE_MAX_K + 1)
    ]
    return Summary(overall=overall, by_category=by_category, recall_curve=curve)


@dataclass(frozen=True)
class Threshold:
    """A gate on one overall metric; non-blocking gates only warn."""

    metric: str
    minimum: float | None = None
    maximum: float | None = None
    blocking: bool = True


@dataclass(frozen=True)
class ThresholdResult:
    """A threshold with the value it was checked against."""

    threshold: Threshold
    value: float
    passed: bool

    @property
    def status(self) -> str:
        """PASS, FAIL (blocking gate missed) or WARN (non-blocking gate missed)."""
        if self.passed:
            return "PASS"
        return "FAIL" if self.threshold.blocking else "WARN"


def _passes(value: float, threshold: Threshold) -> bool:
    if math.isnan(value):
        return False
    if threshold.minimum is not None and value < threshold.minimum - _THRESHOLD_TOLERANCE:
        return False
    return not (threshold.maximum is not None and value > threshold.maximum + _THRESHOLD_TOLERANCE)


def check_thresholds(summary: Summary, thresholds: Sequence[Threshold]) -> list[ThresholdResult]:
    """Check each threshold against summary.overall; an unknown metric raises KeyError."""
    results: list[ThresholdResult] = []
    for threshold in thresholds:
        if threshold.metric not in summary.overall:
            # A misspelt gate must not silently pass (or silently vanish).
            known = ", ".join(sorted(summary.overall))
            raise KeyError(f"unknown metric {threshold.metric!r}; known: {known}")
        value = summary.overall[threshold.metric]
        results.append(ThresholdResult(threshold, value, _passes(value, threshold)))
    return results


MEMORY_THRESHOLDS: tuple[Threshold, ...] = (
    # issue 29: the learned default measured 0.960 / 0.911 (docs/retrieval.md): recall less a
    # margin, precision at the target (met since acknowledgements inherit nothing)
    Threshold("recall@5", minimum=0.93),
    Threshold("precision@5", minimum=0.90),
    Threshold("token_compliance", minimum=1.0),
    Threshold("cross_user_safety", minimum=1.0),
    Threshold("latency_p95_ms", maximum=200.0, blocking=False),
)
