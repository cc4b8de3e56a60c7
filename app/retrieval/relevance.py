"""A learned relevance: the probability that an item answers the question.

A logistic model over a few features of each candidate, all computed from what the two arms
already return (no extra SQL): the cosine's gap to the question's best cosine, BM25 as a share
of the ideal score, the same share over the question's words that are not names
(app/retrieval/names.py), flags for a match on names alone and for an item that lacks the name
the question asks about; plus two features of the question (its best cosine, and
how far that stands above the other candidates) that only move the calibration. A curated memory
(source kind `memory`: a short fact someone saved) weighs the item features by its own vector
(`memory_weights`, added to `weights`): it is different evidence from a dialogue turn. Both
kinds share the bias and the calibration, so a store holding both ranks them on one scale.
Fitted offline by
`python -m eval.fit_relevance` (numpy, fixed data, cross-validated by user); the coefficients
live in `relevance_model.json` beside this file and are loaded once. The features hold cosines,
whose scale is the embedder's: `relevance_model.json` is fitted on the default embedder's
(DEFAULT_EMBEDDER), and another embedder's model lives in `relevance_models/<its name>.json`
(`model_for`; the service passes its embedder's name in). Pure.
"""

from __future__ import annotations

import json
import logging
import math
import operator
import re
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path
from typing import Any, TypeVar

K = TypeVar("K", bound=Hashable)

MODEL_PATH = Path(__file__).with_name("relevance_model.json")
# The embedder whose cosines MODEL_PATH was fitted on (app.embedding_models' LOCAL_MODEL_ID; a
# test keeps the two equal) and the directory of the other embedders' models.
DEFAULT_EMBEDDER = "all-MiniLM-L6-v2-onnx-dq8"
MODELS_DIR = Path(__file__).with_name("relevance_models")
# Embedders whose plain relevance model is MODEL_PATH itself, chosen by measurement: the MiniLM
# fine-tuned here (issue 45, the service's default embedder since 2026-12-05) holds the golden
# set with it (Recall@5 0.975, Precision@5 0.905 with the question model), where a listwise fit
# of its own (`python -m eval.fit_relevance --samples conv-41 conv-42 conv-43`) gave 0.798 /
# 0.826 (docs/retrieval.md, "The trained MiniLM by default").
SHARES_DEFAULT_MODEL = ("pgrecall-minilm-answers-v5",)

log = logging.getLogger(__name__)

# Item features order a question's candidates; query features (the same for every candidate of
# a question) only move how sure the model is that the store answers the question at all.
ITEM_FEATURES: tuple[str, ...] = (
    "cosine_gap",  # the item's cosine - the best cosine among the question's candidates (<= 0)
    "keyword",  # BM25 / the ideal document's BM25 (one holding every query lexeme)
    "plain",  # the same over the question's lexemes that are not names
    "name_only",  # 1: the item matched the question's names and nothing else
    "name_missing",  # 1: the question names someone or something and the item does not
    "keyword_top",  # BM25 / the best BM25 among the question's candidates
)
QUERY_FEATURES: tuple[str, ...] = (
    "best_cosine",  # the best cosine among the question's candidates
    "cosine_z",  # how far the best cosine stands above the others, in standard deviations
)
FEATURES: tuple[str, ...] = ITEM_FEATURES + QUERY_FEATURES
MIN_SPREAD = 5  # cosines needed for cosine_z to mean something


# The relevance the API reports keeps the spec's scale: its default floor (min_score,
# PGRECALL_MIN_RELEVANCE) is 0.3.
SPEC_FLOOR = 0.3


@dataclass(frozen=True)
class RelevanceModel:
    """weights . features + bias -> logit of P(answers the question).

    `floor_probability`: the probability chosen as the tool's operating point (the point of the
    presence/abstention trade-off closest to both targets, docs/retrieval.md). The reported
    relevance is p ** gamma with gamma such that this probability reports as SPEC_FLOOR: a
    monotone map (order, 0 and 1 kept), so the spec's 0.3 floor is that operating point.
    """

    version: str
    weights: tuple[float, ...]
    bias: float
    floor_probability: float = SPEC_FLOOR
    # cosine_z of a question with fewer than MIN_SPREAD cosines, where a spread says nothing
    # (a store of one or two items): the mean cosine_z of the fitting questions.
    neutral_cosine_z: float = 0.0
    # added to `weights` for a curated memory, over ITEM_FEATURES (empty: none). No bias of its
    # own: the fitting sets never mix the kinds in one question, so nothing measures whether a
    # memory is likelier than a turn to answer; the kinds differ only in how they weigh evidence
    # (equal features with no evidence of difference, e.g. the best cosine and no keyword, give
    # the same probability).
    memory_weights: tuple[float, ...] = ()
    # The weight of the answer head's logit (app/retrieval/answer_head.py) in the logit: the
    # query pipeline adds head_weight x logit to the candidates the head scored (0: no head).
    head_weight: float = 0.0

    @cached_property
    def gamma(self) -> float:
        p = min(max(self.floor_probability, 1e-6), 1.0 - 1e-6)
        return math.log(SPEC_FLOOR) / math.log(p)

    def relevance(self, probability: float, best: float = 0.0, exponent: float = 0.0) -> float:
        """The reported relevance of a probability (see the class).

        With `best` (the question's best probability) and an `exponent` > 0, an item below the
        best reports best ** gamma * (probability / best) ** exponent: the best item keeps the
        scale above, the others stand closer to it than gamma would put them. The model ranks
        one answer per question first, so a second answer's probability is a share of the
        first's; a question several memories answer (a preference told three ways, a plan in
        three parts) would otherwise lose all but one to the floor and the relative cut.
        Monotone in `probability` for a given best, so the order is kept.
        """
        p = max(probability, 0.0)
        if exponent <= 0.0 or best <= 0.0 or p >= best:
            return p**self.gamma
        return best**self.gamma * (p / best) ** exponent

    def logit(self, x: Sequence[float], memory: bool = False) -> float:
        # map(operator.mul): the same sums, in the same order, as a generator over
        # zip(strict=True), without a Python frame per feature (every candidate of every
        # query); the lengths are checked here instead.
        if len(x) != len(self.weights):
            raise ValueError(f"{len(x)} feature values for {len(self.weights)} weights")
        z = self.bias + sum(map(operator.mul, self.weights, x))
        if memory and self.memory_weights:
            item = x[: len(ITEM_FEATURES)]
            if len(item) != len(self.memory_weights):
                raise ValueError(f"{len(item)} item features for the memory weights")
            z += sum(map(operator.mul, self.memory_weights, item))
        return z

    def probability(self, x: Sequence[float], memory: bool = False) -> float:
        return sigmoid(self.logit(x, memory))

    def to_json(self, extra: Mapping[str, object] | None = None) -> str:
        body = {
            "version": self.version,
            "features": list(FEATURES),
            "weights": {name: round(w, 6) for name, w in zip(FEATURES, self.weights, strict=True)},
            "bias": round(self.bias, 6),
            "floor_probability": round(self.floor_probability, 6),
            "neutral_cosine_z": round(self.neutral_cosine_z, 6),
            **(
                {
                    "memory_weights": {
                        name: round(w, 6)
                        for name, w in zip(ITEM_FEATURES, self.memory_weights, strict=True)
                    }
                }
                if self.memory_weights
                else {}
            ),
            **({"head_weight": round(self.head_weight, 6)} if self.head_weight else {}),
            **(extra or {}),
        }
        return json.dumps(body, indent=2) + "\n"


def parse_model(text: str) -> RelevanceModel:
    """The model of a JSON document; ValueError when its features are not FEATURES."""
    body = json.loads(text)
    weights = body["weights"]
    if list(body.get("features", [])) != list(FEATURES) or set(weights) != set(FEATURES):
        raise ValueError(f"relevance model features {body.get('features')} != {list(FEATURES)}")
    memory = body.get("memory_weights", {})
    if memory and set(memory) != set(ITEM_FEATURES):
        raise ValueError(f"relevance model memory_weights {sorted(memory)} != {ITEM_FEATURES}")
    return RelevanceModel(
        version=str(body["version"]),
        weights=tuple(float(weights[name]) for name in FEATURES),
        bias=float(body["bias"]),
        floor_probability=float(body.get("floor_probability", SPEC_FLOOR)),
        neutral_cosine_z=float(body.get("neutral_cosine_z", 0.0)),
        memory_weights=tuple(float(memory[name]) for name in ITEM_FEATURES) if memory else (),
        head_weight=float(body.get("head_weight", 0.0)),
    )


def load_model(path: Path = MODEL_PATH) -> RelevanceModel:
    """The committed model (read once per process and file)."""
    return _read(path)


@cache  # keyed by the path itself: `load_model()` and `load_model(MODEL_PATH)` share one entry
def _read(path: Path) -> RelevanceModel:
    return parse_model(path.read_text())


def file_stem(embedder: str) -> str:
    """An embedder's name as a file name: a character outside letters, digits, `.`, `_` and
    `-` (e.g. the `/` of a hub name) written `_`. Every per-embedder model file is named so."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", embedder)


def model_file(embedder: str, directory: Path = MODELS_DIR, variant: str = "") -> Path:
    """Where the model fitted on `embedder`'s cosines lives (whether or not it exists):
    MODEL_PATH for DEFAULT_EMBEDDER, else `directory/<embedder>.json` (a character outside
    letters, digits, `.`, `_` and `-`, e.g. the `/` of a hub name, written `_`). A preset's
    `relevance_model` variant ("answers": the pointwise model with the answer head's weight)
    lives in `directory/<embedder>.<variant>.json`, for every embedder."""
    name = file_stem(embedder)
    if variant:
        return directory / f"{name}.{variant}.json"
    if embedder == DEFAULT_EMBEDDER or embedder in SHARES_DEFAULT_MODEL:
        return MODEL_PATH
    return directory / (name + ".json")


@cache
def model_for(embedder: str, directory: Path = MODELS_DIR, variant: str = "") -> RelevanceModel:
    """The relevance model of `embedder` (read once per process, embedder and variant). An
    embedder without a model of its own gets the default's, fitted on another scale of
    cosines: said once, as a warning, because its relevance and its floor are then
    uncalibrated. A variant the embedder lacks falls back to its plain model, likewise."""
    path = model_file(embedder, directory, variant)
    if variant and not path.exists():
        log.warning(
            "no %s relevance model for embedder %s (%s): using its plain one",
            variant,
            embedder,
            path.name,
        )
        return model_for(embedder, directory)
    if not path.exists():
        log.warning(
            "no relevance model for embedder %s (%s): using %s, fitted on %s's cosines",
            embedder,
            path.name,
            MODEL_PATH.name,
            DEFAULT_EMBEDDER,
        )
        path = MODEL_PATH
    return load_model(path)


def features(
    keyword_scores: Mapping[K, float],
    plain_scores: Mapping[K, float],
    max_bm25: float,
    cosines: Mapping[K, float],
    has_names: bool,
    neutral_z: float = 0.0,
    only: Iterable[K] | None = None,
) -> dict[K, tuple[float, ...]]:
    """FEATURES for every candidate of either arm (or for the candidates `only` names), in
    FEATURES order.

    An item the vector arm did not return gets the lowest cosine it returned (its own is at
    most that); an item the keyword arm did not return matched no query lexeme (0).
    `has_names`: the question names someone (app/retrieval/names.py). `neutral_z` is the
    cosine_z of a question with fewer than MIN_SPREAD cosines. The question's own features
    (best cosine, cosine_z, best BM25) are always of all candidates.
    """
    keys = list({**keyword_scores, **cosines}) if only is None else list(only)
    values = list(cosines.values())
    floor = min(values, default=0.0)
    best_cos = max(values, default=0.0)
    mean = sum(values) / len(values) if values else 0.0
    spread = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values)) if values else 0.0
    cosine_z = (best_cos - mean) / spread if spread > 1e-9 else 0.0
    if len(values) < MIN_SPREAD:
        cosine_z = neutral_z
    best_bm25 = max(keyword_scores.values(), default=0.0)
    ideal = max_bm25 if max_bm25 > 0.0 else 1.0
    out: dict[K, tuple[float, ...]] = {}
    for k in keys:
        gap = cosines.get(k, floor) - best_cos
        bm25 = keyword_scores.get(k, 0.0)
        plain = plain_scores.get(k, bm25) if bm25 > 0.0 else 0.0
        named = bm25 - plain > 1e-9  # some of its BM25 came from a name
        pl = plain / ideal
        out[k] = (
            gap,
            bm25 / ideal,
            pl,
            1.0 if named and plain <= 0.0 else 0.0,
            1.0 if has_names and not named else 0.0,
            bm25 / best_bm25 if best_bm25 > 0.0 else 0.0,
            best_cos,
            cosine_z,
        )
    return out


def sigmoid(z: float) -> float:
    """The logistic of a model's logit, clipped to +-30 so the odds stay finite (the stages
    multiply odds)."""
    z = max(-30.0, min(30.0, z))
    return 1.0 / (1.0 + math.exp(-z))


def rounded(values: Iterable[float]) -> list[float]:
    """A model file's numbers: six decimals."""
    return [round(v, 6) for v in values]


def model_text(body: Mapping[str, object], extra: Mapping[str, object] | None = None) -> str:
    """A per-embedder model file's JSON text (question, revision models; model_body reads it
    back): `body`, then `extra` (what it was fitted on and how)."""
    return json.dumps({**body, **(extra or {})}, indent=2) + "\n"


def model_body(text: str, features: Sequence[str], what: str) -> dict[str, Any]:
    """A per-embedder model file's JSON (question, revision models); ValueError when it was
    fitted on other features than `features` (what this code computes)."""
    body: dict[str, Any] = json.loads(text)
    if body["features"] != list(features):
        raise ValueError(f"{what} model features {body['features']}, not this code's")
    return body


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
