"""Calibration and final ranking as pure functions: rank, apply_thresholds, propagate."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.retrieval.presets import DEFAULT, PRESETS, RetrievalPreset
from app.retrieval.scoring import (
    Ranked,
    apply_thresholds,
    clamp01,
    keyword_relevance,
    propagate,
    rank,
    vector_relevance,
)

# Fixed calibration numbers, so these tests do not move when the default preset is retuned.
PRESET = RetrievalPreset(
    name="test",
    fusion="convex",
    keyword_weight=0.6,
    vector_weight=0.4,
    normalisation="minmax",
    vector_floor=0.25,
    vector_ceiling=0.65,
    keyword_saturation=0.6,
)


def r(key: str, fused: float, relevance: float | None = None) -> Ranked[str]:
    rel = fused if relevance is None else relevance
    return Ranked(key=key, fused=fused, relevance=rel, keyword=rel, semantic=0.0)


def test_clamp01() -> None:
    assert [clamp01(v) for v in (-0.5, 0.0, 0.3, 1.0, 7.0)] == [0.0, 0.0, 0.3, 1.0, 1.0]


def test_vector_relevance_maps_floor_to_zero_and_ceiling_to_one() -> None:
    assert vector_relevance(0.25, 0.25, 0.65) == 0.0
    assert vector_relevance(0.10, 0.25, 0.65) == 0.0
    assert vector_relevance(0.45, 0.25, 0.65) == pytest.approx(0.5)
    assert vector_relevance(0.65, 0.25, 0.65) == pytest.approx(1.0)
    assert vector_relevance(0.99, 0.25, 0.65) == 1.0
    # A degenerate band (floor == ceiling) is a step, not a division by zero.
    assert vector_relevance(0.5, 0.5, 0.5) == 0.0
    assert vector_relevance(0.6, 0.5, 0.5) == 1.0


def test_keyword_relevance_saturates_and_is_zero_without_signal() -> None:
    assert keyword_relevance(0.0, 10.0, 0.6) == 0.0
    assert keyword_relevance(3.0, 0.0, 0.6) == 0.0
    assert keyword_relevance(3.0, 10.0, 0.6) == pytest.approx(0.5)
    assert keyword_relevance(6.0, 10.0, 0.6) == 1.0
    assert keyword_relevance(9.0, 10.0, 0.6) == 1.0


def test_unrelated_candidates_are_dropped_not_forced() -> None:
    # Nearest neighbours below the cosine floor and no keyword hit: nothing comes back.
    assert rank({}, 0.0, {"a": 0.20, "b": 0.10, "c": -0.3}, PRESET) == []
    assert rank({}, 0.0, {}, PRESET) == []


def test_item_matching_both_arms_ranks_first() -> None:
    keyword = {"both": 5.0, "kw_only": 6.0, "weak": 1.0}
    cosines = {"both": 0.60, "vec_only": 0.62, "weak": 0.3}
    ranked = rank(keyword, 10.0, cosines, PRESET)
    keys = [x.key for x in ranked]
    assert keys[0] == "both"
    assert set(keys) == {"both", "kw_only", "vec_only", "weak"}
    assert ranked == sorted(ranked, key=lambda x: (-x.fused, -x.relevance))


def test_rank_reports_calibrated_arm_scores() -> None:
    ranked = {x.key: x for x in rank({"k": 3.0}, 10.0, {"k": 0.45, "v": 0.65}, PRESET)}
    assert ranked["k"].keyword == pytest.approx(0.5)
    assert ranked["k"].semantic == pytest.approx(0.5)
    assert ranked["v"].keyword == 0.0
    assert ranked["v"].semantic == pytest.approx(1.0)
    assert 0.0 < ranked["k"].relevance <= 1.0 and 0.0 < ranked["v"].relevance <= 1.0


@settings(max_examples=200, deadline=None)
@given(
    bm25=st.floats(0.01, 20.0),
    cosine=st.floats(0.26, 1.0),
    weights=st.tuples(st.floats(0.05, 1.0), st.floats(0.05, 1.0)),
)
def test_a_second_signal_never_lowers_relevance(
    bm25: float, cosine: float, weights: tuple[float, float]
) -> None:
    preset = PRESET.with_(keyword_weight=weights[0], vector_weight=weights[1])
    (kw_only,) = rank({"x": bm25}, 20.0, {}, preset)
    (vec_only,) = rank({}, 20.0, {"x": cosine}, preset)
    (both,) = rank({"x": bm25}, 20.0, {"x": cosine}, preset)
    assert both.relevance >= max(kw_only.relevance, vec_only.relevance) - 1e-12
    assert kw_only.relevance > 0.0 and vec_only.relevance > 0.0


def test_disabled_arm_is_ignored() -> None:
    keyword_only = PRESET.with_(use_vector=False)
    ranked = rank({"k": 4.0}, 10.0, {"v": 0.9}, keyword_only)
    assert [x.key for x in ranked] == ["k"]
    vector_only = PRESET.with_(use_keyword=False)
    ranked = rank({"k": 4.0}, 10.0, {"v": 0.9}, vector_only)
    assert [x.key for x in ranked] == ["v"]
    assert ranked[0].relevance == pytest.approx(1.0)


def test_rrf_preset_ranks_by_rrf() -> None:
    preset = PRESETS["rrf_equal"].with_(vector_floor=0.25, vector_ceiling=0.65)
    ranked = rank({"a": 5.0, "b": 4.0}, 10.0, {"b": 0.6, "c": 0.7}, preset)
    assert ranked[0].key == "b"
    assert ranked[0].fused == pytest.approx(1 / 62 + 1 / 62)


@settings(max_examples=300, deadline=None)
@given(
    keyword=st.dictionaries(st.integers(0, 20), st.floats(0.0, 50.0), max_size=15),
    cosines=st.dictionaries(st.integers(0, 20), st.floats(-1.0, 1.0), max_size=15),
    max_bm25=st.floats(0.0, 60.0),
    fusion=st.sampled_from(["convex", "rrf"]),
    normalisation=st.sampled_from(["minmax", "max", "zscore"]),
    min_score=st.floats(0.0, 1.0),
)
def test_rank_properties(
    keyword: dict[int, float],
    cosines: dict[int, float],
    max_bm25: float,
    fusion: str,
    normalisation: str,
    min_score: float,
) -> None:
    preset = PRESET.with_(fusion=fusion, normalisation=normalisation)
    ranked = rank(keyword, max_bm25, cosines, preset)
    keys = [x.key for x in ranked]
    assert len(keys) == len(set(keys))
    assert set(keys) <= set(keyword) | set(cosines)
    for x in ranked:
        assert 0.0 < x.relevance <= 1.0
        assert 0.0 <= x.keyword <= 1.0 and 0.0 <= x.semantic <= 1.0
        # No forced matches: every returned item has a real signal from at least one arm.
        assert (keyword.get(x.key, 0.0) > 0 and max_bm25 > 0) or cosines.get(x.key, -1) > 0.25
    assert ranked == sorted(ranked, key=lambda x: (-x.fused, -x.relevance))
    kept = apply_thresholds(ranked, min_score, 0.0)
    assert all(x.relevance >= min_score for x in kept)
    assert [x.key for x in kept] == [x.key for x in ranked if x.relevance >= min_score]


def test_apply_thresholds_min_score_is_inclusive() -> None:
    ranked = [r("a", 0.9), r("b", 0.3), r("c", 0.29)]
    assert [x.key for x in apply_thresholds(ranked, 0.3, 0.0)] == ["a", "b"]
    assert apply_thresholds(ranked, 0.95, 0.0) == []
    assert apply_thresholds([], 0.0, 0.5) == []


def test_apply_thresholds_relative_cutoff() -> None:
    ranked = [r("a", 0.9, 0.8), r("b", 0.5, 0.5), r("c", 0.4, 0.39)]
    assert [x.key for x in apply_thresholds(ranked, 0.01, 0.5)] == ["a", "b"]
    assert [x.key for x in apply_thresholds(ranked, 0.01, 0.0)] == ["a", "b", "c"]
    # min_score 0 asks for the plain ranking: no relative cut either.
    assert [x.key for x in apply_thresholds(ranked, 0.0, 0.5)] == ["a", "b", "c"]


def test_propagate_passes_a_share_to_the_next_turn() -> None:
    ranked = [r("q", 0.8), r("far", 0.1)]
    out = propagate(ranked, {"q": (None, "answer")}, next_weight=0.5, previous_weight=0.0)
    by_key = {x.key: x for x in out}
    assert by_key["answer"].fused == pytest.approx(0.4)
    # Only the ranking moves: an inherited-only turn has no relevance of its own to filter on.
    assert by_key["answer"].relevance == 0.0
    assert [x.key for x in out] == ["q", "answer", "far"]


def test_propagate_keeps_the_neighbours_own_relevance() -> None:
    ranked = [r("q", 0.8, 0.9), r("answer", 0.1, 0.35)]
    out = {
        x.key: x
        for x in propagate(ranked, {"q": (None, "answer")}, next_weight=0.5, previous_weight=0.0)
    }
    assert out["answer"].fused == pytest.approx(0.4)
    assert out["answer"].relevance == pytest.approx(0.35)


def test_propagate_never_lifts_a_neighbour_above_its_seed_nor_sums() -> None:
    # "mid" is the next turn of both seeds and already has its own score.
    ranked = [r("s1", 0.6), r("s2", 0.5), r("mid", 0.2)]
    neighbours = {"s1": (None, "mid"), "s2": ("mid", "tail")}
    out = {x.key: x for x in propagate(ranked, neighbours, next_weight=0.5, previous_weight=0.5)}
    assert out["mid"].fused == pytest.approx(0.3)  # max(own 0.2, 0.5*0.6, 0.5*0.5), not a sum
    assert out["tail"].fused == pytest.approx(0.25)
    assert out["mid"].fused < out["s1"].fused
    assert out["tail"].fused < out["s2"].fused


def test_propagate_keeps_a_stronger_own_score() -> None:
    ranked = [r("seed", 0.4), r("next", 0.9)]
    out = {
        x.key: x
        for x in propagate(ranked, {"seed": (None, "next")}, next_weight=0.5, previous_weight=0.0)
    }
    assert out["next"].fused == pytest.approx(0.9)


def test_propagate_is_a_no_op_without_neighbours_or_weights() -> None:
    ranked = [r("a", 0.5)]
    assert propagate(ranked, {}, next_weight=0.5, previous_weight=0.5) == ranked
    assert propagate(ranked, {"a": ("p", "n")}, next_weight=0.0, previous_weight=0.0) == ranked
    out = propagate(ranked, {"a": ("p", None)}, next_weight=0.5, previous_weight=0.0)
    assert [x.key for x in out] == ["a"]


def test_default_preset_is_consistent() -> None:
    assert DEFAULT.name == "default"
    assert DEFAULT.vector_floor < DEFAULT.vector_ceiling
    assert DEFAULT.keyword_weight >= 0 and DEFAULT.vector_weight >= 0
    assert DEFAULT.keyword_weight + DEFAULT.vector_weight > 0
    assert all(k.startswith("preset.") for k in DEFAULT.as_params())


def test_exempt_ranks_skip_the_relative_cut_but_never_min_score() -> None:
    ranked = [r("a", 1.0, 0.9), r("b", 0.9, 0.35), r("c", 0.8, 0.2), r("d", 0.7, 0.4)]
    assert [x.key for x in apply_thresholds(ranked, 0.3, 0.6)] == ["a"]
    # b is in the first two places: kept although under 0.6 x 0.9; c stays out (under 0.3).
    assert [x.key for x in apply_thresholds(ranked, 0.3, 0.6, exempt_ranks=2)] == ["a", "b"]
    assert [x.key for x in apply_thresholds(ranked, 0.3, 0.6, exempt_ranks=3)] == ["a", "b"]
    assert [x.key for x in apply_thresholds(ranked, 0.3, 0.6, exempt_ranks=4)] == ["a", "b", "d"]
    # Nothing over min_score: nothing, whatever the exemption.
    assert apply_thresholds([r("x", 1.0, 0.1)], 0.3, 0.6, exempt_ranks=5) == []


def test_preset_overrides_coerce_by_field_type_and_reject_the_unknown() -> None:
    from app.retrieval.presets import with_overrides

    changed = with_overrides(
        DEFAULT, ["cutoff_exempt_ranks=2", "time_boost=0.3", "use_vector=false"]
    )
    assert (changed.cutoff_exempt_ranks, changed.time_boost, changed.use_vector) == (2, 0.3, False)
    assert changed.name.startswith("default+")
    assert with_overrides(DEFAULT, []) is DEFAULT
    for bad in ("nope=1", "time_boost", "cutoff_exempt_ranks=2.5", "use_vector=maybe", "name=x"):
        with pytest.raises(ValueError):
            with_overrides(DEFAULT, [bad])
