"""Optional local models (all-mpnet-base-v2): the registry in the settings, the error when a
model is not installed or its files do not check out, and, where `make model-mpnet` installed
it, the real model (skipped otherwise: tests never download it)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest

from app.adapters.embed_scheduler import LOCAL_SLOTS, EmbedScheduler
from app.adapters.local_models import OnnxSentenceEmbedder
from app.adapters.quantized_model import default_cache_dir
from app.config import SettingsError, load_settings
from app.doctor.checks import check_embedder, check_local_model_installed
from app.embedding_models import MPNET, MPNET_INT8, OPTIONAL_LOCAL_MODELS
from app.errors import EmbeddingError, LocalModelMissingError
from app.runtime import embedder_from_settings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("PGRECALL_EMBEDDING"):
            monkeypatch.delenv(name)


# -- settings ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(OPTIONAL_LOCAL_MODELS))
def test_an_optional_local_model_with_its_dimension_is_accepted(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGRECALL_EMBEDDING_MODEL", name)
    monkeypatch.setenv("PGRECALL_EMBEDDING_DIMENSION", "768")
    settings = load_settings()
    assert settings.embedding_model == name and settings.embedding_dimension == 768


@pytest.mark.parametrize(
    ("model", "dimension"),
    [
        ("all-mpnet-base-v2", "384"),  # the default's width with the other model
        ("all-MiniLM-L6-v2-onnx-int8", "768"),
        ("text-embedding-3-small", "1536"),  # an API model on the local provider
    ],
)
def test_a_local_model_with_another_dimension_or_unknown_is_rejected(
    model: str, dimension: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGRECALL_EMBEDDING_MODEL", model)
    monkeypatch.setenv("PGRECALL_EMBEDDING_DIMENSION", dimension)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    message = str(caught.value)
    assert "PGRECALL_EMBEDDING_MODEL" in message
    # It lists what the local provider serves.
    assert "all-MiniLM-L6-v2-onnx-dq8 (dimension 384)" in message
    assert "all-mpnet-base-v2 (dimension 768)" in message


def test_the_registry_is_mpnet_with_mean_pooling_settings() -> None:
    # Both names read the same install; only the int8 graph runs one text per inference.
    assert MPNET.directory == MPNET_INT8.directory == "all-mpnet-base-v2"
    assert (MPNET.graph, MPNET_INT8.graph) == ("model.onnx", "model-int8.onnx")
    assert not MPNET.one_text_per_inference and MPNET_INT8.one_text_per_inference
    assert MPNET.dimension == 768 and MPNET.max_tokens == 384 and MPNET.pad_id == 1


# -- not installed, or not intact ---------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(OPTIONAL_LOCAL_MODELS))
def test_a_model_that_is_not_installed_names_the_install_command(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The installer's and the service's directory: the model cache (PGRECALL_MODEL_CACHE).
    monkeypatch.setenv("PGRECALL_MODEL_CACHE", str(tmp_path))
    settings = load_settings(embedding_model=name, embedding_dimension=768)
    with pytest.raises(LocalModelMissingError) as caught:
        embedder_from_settings(settings)
    message = caught.value.message
    assert f"{name} is not installed in {tmp_path / 'all-mpnet-base-v2'}" in message
    assert "make model-mpnet" in message and "PGRECALL_MODEL_CACHE" in message
    # One hierarchy: the service reports it as the embedder's failure (503).
    assert isinstance(caught.value, EmbeddingError) and caught.value.status_code == 503


def _fake_install(directory: Path, tokenizer: bytes, graph: bytes) -> None:
    directory.mkdir(parents=True)
    (directory / "tokenizer.json").write_bytes(tokenizer)
    (directory / "model.onnx").write_bytes(graph)
    recorded = {"model.onnx": hashlib.sha256(b"the graph the installer wrote").hexdigest()}
    (directory / "manifest.json").write_text(json.dumps({"files": recorded}))


@pytest.mark.parametrize(
    ("tokenizer", "graph", "named"),
    [
        (b"{}", b"the graph the installer wrote", "tokenizer.json: sha256"),
        (b"{}", b"a graph changed after install", "model.onnx: sha256"),
    ],
)
def test_files_that_do_not_check_out_are_refused_before_loading(
    tokenizer: bytes, graph: bytes, named: str, tmp_path: Path
) -> None:
    _fake_install(tmp_path / "all-mpnet-base-v2", tokenizer, graph)
    with pytest.raises(LocalModelMissingError) as caught:
        OnnxSentenceEmbedder(MPNET, tmp_path)
    # The graph is checked against the install's manifest, the tokenizer against its pin.
    assert named in caught.value.message and "make model-mpnet" in caught.value.message


def test_an_unreadable_manifest_is_refused(tmp_path: Path) -> None:
    (tmp_path / "all-mpnet-base-v2").mkdir()
    (tmp_path / "all-mpnet-base-v2" / "manifest.json").write_text("not json")
    with pytest.raises(LocalModelMissingError, match=r"manifest\.json is unreadable"):
        OnnxSentenceEmbedder(MPNET_INT8, tmp_path)


# -- the installed model (skipped unless installed) ---------------------------------------------

INSTALLED = default_cache_dir() / "all-mpnet-base-v2" / "manifest.json"
needs_mpnet = pytest.mark.skipif(
    not INSTALLED.is_file(),
    reason=f"all-mpnet-base-v2 is not installed ({INSTALLED} missing): `make model-mpnet`",
)


@pytest.fixture(scope="module")
def mpnet() -> OnnxSentenceEmbedder:
    return OnnxSentenceEmbedder(MPNET, threads=1)


@pytest.fixture(scope="module")
def mpnet_int8() -> OnnxSentenceEmbedder:
    return OnnxSentenceEmbedder(MPNET_INT8, threads=1)


TEXTS = [
    "I prefer uv over pip for Python projects.",
    "Which package manager should I use?",
    "The cat is sleeping on the warm windowsill.",
    "Quarterly revenue grew by eight percent.",
    "memory " * 1000,  # over max_seq_length: truncated, not rejected
]


@needs_mpnet
async def test_mpnet_embeds_unit_vectors_and_ranks_a_paraphrase_first(
    mpnet: OnnxSentenceEmbedder,
) -> None:
    vectors = await mpnet.embed(TEXTS)
    assert vectors.shape == (5, 768) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    question = vectors[1]
    assert float(question @ vectors[0]) > max(float(question @ v) for v in vectors[2:4]) + 0.2
    # The scheduler treats it as the local model it is (bulk on the low-priority thread).
    assert EmbedScheduler.for_embedder(mpnet).slots == LOCAL_SLOTS


@needs_mpnet
async def test_mpnet_batch_matches_one_by_one(mpnet: OnnxSentenceEmbedder) -> None:
    batch = mpnet.embed_sync(TEXTS)
    singles = np.concatenate([mpnet.embed_sync([t]) for t in TEXTS])
    np.testing.assert_allclose(batch, singles, atol=1e-4)


@needs_mpnet
async def test_int8_runs_one_text_per_inference_and_stays_close_to_fp32(
    mpnet: OnnxSentenceEmbedder, mpnet_int8: OnnxSentenceEmbedder
) -> None:
    batch = mpnet_int8.embed_sync(TEXTS)
    # One text per inference: a text's vector does not depend on its batch neighbours.
    np.testing.assert_array_equal(batch[1], mpnet_int8.embed_sync([TEXTS[1]])[0])
    cosines = (batch * mpnet.embed_sync(TEXTS)).sum(axis=1)
    assert cosines.min() > 0.97, cosines


# -- serve's preflight and doctor ---------------------------------------------------------------


async def test_serve_and_doctor_name_the_install_command_when_not_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGRECALL_EMBEDDING_MODEL", "all-mpnet-base-v2-int8")
    monkeypatch.setenv("PGRECALL_EMBEDDING_DIMENSION", "768")
    monkeypatch.setenv("PGRECALL_MODEL_CACHE", str(tmp_path))
    settings = load_settings()
    preflight = check_local_model_installed(settings)  # what `pgrecall serve` prints and exits on
    doctor = await check_embedder(settings)
    for check in (preflight, doctor):
        assert not check.ok and "make model-mpnet" in check.message, check
    assert "all-mpnet-base-v2-int8 is not installed" in preflight.message
    # The default model needs no install.
    assert check_local_model_installed(
        load_settings(embedding_model="all-MiniLM-L6-v2-onnx-int8", embedding_dimension=384)
    ).ok
