"""A relevance model per embedder (relevance.model_file, relevance.model_for): the default's
file for the default embedder, an embedder's own file when there is one, else the default's
with a warning. Pure: files in tmp_path, no database."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from app.adapters.embedder import LOCAL_MODEL_ID
from app.config import Settings
from app.embedding_models import TRAINED_MODEL_ID
from app.retrieval.relevance import (
    DEFAULT_EMBEDDER,
    FEATURES,
    MODEL_PATH,
    MODELS_DIR,
    SHARES_DEFAULT_MODEL,
    RelevanceModel,
    load_model,
    model_file,
    model_for,
    parse_model,
)
from app.services.query import QueryService
from app.services.query.sizes import SearchSizes

OTHER = RelevanceModel("other-embedder-fit", tuple(0.25 * i for i in range(len(FEATURES))), -2.0)


def write(directory: Path, name: str, model: RelevanceModel) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    path.write_text(model.to_json({"embedder": name}))
    return path


def test_the_default_file_belongs_to_the_default_embedder() -> None:
    # relevance.py cannot import app.config: its constants must follow the product's models
    assert DEFAULT_EMBEDDER == LOCAL_MODEL_ID
    default = Settings.model_fields["embedding_model"].default
    assert default == TRAINED_MODEL_ID and default in SHARES_DEFAULT_MODEL
    for embedder in (DEFAULT_EMBEDDER, default):
        assert model_file(embedder) == MODEL_PATH
        assert model_for(embedder) is load_model()


def test_the_default_embedder_ignores_a_file_of_its_name_in_the_directory(tmp_path: Path) -> None:
    write(tmp_path, DEFAULT_EMBEDDER, OTHER)
    assert model_for(DEFAULT_EMBEDDER, tmp_path) is load_model()


def test_an_embedder_with_a_file_gets_its_own_model(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(tmp_path, "mpnet-like", OTHER)
    assert model_file("mpnet-like", tmp_path) == path
    with caplog.at_level(logging.WARNING, logger="app.retrieval.relevance"):
        model = model_for("mpnet-like", tmp_path)
    assert model == OTHER
    assert model != load_model()
    assert not [r for r in caplog.records if r.name == "app.retrieval.relevance"]


def test_an_embedder_without_a_file_falls_back_to_the_default_and_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="app.retrieval.relevance"):
        first = model_for("no-such-embedder", tmp_path)
        again = model_for("no-such-embedder", tmp_path)
    assert first is again is load_model()
    [record] = [r for r in caplog.records if r.name == "app.retrieval.relevance"]
    assert "no relevance model for embedder no-such-embedder" in record.getMessage()
    assert "no-such-embedder.json" in record.getMessage()


def test_a_hub_name_maps_to_one_file_name(tmp_path: Path) -> None:
    assert model_file("sentence-transformers/all-mpnet-base-v2", tmp_path) == (
        tmp_path / "sentence-transformers_all-mpnet-base-v2.json"
    )


@pytest.mark.parametrize("path", sorted(MODELS_DIR.glob("*.json")), ids=lambda p: p.name)
def test_every_committed_model_parses_and_is_named_for_its_embedder(path: Path) -> None:
    body: dict[str, Any] = json.loads(path.read_text())
    assert model_file(body["embedder"], variant=body.get("variant", "")) == path
    assert parse_model(path.read_text()) != load_model()


def test_the_mpnet_int8_model_is_committed() -> None:
    assert model_file("all-mpnet-base-v2-int8").exists()


@pytest.mark.parametrize(
    "embedder", [DEFAULT_EMBEDDER, "all-mpnet-base-v2-int8", "an-embedder-with-no-model"]
)
def test_the_query_service_ranks_with_its_embedders_model(embedder: str) -> None:
    embeddings: Any = SimpleNamespace(model=embedder)
    service = QueryService(None, embeddings, None, None, sizes=SearchSizes())  # type: ignore[arg-type]
    assert service.relevance is model_for(embedder)
    expected = model_file(embedder) if model_file(embedder).exists() else MODEL_PATH
    assert service.relevance is load_model(expected)
