"""Does anything here answer the question? A question-level model over the whole ranking.

The relevance model scores each (question, item) pair on its own, so a question's best
probability is the best of its pairs: a near miss ("Electricity bill in August" for "What was
the bill in January?") can score as an answer does. Whether a question has an answer at all
shows in the ranking as a whole: how high its best cosine and best answer-head logit stand,
whether the best candidates carry the name the question asks about, how much of the match is
on ordinary words, whether the best holds the kind of value asked and no other qualifier
than the question's (app/retrieval/answer_types.py: a near miss on the very subject). This
model reads those features of a question's first DEPTH candidates and
gives P(the store answers this question); the query pipeline (a preset with
`question_model`: `answers`, and `default` with `question_caps`) puts the best item's relevance
at that probability (or, capping, at most that), on the spec's scale, and keeps every other
item's relevance in its ratio to the best: the order is the relevance model's, the floor and
`confidence` are this model's.

Fitted per embedder and relevance model by `python -m eval.fit_question` (logistic regression
on the corpus's calibration people, whom the embedder never saw; numpy) into
`question_models/<embedder>[.<variant>].json` (the variant of the relevance model whose logit
it reads, as relevance.model_file names them); pure arithmetic here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from app.retrieval.answer_types import asked, carries, contradicts
from app.retrieval.relevance import (
    FEATURES,
    SPEC_FLOOR,
    file_stem,
    model_body,
    model_text,
    rounded,
    sigmoid,
)

MODELS_DIR = Path(__file__).with_name("question_models")
DEPTH = 20  # the candidates a question's features read (the answer head's depth)
QUESTION_FEATURES = (
    "best_logit",  # the relevance model's best logit among them
    "best_cosine",  # the question's best cosine
    "cosine_z",  # how far it stands above the other cosines
    "best_head",  # the answer head's best logit
    "second_head",  # and its second best
    "best_keyword",  # the best BM25 share of the ideal document
    "best_plain",  # the same over the question's words that are not names
    "name_missing",  # some candidate lacks the name the question asks about
    # The best candidate (highest relevance logit) against the question's words
    # (app/retrieval/answer_types.py):
    "type_missing",  # it holds no value of the kind asked (an amount, a count, a time, a dose)
    "qualifier_conflict",  # it names another month, season, weekday or "10 km" than asked
)
_COSINE, _Z = FEATURES.index("best_cosine"), FEATURES.index("cosine_z")
_KEYWORD, _PLAIN = FEATURES.index("keyword"), FEATURES.index("plain")
_NAME_MISSING = FEATURES.index("name_missing")
NO_HEAD = -10.0  # a question with no head logit (keyword only): as if the head said no


def question_features(
    logits: Sequence[float],
    features: Sequence[Sequence[float]],
    heads: Sequence[float],
    query: str,
    texts: Sequence[str],
) -> list[float]:
    """QUESTION_FEATURES of one question from its first candidates: each one's relevance
    logit, relevance features (FEATURES order), answer-head logit (those it has) and text."""
    if not features:
        raise ValueError("a question without candidates has no features")
    if len(texts) != len(logits):
        raise ValueError(f"{len(texts)} texts for {len(logits)} candidates")
    ordered = sorted(heads, reverse=True)
    first = features[0]
    best = texts[max(range(len(logits)), key=lambda i: logits[i])]
    kind = asked(query)
    return [
        max(logits),
        first[_COSINE],
        first[_Z],
        ordered[0] if ordered else NO_HEAD,
        ordered[1] if len(ordered) > 1 else NO_HEAD,
        max(f[_KEYWORD] for f in features),
        max(f[_PLAIN] for f in features),
        max(f[_NAME_MISSING] for f in features),
        float(kind is not None and not carries(kind, best)),
        float(contradicts(query, best)),
    ]


@dataclass(frozen=True)
class QuestionModel:
    """Standardised features -> logistic regression -> P(the store answers the question)."""

    mean: tuple[float, ...]
    scale: tuple[float, ...]
    weights: tuple[float, ...]
    bias: float
    # The probability reported at the spec's floor (0.3): the operating point, chosen on the
    # validation people.
    floor_probability: float
    version: str = ""

    def probability(self, x: Sequence[float]) -> float:
        """P(an answer) of QUESTION_FEATURES `x`."""
        if len(x) != len(QUESTION_FEATURES):
            raise ValueError(f"{len(x)} question features, not {len(QUESTION_FEATURES)}")
        z = self.bias + sum(
            w * (v - m) / s
            for w, v, m, s in zip(self.weights, x, self.mean, self.scale, strict=True)
        )
        return sigmoid(z)

    def relevance(self, probability: float) -> float:
        """The reported relevance of a probability: floor_probability reports SPEC_FLOOR."""
        p = min(max(self.floor_probability, 1e-6), 1.0 - 1e-6)
        gamma = math.log(SPEC_FLOOR) / math.log(p)
        return max(probability, 0.0) ** gamma

    def to_json(self, extra: dict[str, object] | None = None) -> str:
        body = {
            "version": self.version,
            "features": list(QUESTION_FEATURES),
            "mean": rounded(self.mean),
            "scale": rounded(self.scale),
            "weights": rounded(self.weights),
            "bias": round(self.bias, 6),
            "floor_probability": self.floor_probability,
        }
        return model_text(body, extra)

    @classmethod
    def from_json(cls, text: str) -> QuestionModel:
        body = model_body(text, QUESTION_FEATURES, "question")
        return cls(
            mean=tuple(body["mean"]),
            scale=tuple(body["scale"]),
            weights=tuple(body["weights"]),
            bias=float(body["bias"]),
            floor_probability=float(body["floor_probability"]),
            version=str(body.get("version", "")),
        )


def question_file(embedder: str, variant: str = "", directory: Path = MODELS_DIR) -> Path:
    """The question model over `embedder`'s cosines and its relevance model `variant`'s logit."""
    return directory / (file_stem(embedder) + (f".{variant}" if variant else "") + ".json")


@cache
def question_model_for(embedder: str, variant: str = "") -> QuestionModel | None:
    """The question model of the embedder and relevance model variant (read once per
    process), None when it has none."""
    path = question_file(embedder, variant)
    return QuestionModel.from_json(path.read_text()) if path.exists() else None


def rescaled(relevances: Sequence[float], reported: float) -> list[float]:
    """A question's relevances with the best at `reported` and every other in its ratio to the
    best (the order is kept; a question with no positive relevance is left as it is)."""
    best = max(relevances, default=0.0)
    if best <= 0.0:
        return list(relevances)
    # r / best first: the best's share is exactly 1 however small it is (a subnormal best made
    # reported * best / best drift from `reported`).
    return [reported * (r / best) for r in relevances]
