"""Hand-computed checks of the retrieval metrics, aggregation and thresholds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from eval.metrics import (
    MEMORY_THRESHOLDS,
    CaseResult,
    Summary,
    Threshold,
    check_thresholds,
    hit_at_k,
    mrr_at_k,
    ndcg_at_k,
    percentile,
    precision_at_k,
    recall_at_k,
    score_case,
    summarise,
)

INV_LOG2_3 = 1 / math.log2(3)  # discount of rank 2
INV_LOG2_6 = 1 / math.log2(6)  # discount of rank 5

# ranked a..f, relevant b (rank 2), e (rank 5) and x (never returned)
RANKED = ("a", "b", "c", "d", "e", "f")
RELEVANT = frozenset({"b", "e", "x"})


# --------------------------------------------------------------------------- single metrics


@pytest.mark.parametrize(
    ("k", "recall", "precision", "hit", "mrr"),
    [
        (1, 0.0, 0.0, 0.0, 0.0),
        (2, 1 / 3, 1 / 2, 1.0, 1 / 2),
        (4, 1 / 3, 1 / 4, 1.0, 1 / 2),
        (5, 2 / 3, 2 / 5, 1.0, 1 / 2),
        (10, 2 / 3, 2 / 6, 1.0, 1 / 2),  # only 6 returned: precision over returned
    ],
)
def test_basic_ranking_at_several_k(
    k: int, recall: float, precision: float, hit: float, mrr: float
) -> None:
    assert recall_at_k(RANKED, RELEVANT, k) == pytest.approx(recall)
    assert precision_at_k(RANKED, RELEVANT, k) == pytest.approx(precision)
    assert hit_at_k(RANKED, RELEVANT, k) == hit
    assert mrr_at_k(RANKED, RELEVANT, k) == pytest.approx(mrr)


def test_ndcg_hand_computed() -> None:
    # DCG = 1/log2(3) + 1/log2(6); ideal = 3 hits at ranks 1..3 = 1 + 1/log2(3) + 1/2
    expected = (INV_LOG2_3 + INV_LOG2_6) / (1 + INV_LOG2_3 + 0.5)
    assert ndcg_at_k(RANKED, RELEVANT, 5) == pytest.approx(expected)
    assert ndcg_at_k(RANKED, RELEVANT, 5) == pytest.approx(0.477624, abs=1e-6)
    # At k=2 the ideal has 2 hits: (1/log2 3) / (1 + 1/log2 3)
    assert ndcg_at_k(RANKED, RELEVANT, 2) == pytest.approx(0.386853, abs=1e-6)
    assert ndcg_at_k(RANKED, RELEVANT, 1) == 0.0


def test_fewer_returned_than_k() -> None:
    ranked, relevant = ["x"], {"x", "y"}
    assert recall_at_k(ranked, relevant, 5) == 0.5
    assert precision_at_k(ranked, relevant, 5) == 1.0
    assert hit_at_k(ranked, relevant, 5) == 1.0
    assert mrr_at_k(ranked, relevant, 5) == 1.0
    assert ndcg_at_k(ranked, relevant, 5) == pytest.approx(1 / (1 + INV_LOG2_3))


def test_perfect_ranking_and_more_relevant_than_k() -> None:
    relevant = {f"r{i}" for i in range(7)}
    ranked = [f"r{i}" for i in range(7)]
    assert ndcg_at_k(ranked, relevant, 5) == pytest.approx(1.0)
    assert recall_at_k(ranked, relevant, 5) == pytest.approx(5 / 7)
    assert precision_at_k(ranked, relevant, 5) == 1.0
    # The ideal is capped at k hits, so a full top 5 is perfect even with 7 relevant.
    assert ndcg_at_k(["n", *ranked], relevant, 5) < 1.0


def test_first_relevant_at_rank_three() -> None:
    assert mrr_at_k(["n1", "n2", "r"], {"r"}, 10) == pytest.approx(1 / 3)
    assert mrr_at_k(["n1", "n2", "r"], {"r"}, 2) == 0.0
    assert ndcg_at_k(["n1", "n2", "r"], {"r"}, 3) == pytest.approx(0.5)  # 1/log2(4)


def test_duplicates_count_once() -> None:
    ranked, relevant = ["a", "a", "b"], {"a"}
    assert recall_at_k(ranked, relevant, 3) == 1.0
    assert precision_at_k(ranked, relevant, 3) == pytest.approx(1 / 3)
    assert ndcg_at_k(ranked, relevant, 3) == pytest.approx(1.0)
    assert mrr_at_k(ranked, relevant, 3) == 1.0


def test_empty_relevant_and_empty_ranked() -> None:
    for metric in (recall_at_k, precision_at_k, hit_at_k, mrr_at_k, ndcg_at_k):
        assert metric([], set(), 5) == 1.0, metric.__name__


def test_empty_relevant_but_something_returned() -> None:
    assert recall_at_k(["a"], set(), 5) == 1.0  # nothing to find
    for metric in (precision_at_k, hit_at_k, mrr_at_k, ndcg_at_k):
        assert metric(["a"], set(), 5) == 0.0, metric.__name__


def test_nothing_returned_but_something_relevant() -> None:
    for metric in (recall_at_k, precision_at_k, hit_at_k, mrr_at_k, ndcg_at_k):
        assert metric([], {"a"}, 5) == 0.0, metric.__name__


def test_no_relevant_in_results() -> None:
    for metric in (recall_at_k, precision_at_k, hit_at_k, mrr_at_k, ndcg_at_k):
        assert metric(["a", "b"], {"c"}, 5) == 0.0, metric.__name__


@pytest.mark.parametrize("metric", [recall_at_k, precision_at_k, hit_at_k, mrr_at_k, ndcg_at_k])
def test_k_must_be_positive(metric) -> None:
    with pytest.raises(ValueError, match="k must be"):
        metric(["a"], {"a"}, 0)


# --------------------------------------------------------------------------- percentile


def test_percentile_hand_computed() -> None:
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([4, 1, 3, 2], 95) == pytest.approx(3.85)  # 3 + 0.85 * (4 - 3)
    assert percentile([4, 1, 3, 2], 0) == 1
    assert percentile([4, 1, 3, 2], 100) == 4
    assert percentile([7.5], 95) == 7.5
    assert percentile([], 50) == 0.0


@pytest.mark.parametrize("p", [0, 5, 33.3, 50, 90, 95, 99, 100])
def test_percentile_matches_numpy(p: float) -> None:
    values = [12.0, 3.5, 99.0, 42.0, 7.25, 7.25, 18.0, 150.5, 1.0]
    assert percentile(values, p) == pytest.approx(float(np.percentile(values, p)))


def test_percentile_rejects_out_of_range() -> None:
    with pytest.raises(ValueError):
        percentile([1.0], 101)
    with pytest.raises(ValueError):
        percentile([1.0], -1)


# --------------------------------------------------------------------------- cases


def _case(
    case_id: str,
    category: str,
    ranked: tuple[str, ...],
    relevant: set[str],
    *,
    latency_ms: float = 10.0,
    token_count: int = 50,
    token_budget: int = 100,
    leak: bool = False,
    error: str | None = None,
) -> CaseResult:
    return CaseResult(
        case_id=case_id,
        category=category,
        ranked=ranked,
        relevant=frozenset(relevant),
        latency_ms=latency_ms,
        token_count=token_count,
        token_budget=token_budget,
        cross_user_leak=leak,
        error=error,
    )


def test_score_case_keys_and_values() -> None:
    case = _case("c", "x", RANKED, set(RELEVANT))
    scores = score_case(case)
    assert list(scores) == ["recall@5", "precision@5", "hit@5", "mrr@10", "ndcg@5", "recall@10"]
    assert scores["recall@5"] == pytest.approx(2 / 3)
    assert scores["precision@5"] == pytest.approx(0.4)
    assert scores["mrr@10"] == pytest.approx(0.5)
    assert scores["recall@10"] == pytest.approx(2 / 3)


def test_score_case_uses_k_only_for_the_k_metrics() -> None:
    scores = score_case(_case("c", "x", RANKED, set(RELEVANT)), k=2)
    assert set(scores) == {"recall@2", "precision@2", "hit@2", "mrr@10", "ndcg@2", "recall@10"}
    assert scores["recall@2"] == pytest.approx(1 / 3)
    assert scores["recall@10"] == pytest.approx(2 / 3)


def _three_cases() -> list[CaseResult]:
    return [
        # recall 1, precision 1/3, hit 1, mrr 1, ndcg 1
        _case("c1", "A", ("r1", "x", "y"), {"r1"}, latency_ms=10.0, token_count=100),
        # recall 1/2, precision 1/2, hit 1, mrr 1/2, ndcg (1/log2 3)/(1 + 1/log2 3); over budget
        _case("c2", "A", ("x", "r2"), {"r2", "r3"}, latency_ms=30.0, token_count=120),
        # nothing returned, leaked, errored: all zero
        _case("c3", "B", (), {"r4"}, latency_ms=20.0, token_count=0, leak=True, error="timeout"),
    ]


def test_summarise_hand_computed() -> None:
    summary = summarise(_three_cases())
    overall = summary.overall
    ndcg_c2 = INV_LOG2_3 / (1 + INV_LOG2_3)
    assert overall["recall@5"] == pytest.approx(0.5)
    assert overall["precision@5"] == pytest.approx((1 / 3 + 1 / 2) / 3)
    assert overall["hit@5"] == pytest.approx(2 / 3)
    assert overall["mrr@10"] == pytest.approx(0.5)
    assert overall["ndcg@5"] == pytest.approx((1 + ndcg_c2) / 3)
    assert overall["recall@10"] == pytest.approx(0.5)
    assert overall["latency_p50_ms"] == pytest.approx(20.0)
    assert overall["latency_p95_ms"] == pytest.approx(29.0)  # 20 + 0.9 * 10
    assert overall["token_compliance"] == pytest.approx(2 / 3)  # token_count == budget complies
    assert overall["cross_user_safety"] == pytest.approx(2 / 3)
    assert overall["cases"] == 3
    assert overall["errors"] == 1

    assert list(summary.by_category) == ["A", "B"]
    cat_a = summary.by_category["A"]
    assert cat_a["cases"] == 2
    assert cat_a["recall@5"] == pytest.approx(0.75)
    assert cat_a["precision@5"] == pytest.approx((1 / 3 + 1 / 2) / 2)
    assert cat_a["mrr@10"] == pytest.approx(0.75)
    assert summary.by_category["B"] == pytest.approx(
        {
            "recall@5": 0,
            "precision@5": 0,
            "hit@5": 0,
            "mrr@10": 0,
            "ndcg@5": 0,
            "recall@10": 0,
            "cases": 1,
        }
    )

    # k=1: only c1 has its evidence first; from k=2 on c2 finds half of its evidence.
    assert summary.recall_curve == pytest.approx([1 / 3] + [0.5] * 9)


def test_summarise_empty_run_fails_rather_than_passes() -> None:
    summary = summarise([])
    assert summary.overall["cases"] == 0
    assert summary.overall["recall@5"] == 0.0
    assert summary.overall["token_compliance"] == 0.0
    assert summary.overall["cross_user_safety"] == 0.0
    assert summary.by_category == {}
    assert summary.recall_curve == [0.0] * 10
    statuses = {r.threshold.metric: r.status for r in check_thresholds(summary, MEMORY_THRESHOLDS)}
    assert statuses["recall@5"] == "FAIL"
    assert statuses["cross_user_safety"] == "FAIL"


# --------------------------------------------------------------------------- thresholds


def _summary(**overall: float) -> Summary:
    return Summary(overall=dict(overall), by_category={}, recall_curve=[])


def test_memory_thresholds_definition() -> None:
    by_metric = {t.metric: t for t in MEMORY_THRESHOLDS}
    assert set(by_metric) == {
        "recall@5",
        "precision@5",
        "token_compliance",
        "cross_user_safety",
        "latency_p95_ms",
    }
    assert by_metric["recall@5"] == Threshold("recall@5", minimum=0.93)
    assert by_metric["precision@5"] == Threshold("precision@5", minimum=0.90)
    assert by_metric["token_compliance"] == Threshold("token_compliance", minimum=1.0)
    assert by_metric["cross_user_safety"] == Threshold("cross_user_safety", minimum=1.0)
    assert by_metric["latency_p95_ms"] == Threshold("latency_p95_ms", maximum=200, blocking=False)


def test_check_thresholds_pass_fail_warn() -> None:
    summary = _summary(
        **{
            "recall@5": 0.95,
            "precision@5": 0.65,
            "token_compliance": 1.0,
            "cross_user_safety": 0.99,
            "latency_p95_ms": 250.0,
        }
    )
    results = check_thresholds(summary, MEMORY_THRESHOLDS)
    got = {r.threshold.metric: (r.value, r.passed, r.status) for r in results}
    assert got == {
        "recall@5": (0.95, True, "PASS"),
        "precision@5": (0.65, False, "FAIL"),
        "token_compliance": (1.0, True, "PASS"),
        "cross_user_safety": (0.99, False, "FAIL"),
        "latency_p95_ms": (250.0, False, "WARN"),
    }
    assert [r.threshold for r in results] == list(MEMORY_THRESHOLDS)  # order kept


def test_check_thresholds_bounds_are_inclusive_and_tolerate_float_noise() -> None:
    summary = _summary(a=0.8, b=0.7999999999999999, c=200.0, d=0.79)
    results = check_thresholds(
        summary,
        [
            Threshold("a", minimum=0.8),
            Threshold("b", minimum=0.8),
            Threshold("c", maximum=200.0),
            Threshold("d", minimum=0.8),
        ],
    )
    assert [r.passed for r in results] == [True, True, True, False]


def test_check_thresholds_range_and_nan() -> None:
    summary = _summary(x=5.0, y=math.nan)
    inside, above, nan = check_thresholds(
        summary,
        [
            Threshold("x", minimum=1.0, maximum=10.0),
            Threshold("x", minimum=1.0, maximum=4.0),
            Threshold("y", minimum=0.0),
        ],
    )
    assert inside.passed
    assert not above.passed
    assert not nan.passed


def test_check_thresholds_unknown_metric_raises() -> None:
    with pytest.raises(KeyError, match="recall@50"):
        check_thresholds(_summary(**{"recall@5": 1.0}), [Threshold("recall@50", minimum=0.5)])
