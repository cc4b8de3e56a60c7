"""Embedders: the real local MiniLM (offline) and the OpenAI-compatible client on a local server."""

from __future__ import annotations

import json
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.adapters import embedder as embedder_module
from app.adapters import quantized_model
from app.adapters.embedder import (
    LOCAL_DIMENSION,
    LOCAL_MODEL_ID,
    LocalEmbedder,
    OpenAIEmbedder,
    build_embedder,
    local_model_files,
)
from app.embedding_models import DEFAULT_MODEL_ID, FLOAT_MODEL_ID, TRAINED_MODEL_ID
from app.errors import EmbeddingError

# -- local model ------------------------------------------------------------------------------


async def test_paraphrases_closer_than_unrelated(embedder: LocalEmbedder) -> None:
    vectors = await embedder.embed(
        [
            "How do I reset my password?",
            "What are the steps to change my login password?",
            "The cat is sleeping on the warm windowsill.",
            "Quarterly revenue grew by eight percent.",
        ]
    )
    para = float(vectors[0] @ vectors[1])
    unrelated = [float(vectors[i] @ vectors[j]) for i, j in ((0, 2), (0, 3), (1, 2), (2, 3))]
    assert para > 0.6
    assert para > max(unrelated) + 0.3, (para, unrelated)


async def test_unit_norm_and_shape(embedder: LocalEmbedder) -> None:
    texts = ["short", "a somewhat longer sentence about Postgres and pgvector", "ünïcödé ✓ 日本語"]
    vectors = await embedder.embed(texts)
    assert vectors.shape == (3, LOCAL_DIMENSION)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert embedder.model == DEFAULT_MODEL_ID == TRAINED_MODEL_ID
    assert (await embedder.embed([])).shape == (0, LOCAL_DIMENSION)


async def test_batch_matches_one_by_one_in_order(embedder: LocalEmbedder) -> None:
    # Lengths vary so the batch is reordered (by length) internally and padded; 40 > one batch.
    texts = [f"sentence number {i} " + "word " * (i % 7) for i in range(40)]
    texts[5] = "I prefer tea in the morning and coffee after lunch, never the other way round."
    batch = await embedder.embed(texts)
    singles = np.stack([(await embedder.embed([t]))[0] for t in texts])
    np.testing.assert_allclose(batch, singles, atol=1e-5)
    # Different texts, different vectors: the order really was preserved, not just the set.
    assert float(batch[5] @ singles[6]) < 0.99


async def test_long_input_is_truncated_not_rejected(embedder: LocalEmbedder) -> None:
    vectors = await embedder.embed(["memory " * 5000])
    assert vectors.shape == (1, LOCAL_DIMENSION)


@pytest.mark.parametrize("tampered", ["model", "tokenizer"])
def test_tampered_files_fail_sha256(
    tampered: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, tokenizer = local_model_files()
    source = model if tampered == "model" else tokenizer
    copy = tmp_path / source.name
    shutil.copyfile(source, copy)
    with copy.open("r+b") as handle:  # flip one byte in the middle
        handle.seek(copy.stat().st_size // 2)
        byte = handle.read(1)
        handle.seek(-1, 1)
        handle.write(bytes([byte[0] ^ 0xFF]))
    files = (copy, tokenizer) if tampered == "model" else (model, copy)
    monkeypatch.setattr(embedder_module, "local_model_files", lambda: files)
    with pytest.raises(EmbeddingError, match="sha256"):
        LocalEmbedder(model=LOCAL_MODEL_ID)


@pytest.mark.parametrize("model", [LOCAL_MODEL_ID, FLOAT_MODEL_ID])
def test_build_embedder_local(model: str) -> None:
    built = build_embedder("local", model=model, dimension=LOCAL_DIMENSION)
    assert isinstance(built, LocalEmbedder)
    assert built.model == model


def test_unknown_local_model_is_refused() -> None:
    with pytest.raises(EmbeddingError, match="unknown local model"):
        LocalEmbedder(model="all-MiniLM-L12-v2")


def test_int8_graph_stays_close_to_the_float_one() -> None:
    # The int8 MiniLM runs int8 arithmetic; the earlier graph (float arithmetic) is kept by
    # name. Same model, different arithmetic: close vectors, and the same neighbours.
    embedder = LocalEmbedder(model=LOCAL_MODEL_ID)
    texts = [
        "I prefer uv over pip for Python projects",
        "which package manager should I use?",
        "My sister is a nurse in Leeds",
        "The lease on the car ends in March",
    ]
    float_model = LocalEmbedder(model=FLOAT_MODEL_ID)
    assert float_model.model == FLOAT_MODEL_ID
    ours, theirs = embedder.embed_sync(texts), float_model.embed_sync(texts)
    assert np.all(np.sum(ours * theirs, axis=1) > 0.98)
    assert not np.array_equal(ours, theirs)  # really two graphs
    np.testing.assert_allclose(ours @ ours.T, theirs @ theirs.T, atol=0.03)


def test_int8_graph_is_built_once_and_checked(tmp_path: Path) -> None:
    source, _ = local_model_files()
    first = quantized_model.dynamic_int8_model(source, tmp_path)
    (cached,) = tmp_path.iterdir()
    assert quantized_model.sha256_of(first) == quantized_model.DYNAMIC_INT8_SHA256
    assert cached.read_bytes() == first
    # A corrupt cache is rebuilt, not used.
    cached.write_bytes(b"not a model")
    assert quantized_model.dynamic_int8_model(source, tmp_path) == first
    assert cached.read_bytes() == first


def test_int8_graph_without_a_writable_cache(tmp_path: Path) -> None:
    source, _ = local_model_files()
    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache directory would be")
    data = quantized_model.dynamic_int8_model(source, blocked / "models")
    assert quantized_model.sha256_of(data) == quantized_model.DYNAMIC_INT8_SHA256


# -- OpenAI-compatible endpoint ---------------------------------------------------------------


@dataclass
class FakeEmbeddingsAPI:
    """What the local server does and what it saw."""

    mode: str = "ok"  # ok | error | slow | drip (headers at once, then a byte every 0.3 s)
    requests: list[dict[str, Any]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)


DRIP_S = 0.3


def _vector(text: str, dims: int) -> list[float]:
    """Deterministic, text-dependent, deliberately not unit length (the client normalises)."""
    seed = sum(ord(c) for c in text)
    rng = np.random.default_rng(seed)
    return [float(v) * 3.0 for v in rng.standard_normal(dims)]


def _handler(api: FakeEmbeddingsAPI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the test reads `api.requests` instead."""

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            api.requests.append(
                {"path": self.path, "body": body, "auth": self.headers.get("Authorization")}
            )
            if api.mode == "slow":
                api.stop.wait(5)
            if api.mode == "error":
                self._reply(500, {"error": {"message": "boom", "type": "server_error"}})
                return
            if self.path != "/v1/embeddings":
                self._reply(404, {"error": {"message": "no route"}})
                return
            inputs = body["input"]
            dims = body.get("dimensions", 8)
            data = [
                {"object": "embedding", "index": i, "embedding": _vector(t, dims)}
                for i, t in enumerate(inputs)
            ]
            data.reverse()  # the client must sort by index, not trust the order
            self._reply(
                200,
                {
                    "object": "list",
                    "data": data,
                    "model": body["model"],
                    "usage": {"prompt_tokens": 1, "total_tokens": 1},
                },
            )

        def _reply(self, status: int, payload: dict[str, Any]) -> None:
            raw = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                if api.mode != "drip":
                    self.wfile.write(raw)
                    return
                self.wfile.flush()
                for n in range(len(raw)):
                    if api.stop.wait(DRIP_S):
                        return
                    self.wfile.write(raw[n : n + 1])
                    self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                return  # the client timed out and left; that is the point of the slow mode

    return Handler


@pytest.fixture
def embeddings_api() -> Iterator[tuple[str, FakeEmbeddingsAPI]]:
    api = FakeEmbeddingsAPI()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(api))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    try:
        yield f"http://{host}:{port}/v1", api
    finally:
        api.stop.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


def _client(base_url: str, dimension: int = 16, timeout_s: float = 5.0) -> OpenAIEmbedder:
    return OpenAIEmbedder(
        model="text-embedding-3-small",
        dimension=dimension,
        base_url=base_url,
        api_key="sk-local-test",
        timeout_s=timeout_s,
    )


async def test_openai_vectors_in_input_order(
    embeddings_api: tuple[str, FakeEmbeddingsAPI],
) -> None:
    base_url, api = embeddings_api
    client = _client(base_url, dimension=16)
    try:
        texts = ["first", "second text", "third one here"]
        vectors = await client.embed(texts)
    finally:
        await client.aclose()
    assert vectors.shape == (3, 16) and vectors.dtype == np.float32
    for text, row in zip(texts, vectors, strict=True):
        expected = np.array(_vector(text, 16), dtype=np.float32)
        np.testing.assert_allclose(row, expected / np.linalg.norm(expected), atol=1e-6)
    (request,) = api.requests
    assert request["path"] == "/v1/embeddings"
    assert request["body"]["input"] == texts
    assert request["body"]["model"] == "text-embedding-3-small"
    assert request["body"]["dimensions"] == 16
    assert request["auth"] == "Bearer sk-local-test"


async def test_openai_dimensions_honoured(embeddings_api: tuple[str, FakeEmbeddingsAPI]) -> None:
    base_url, api = embeddings_api
    client = build_embedder(
        "openai", model="text-embedding-3-small", dimension=1536, base_url=base_url, api_key="k"
    )
    try:
        vectors = await client.embed(["hello"])
    finally:
        await client.aclose()  # type: ignore[attr-defined]
    assert vectors.shape == (1, 1536)
    assert api.requests[0]["body"]["dimensions"] == 1536


async def test_openai_large_batches_are_split_in_order(
    embeddings_api: tuple[str, FakeEmbeddingsAPI],
) -> None:
    base_url, api = embeddings_api
    client = _client(base_url, dimension=8)
    texts = [f"text {i}" for i in range(300)]
    try:
        vectors = await client.embed(texts)
    finally:
        await client.aclose()
    assert vectors.shape == (300, 8)
    assert [len(r["body"]["input"]) for r in api.requests] == [256, 44]
    expected = np.array(_vector(texts[299], 8), dtype=np.float32)
    np.testing.assert_allclose(vectors[299], expected / np.linalg.norm(expected), atol=1e-6)


async def test_openai_server_error_is_embedding_error(
    embeddings_api: tuple[str, FakeEmbeddingsAPI],
) -> None:
    base_url, api = embeddings_api
    api.mode = "error"
    client = _client(base_url)
    try:
        with pytest.raises(EmbeddingError, match="embedding API failed"):
            await client.embed(["x"])
    finally:
        await client.aclose()
    assert len(api.requests) == 2  # one retry, then give up


async def test_openai_wrong_dimension_is_embedding_error(
    embeddings_api: tuple[str, FakeEmbeddingsAPI],
) -> None:
    base_url, _ = embeddings_api
    client = OpenAIEmbedder(
        model="m", dimension=32, base_url=base_url, api_key="k", send_dimensions=False
    )
    try:
        with pytest.raises(EmbeddingError, match="shape"):
            await client.embed(["x"])  # the server falls back to 8 dimensions
    finally:
        await client.aclose()


async def test_openai_timeout_is_embedding_error(
    embeddings_api: tuple[str, FakeEmbeddingsAPI],
) -> None:
    base_url, api = embeddings_api
    api.mode = "slow"
    client = _client(base_url, timeout_s=0.3)
    started = time.monotonic()
    try:
        with pytest.raises(EmbeddingError, match="Timeout"):
            await client.embed(["x"])
    finally:
        await client.aclose()
    assert time.monotonic() - started < 4


async def test_openai_unreachable_is_embedding_error() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = _client(f"http://127.0.0.1:{port}/v1")
    try:
        with pytest.raises(EmbeddingError):
            await client.embed(["x"])
    finally:
        await client.aclose()


async def test_a_drip_fed_answer_fails_at_the_deadline(
    embeddings_api: tuple[str, FakeEmbeddingsAPI],
) -> None:
    """Headers at once, then a byte every 0.3 s: no read times out, the one deadline over the
    request (its retry included) does (app/deadline.py)."""
    base_url, api = embeddings_api
    api.mode = "drip"
    client = _client(base_url, timeout_s=1.5)
    started = time.monotonic()
    try:
        with pytest.raises(EmbeddingError, match=r"no whole answer within 1\.5 s"):
            await client.embed(["a slow one"])
    finally:
        await client.aclose()
    assert 1.4 <= time.monotonic() - started <= 2.5
