"""The query pipeline's answer-verifier stage (app/services/query/calibrate.py `verify`), pure:
which candidates it reads, with which cosine, and what a failing verifier leaves. The verifier
here is a stand-in object (no ONNX graph): the graph is built by `make train-verifier`, not
committed, and its arithmetic on a ranking is tests/retrieval/test_verdicts.py's."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

import numpy as np
import pytest

from app.errors import EmbeddingError
from app.repositories.retrieval import Candidate
from app.repositories.search_index import Source
from app.retrieval.presets import PRESETS
from app.retrieval.relevance import load_model
from app.retrieval.scoring import Ranked
from app.services.query.calibrate import verify
from app.services.query.model import QueryRequest, QueryResult
from app.services.query.state import ArmHits, Gathered, Rows, Stored, scope

QUESTION = "What do you remember about my diet?"


class StandIn:
    """Answers with logit = 10 x cosine and P = the logit / 10, records what it read."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.read: list[tuple[str, list[str], list[float]]] = []

    async def logits(
        self, question: str, items: Sequence[str], cosines: Sequence[float]
    ) -> np.ndarray:
        if self.fail:
            raise EmbeddingError("answer verifier failed: the graph raised")
        self.read.append((question, list(items), list(cosines)))
        return np.array([10.0 * c for c in cosines], dtype=np.float32)

    def probabilities(self, logits: np.ndarray) -> np.ndarray:
        return logits / 10.0


def key(n: int) -> tuple[Source, uuid.UUID]:
    return (Source.MEMORY, uuid.UUID(int=n))


def candidate(n: int) -> Candidate:
    return Candidate(
        Source.MEMORY, uuid.UUID(int=n), f"memory {n}", "fact", 0.5,
        datetime(2026, 1, 1, tzinfo=UTC), None, None, None,
    )  # fmt: skip


def gathered(depth: int, with_vectors: set[int], query: np.ndarray | None) -> Gathered:
    ranked = [Ranked(key(n), 1.0 - n / 10, 0.5 - n / 100, 0.0, 0.0) for n in range(depth)]
    unit = np.eye(4, dtype=np.float32)
    items = {key(n): unit[n % 4] * (1.0 - n / 10) for n in with_vectors}
    return Gathered(
        ArmHits(None, {}),  # type: ignore[arg-type]
        Rows(ranked, {key(n): candidate(n) for n in range(depth)}, {}),
        Stored(query, items, []),
    )


def verified_scope(verifier: StandIn, depth: int = 3):  # type: ignore[no-untyped-def]
    request = QueryRequest(user_id="alice", query=QUESTION, limit=5, min_score=0.0)
    preset = PRESETS["verified"].with_(verify_depth=depth)
    return scope(request, QUESTION, preset, load_model(), None, verifier)  # type: ignore[arg-type]


async def test_reads_the_first_candidates_with_vectors_and_their_cosine() -> None:
    verifier = StandIn()
    s = verified_scope(verifier, depth=3)
    g = gathered(6, with_vectors={0, 2, 3, 4}, query=np.eye(4, dtype=np.float32)[0])
    result = QueryResult()
    out = await verify(s, g.rows.ranked, g, result)
    # key 1 has no stored vector: skipped; the first three with one are read
    assert list(out) == [key(0), key(2), key(3)]
    (question, texts, cosines) = verifier.read[0]
    assert question == QUESTION
    assert texts == ["memory 0", "memory 2", "memory 3"]
    assert cosines == pytest.approx([1.0, 0.0, 0.0])
    assert out[key(0)] == pytest.approx(1.0)
    assert result.verifier == "local"


async def test_a_failing_verifier_leaves_the_ranking_and_says_so() -> None:
    s = verified_scope(StandIn(fail=True))
    g = gathered(4, with_vectors={0, 1, 2, 3}, query=np.eye(4, dtype=np.float32)[0])
    result = QueryResult()
    assert await verify(s, g.rows.ranked, g, result) == {}
    assert result.verifier == "fallback"


async def test_keyword_only_reads_nothing() -> None:
    verifier = StandIn()
    s = verified_scope(verifier)
    g = gathered(4, with_vectors={0, 1, 2, 3}, query=None)  # the embedder failed
    result = QueryResult()
    assert await verify(s, g.rows.ranked, g, result) == {}
    assert verifier.read == [] and result.verifier is None


def test_only_a_preset_with_a_depth_gets_the_verifier() -> None:
    request = QueryRequest(user_id="alice", query=QUESTION, limit=5, min_score=0.0)
    verifier = StandIn()
    for name, preset in PRESETS.items():
        s = scope(request, QUESTION, preset, load_model(), None, verifier)  # type: ignore[arg-type]
        assert (s.verifier is verifier) == (name == "verified")
