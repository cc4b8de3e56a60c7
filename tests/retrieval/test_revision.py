"""The newer-wins pair model (app/retrieval/revision.py): features, arithmetic, the file."""

from __future__ import annotations

import math

import pytest

from app.embedding_models import DEFAULT_MODEL_ID
from app.retrieval.phatic import content_words
from app.retrieval.presets import DEFAULT
from app.retrieval.revision import (
    REVISION_FEATURES,
    RevisionModel,
    memory_text,
    revision_features,
    revision_file,
    revision_model_for,
)


def named(
    cosine: float,
    older: float,
    newer: float,
    older_type: str | None,
    newer_type: str | None,
    older_text: str = "",
    newer_text: str = "",
) -> dict[str, float]:
    """The features of a pair, by name (relevances, types and texts of the older and newer)."""
    x = revision_features(
        cosine,
        older,
        newer,
        memory_text(older_text, older_type),
        memory_text(newer_text, newer_type),
    )
    return dict(zip(REVISION_FEATURES, x, strict=True))


def test_features_read_the_pair_as_named() -> None:
    x = named(0.6, 0.4, 0.2, "decision", "decision")
    assert x == {
        "cosine": 0.6,
        "log_ratio": pytest.approx(math.log(0.5)),
        "both_decisions": 1.0,
        "same_type": 1.0,
        "newer_relevance": 0.2,
        "older_relevance": 0.4,
        "newer_says_change": 0.0,
        "shared_words": 0.0,
    }
    mixed = named(0.6, 0.4, 0.4, "note", "fact")
    assert (mixed["both_decisions"], mixed["same_type"], mixed["log_ratio"]) == (0.0, 0.0, 0.0)
    # a turn has no type, and a relevance of 0 keeps the ratio finite
    unknown = named(0.3, 0.0, 0.5, None, None)
    assert unknown["same_type"] == 0.0 and math.isfinite(unknown["log_ratio"])


def test_the_newer_words_say_a_change_and_the_shared_words_name_the_subject() -> None:
    older = "Rent for the Hagegata flat: 14,200 kroner a month."
    for newer, says in (
        ("The landlord's letter came: 15,350 a month for the flat from January.", 1.0),
        ("Dentist appointment moved to Thursday at nine.", 1.0),
        ("Sigrun no longer sees Dr Hansen.", 1.0),
        ("The flat costs 15,350 kroner a month.", 0.0),  # the new value, no word of a change
    ):
        assert named(0.5, 0.4, 0.3, "fact", "fact", older, newer)["newer_says_change"] == says
    assert set(content_words(older)) == {"rent", "hagegata", "flat", "14", "200", "kroner", "month"}
    shared = named(0.5, 0.4, 0.3, "fact", "fact", older, "The flat costs 15,350 kroner a month.")
    assert shared["shared_words"] == 3.0  # flat, kroner, month


def test_probability_is_the_logistic_of_the_weighted_sum() -> None:
    model = RevisionModel(weights=(2.0, 0, 1.0, 0, 0, 0, 0, 0), bias=-1.0, max_words=30)
    assert model.probability([0.5, 0, 0, 0, 0, 0, 0, 0]) == pytest.approx(0.5)
    assert model.probability([0.5, 0, 1, 0, 0, 0, 0, 0]) == pytest.approx(1 / (1 + math.exp(-1)))
    with pytest.raises(ValueError):
        model.probability([0.5])


def test_it_reads_only_memories_as_long_as_those_it_was_fitted_on() -> None:
    model = RevisionModel(weights=(0,) * 8, bias=0.0, max_words=5)
    short = memory_text("one two three", "note")
    assert model.reads(short.words, memory_text("one two three four five", "note").words)
    assert not model.reads(short.words, memory_text("one two three four five six", "note").words)


def test_the_json_round_trips_and_refuses_other_features() -> None:
    model = RevisionModel(
        weights=(1.5, -0.5, 2.0, 0.1, 3.0, 0.2, 1.0, 0.4), bias=-4.0, max_words=34, version="v1"
    )
    assert RevisionModel.from_json(model.to_json({"pairs": 3})) == model
    text = model.to_json().replace('"cosine"', '"pair_cosine"')
    with pytest.raises(ValueError, match="features"):
        RevisionModel.from_json(text)


def test_the_default_embedder_has_a_revision_model_that_the_default_preset_reads() -> None:
    assert revision_file(DEFAULT_MODEL_ID).exists()
    model = revision_model_for(DEFAULT_MODEL_ID)
    assert model is not None and len(model.weights) == len(REVISION_FEATURES)
    assert model.max_words >= 20
    assert 0.0 < DEFAULT.revision_threshold < 1.0
    # close decisions the question finds about as well: a revision; far apart ones: not
    decision = memory_text("", "decision")
    close = revision_features(0.6, 0.40, 0.38, decision, decision)
    far = revision_features(0.1, 0.40, 0.38, decision, decision)
    assert model.probability(close) >= DEFAULT.revision_threshold > model.probability(far)
    assert revision_model_for("no-such-embedder") is None
