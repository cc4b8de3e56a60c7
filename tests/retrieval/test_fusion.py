"""Rank fusion as pure functions: RRF by the formula, score normalisations, convex fusion."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.retrieval.fusion import RRF_K, convex, max_scaled, min_max, rrf, z_scored


def test_rrf_follows_the_formula_with_one_based_ranks() -> None:
    fused = dict(rrf([["a", "b", "c"], ["c", "a"]]))
    assert fused["a"] == pytest.approx(1 / (RRF_K + 1) + 1 / (RRF_K + 2))
    assert fused["b"] == pytest.approx(1 / (RRF_K + 2))
    assert fused["c"] == pytest.approx(1 / (RRF_K + 3) + 1 / (RRF_K + 1))


def test_rrf_item_in_both_lists_beats_items_in_one() -> None:
    ranked = [key for key, _ in rrf([["kw1", "both", "kw2"], ["vec1", "both", "vec2"]])]
    assert ranked[0] == "both"
    assert set(ranked) == {"kw1", "kw2", "vec1", "vec2", "both"}


def test_rrf_weights_and_k_are_applied() -> None:
    fused = dict(rrf([["a"], ["b"]], weights=[1.0, 0.3], k=10))
    assert fused == pytest.approx({"a": 1 / 11, "b": 0.3 / 11})
    assert [k for k, _ in rrf([["a"], ["b"]], weights=[0.3, 1.0])] == ["b", "a"]


def test_rrf_zero_weight_list_contributes_nothing() -> None:
    fused = dict(rrf([["a", "b"], ["b", "a"]], weights=[1.0, 0.0]))
    assert fused["a"] == pytest.approx(1 / (RRF_K + 1))
    assert fused["b"] == pytest.approx(1 / (RRF_K + 2))


def test_rrf_ties_keep_first_seen_order() -> None:
    assert [k for k, _ in rrf([["x", "y"], ["y", "x"]])] == ["x", "y"]


def test_rrf_rejects_mismatched_weights_and_handles_empty() -> None:
    with pytest.raises(ValueError, match="one weight per ranking"):
        rrf([["a"], ["b"]], weights=[1.0])
    assert rrf([]) == []
    assert rrf([[], []]) == []


@settings(max_examples=200, deadline=None)
@given(
    rankings=st.lists(
        st.lists(st.integers(0, 30), unique=True, max_size=20), min_size=1, max_size=4
    ),
    data=st.data(),
)
def test_rrf_properties(rankings: list[list[int]], data: st.DataObject) -> None:
    weights = data.draw(st.lists(st.floats(0, 2), min_size=len(rankings), max_size=len(rankings)))
    fused = rrf(rankings, weights)
    keys = [k for k, _ in fused]
    scores = [s for _, s in fused]
    assert sorted(keys) == sorted({k for r in rankings for k in r})
    assert scores == sorted(scores, reverse=True)
    assert all(0.0 <= s <= sum(weights) / (RRF_K + 1) + 1e-12 for s in scores)


def test_min_max_maps_the_list_onto_zero_one() -> None:
    assert min_max({}) == {}
    assert min_max({"a": 2.0, "b": 4.0, "c": 3.0}) == pytest.approx({"a": 0.0, "b": 1.0, "c": 0.5})
    assert min_max({"a": 0.7, "b": 0.7}) == {"a": 1.0, "b": 1.0}
    assert min_max({"only": -3.0}) == {"only": 1.0}


def test_max_scaled_keeps_ratios_and_clamps_negatives() -> None:
    assert max_scaled({}) == {}
    assert max_scaled({"a": 4.0, "b": 1.0, "c": -2.0}) == pytest.approx(
        {"a": 1.0, "b": 0.25, "c": 0.0}
    )
    assert max_scaled({"a": 0.0, "b": -1.0}) == {"a": 0.0, "b": 0.0}


def test_z_scored_is_monotone_and_centred() -> None:
    assert z_scored({}) == {}
    scores = z_scored({"a": 1.0, "b": 2.0, "c": 3.0})
    assert 0.0 < scores["a"] < scores["b"] < scores["c"] < 1.0
    assert scores["b"] == pytest.approx(0.5)
    assert z_scored({"a": 5.0, "b": 5.0}) == {"a": 0.5, "b": 0.5}


def test_convex_sums_weighted_scores_with_missing_as_zero() -> None:
    fused = convex([{"a": 1.0, "b": 0.5}, {"b": 1.0, "c": 0.2}], [0.6, 0.4])
    assert dict(fused) == pytest.approx({"a": 0.6, "b": 0.7, "c": 0.08})
    assert [k for k, _ in fused] == ["b", "a", "c"]
    with pytest.raises(ValueError, match="one weight per score map"):
        convex([{"a": 1.0}], [0.5, 0.5])


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.integers(0, 50),
        st.floats(-1e6, 1e6, allow_nan=False),
        max_size=30,
    )
)
def test_normalisations_stay_in_zero_one_and_keep_order(scores: dict[int, float]) -> None:
    for scale in (min_max, max_scaled, z_scored):
        scaled = scale(scores)
        assert set(scaled) == set(scores)
        assert all(0.0 <= v <= 1.0 and not math.isnan(v) for v in scaled.values())
        for a in scores:
            for b in scores:
                if scores[a] > scores[b]:
                    assert scaled[a] >= scaled[b], (scale.__name__, scores[a], scores[b])
