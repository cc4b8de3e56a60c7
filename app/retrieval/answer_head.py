"""The answer head: does this item answer this question, read from the two vectors.

A cosine only says how close a question and an item are; "How old is Lucia?" is close to
"Lucia runs our front of house" and to "Lucia turns forty in May" alike. The head is a small
network over the pair of vectors the service already has (the query's, and the item's stored
one): [q, m, q * m, |q - m|, q . m] -> one hidden layer (GELU) -> a logit of "m answers q". It
is trained per embedder on the corpus's train people (`python -m eval.fit_answer_head`, numpy,
seconds) and read by the query pipeline for the first candidates of a ranking
(app/services/query/calibrate.py, `answer_logits`): its logit joins the relevance model's
(RelevanceModel.head_weight), so the absolute "nothing here answers" the cosine cannot give has
an input that differs between a near miss and an answer.

Pure numpy: the weights live in `answer_heads/<embedder>.npz` beside this file (an embedder
without one has no head: the stage is skipped).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import numpy.typing as npt

from app.retrieval.relevance import file_stem

HEADS_DIR = Path(__file__).with_name("answer_heads")

Array = npt.NDArray[np.float32]


def pair_features(query: Array, items: Array) -> Array:
    """[q, m, q * m, |q - m|, q . m] for each row m of `items` (unit vectors); `query` is one
    vector, or one row per item."""
    q = np.broadcast_to(query.astype(np.float32), items.shape)
    product = q * items
    return np.hstack(
        [q, items, product, np.abs(q - items), product.sum(axis=1, keepdims=True)]
    ).astype(np.float32)


def gelu(x: Array) -> Array:
    # tanh approximation: the training code uses the same one
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


@dataclass(frozen=True)
class AnswerHead:
    """features (n x d) -> hidden (n x h) -> logit (n); weights as trained."""

    w1: Array  # d x h
    b1: Array  # h
    w2: Array  # h
    b2: float
    version: str = ""

    def logits(self, query: Array, items: Array) -> Array:
        """The head's logit for each item (rows of `items`) against the query vector."""
        if len(items) == 0:
            return np.zeros(0, dtype=np.float32)
        hidden = gelu(pair_features(query, items) @ self.w1 + self.b1)
        return (hidden @ self.w2 + self.b2).astype(np.float32)  # type: ignore[no-any-return]

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as out:
            np.savez_compressed(
                out,
                w1=self.w1.astype(np.float32),
                b1=self.b1.astype(np.float32),
                w2=self.w2.astype(np.float32),
                b2=np.array([self.b2], dtype=np.float32),
                version=np.array(self.version),
            )


def head_file(embedder: str, directory: Path = HEADS_DIR) -> Path:
    """Where the head trained on `embedder`'s vectors lives (whether or not it exists)."""
    return directory / (file_stem(embedder) + ".npz")


@cache
def head_for(embedder: str, directory: Path = HEADS_DIR) -> AnswerHead | None:
    """The head of `embedder` (read once per process), None when it has none."""
    path = head_file(embedder, directory)
    if not path.exists():
        return None
    with np.load(path) as data:
        return AnswerHead(
            w1=data["w1"],
            b1=data["b1"],
            w2=data["w2"],
            b2=float(data["b2"][0]),
            version=str(data["version"]),
        )
