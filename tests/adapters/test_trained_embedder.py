"""The embedder trained here (issue 45, `make train-embedder`): its committed graph and manifest,
the settings that select it, and what it was trained for, on hand-written examples that are
not in the corpus: a question in the first person finds the memory that names the user in the
third person."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from app.adapters import embedder as embedder_module
from app.adapters.embedder import (
    LOCAL_DIMENSION,
    TOKENIZER_SHA256,
    TRAINED_MODEL_ID,
    TRAINED_MODEL_SHA256,
    LocalEmbedder,
    file_sha256,
    trained_model_file,
)
from app.config import SettingsError, load_settings
from app.errors import EmbeddingError
from app.runtime import embedder_from_settings

# (memories of one user, first-person questions with the memory that answers each).
EXAMPLES = [
    (
        [
            "Alice is vegetarian.",
            "Alice's brother lives in Toronto.",
            "Alice drives a blue Honda Civic.",
            "Alice works night shifts at the hospital.",
            "Alice is learning to play the cello.",
            "The book club meets on the first Monday of the month.",
        ],
        {
            "What is my diet?": "Alice is vegetarian.",
            "What do you remember about my diet?": "Alice is vegetarian.",
            "Which instrument am I taking lessons on?": "Alice is learning to play the cello.",
        },
    ),
    (
        [
            "Tom's dog is named Biscuit.",
            "Tom plays five-a-side football on Tuesdays.",
            "Tom's landlord is raising the rent in May.",
            "Tom is allergic to penicillin.",
            "Tom's car is due for its MOT in October.",
        ],
        {
            "What's my pet called?": "Tom's dog is named Biscuit.",
            "Which antibiotics should I avoid?": "Tom is allergic to penicillin.",
        },
    ),
    (
        [
            "Priya takes the 7:40 train to work.",
            "Priya's sister is getting married in June.",
            "Priya is learning Portuguese.",
            "Priya hates coriander.",
            "Priya's manager is called Ruth.",
        ],
        {
            "How do I get to the office?": "Priya takes the 7:40 train to work.",
            "Who is my boss?": "Priya's manager is called Ruth.",
            "What herb can't I stand?": "Priya hates coriander.",
        },
    ),
]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("PGRECALL_EMBEDDING"):
            monkeypatch.delenv(name)


@pytest.fixture(scope="module")
def trained() -> LocalEmbedder:
    return LocalEmbedder(model=TRAINED_MODEL_ID)


def test_the_committed_graph_matches_its_pin_and_manifest() -> None:
    graph = trained_model_file()
    assert graph.is_file()
    assert graph.stat().st_size <= 25 * 1024 * 1024  # no committed file over 25 MB
    assert file_sha256(graph) == TRAINED_MODEL_SHA256
    manifest = json.loads((graph.parent / "manifest.json").read_text())
    assert manifest["model"] == TRAINED_MODEL_ID
    assert manifest["files"] == {graph.name: TRAINED_MODEL_SHA256}
    # The default model's tokenizer, not a copy of it.
    assert manifest["tokenizer"]["sha256"] == TOKENIZER_SHA256
    assert sorted(p.name for p in graph.parent.iterdir()) == ["manifest.json", graph.name]


def test_settings_select_it_at_the_default_width(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGRECALL_EMBEDDING_MODEL", TRAINED_MODEL_ID)
    settings = load_settings()
    assert settings.embedding_dimension == LOCAL_DIMENSION == 384
    built = embedder_from_settings(settings)
    assert isinstance(built, LocalEmbedder) and built.model == TRAINED_MODEL_ID
    monkeypatch.setenv("PGRECALL_EMBEDDING_DIMENSION", "768")
    with pytest.raises(SettingsError, match=f"{TRAINED_MODEL_ID} \\(dimension 384\\)"):
        load_settings()


def test_a_tampered_graph_fails_sha256(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    copy = tmp_path / "model-int8.onnx"
    shutil.copyfile(trained_model_file(), copy)
    with copy.open("r+b") as handle:  # flip one byte in the middle
        handle.seek(copy.stat().st_size // 2)
        byte = handle.read(1)
        handle.seek(-1, 1)
        handle.write(bytes([byte[0] ^ 0xFF]))
    monkeypatch.setattr(embedder_module, "trained_model_file", lambda: copy)
    with pytest.raises(EmbeddingError, match="sha256"):
        LocalEmbedder(model=TRAINED_MODEL_ID)
    monkeypatch.setattr(embedder_module, "trained_model_file", lambda: tmp_path / "absent")
    with pytest.raises(EmbeddingError, match="make train-embedder"):
        LocalEmbedder(model=TRAINED_MODEL_ID)


async def test_unit_vectors_of_the_default_width(trained: LocalEmbedder) -> None:
    texts = ["short", "a somewhat longer sentence about Postgres and pgvector", "ünïcödé ✓"]
    vectors = await trained.embed(texts)
    assert vectors.shape == (3, LOCAL_DIMENSION) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    # One text per inference: a batch gives each text its own vector.
    singles = np.stack([(await trained.embed([t]))[0] for t in texts])
    np.testing.assert_allclose(vectors, singles, atol=1e-6)


@pytest.mark.parametrize(("memories", "questions"), EXAMPLES)
def test_a_first_person_question_ranks_its_third_person_answer_first(
    trained: LocalEmbedder, memories: list[str], questions: dict[str, str]
) -> None:
    stored = trained.embed_sync(memories)
    asked = trained.embed_sync(list(questions))
    for (question, answer), cosines in zip(questions.items(), asked @ stored.T, strict=True):
        order = np.argsort(-cosines)
        assert memories[order[0]] == answer, (question, memories[order[0]])
        # ... and stands out: the runner-up is well below it (the smallest margin of the
        # 48-people graph: 0.131, "How do I get to the office?"; the 24-people one's 0.228).
        assert cosines[order[0]] - cosines[order[1]] > 0.1, (question, cosines[order[:2]])


def test_the_corpus_files_the_graph_was_trained_on_are_there_unchanged() -> None:
    """`make train-embedder` rebuilds the committed graph from the corpus files its manifest
    names (files written since are read only with --every-file): each is still there as it was."""
    manifest = json.loads((trained_model_file().parent / "manifest.json").read_text())
    corpus = {p: d for p, d in manifest["inputs"].items() if p.startswith("eval/corpus/")}
    root = Path(__file__).resolve().parents[2]
    assert corpus
    assert {p: file_sha256(root / p) for p in corpus} == corpus
