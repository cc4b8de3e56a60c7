"""The answer verifier (issue 45): a small cross-encoder of our own on onnxruntime.

A cosine compares two vectors made apart; the verifier reads the question and one candidate
together ("[CLS] question [SEP] candidate [SEP]", the first layers of all-MiniLM-L6-v2
fine-tuned on the corpus's train people: scripts/train_verifier.py) and gives the logit that
the candidate answers the question, with the pair's cosine under the trained embedder as a
second input. The Platt scale fitted on the validation people turns it into a probability
(`manifest.json`). The query pipeline reads it for the first candidates of the `answers`
preset's ranking (app/services/query/calibrate.py, `verify`).

The graph is dynamically quantised (int8 arithmetic, activations scaled per inference), so it
runs one pair per inference, as the embedder does one text. No network, no torch. It is not
committed: it was measured and not chosen (docs/retrieval.md, "The answer verifier"), and
`make train-verifier` builds it into app/adapters/models/VERIFIER_ID (ignored by git) with a
manifest whose sha256 the loader checks.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import numpy.typing as npt

from app.adapters.embedder import TOKENIZER_SHA256, file_sha256, local_model_files, onnx_session
from app.embedding_models import TRAINED_MODEL_ID
from app.errors import EmbeddingError, LocalModelMissingError

log = logging.getLogger(__name__)

VERIFIER_ID = "pgrecall-verifier-v1"
GRAPH = "verifier-int8.onnx"
MAX_TOKENS = 128

Logits = npt.NDArray[np.float32]


def verifier_dir() -> Path:
    return Path(__file__).resolve().parent / "models" / VERIFIER_ID


@dataclass(frozen=True)
class Platt:
    """P(answers) = sigmoid(scale * logit + shift)."""

    scale: float
    shift: float


class Verifier:
    """Scores (question, candidate, cosine) triples; `logits` runs in a worker thread."""

    model = VERIFIER_ID

    def __init__(self, directory: Path | None = None) -> None:
        from tokenizers import Tokenizer

        directory = directory or verifier_dir()
        graph, manifest_path = directory / GRAPH, directory / "manifest.json"
        if not graph.is_file() or not manifest_path.is_file():
            raise LocalModelMissingError(
                f"the answer verifier is not built ({graph} or its manifest is missing): "
                "`make train-verifier` builds it"
            )
        try:
            manifest = json.loads(manifest_path.read_text())
            recorded = manifest["files"][GRAPH]
            platt = Platt(float(manifest["platt"]["scale"]), float(manifest["platt"]["shift"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise LocalModelMissingError(f"{manifest_path} is unreadable ({exc})") from exc
        _, tokenizer_path = local_model_files()
        for path, expected in (
            (graph, recorded),
            (tokenizer_path, TOKENIZER_SHA256),
        ):
            actual = file_sha256(path)
            if actual != expected:
                raise LocalModelMissingError(
                    f"{path.name}: sha256 {actual} does not match {expected}"
                )
        self.platt = platt
        self._tokenizer = Tokenizer.from_file(str(tokenizer_path))
        self._tokenizer.enable_truncation(max_length=MAX_TOKENS)
        self._tokenizer.no_padding()  # one pair per inference: its own length
        self._session = onnx_session(str(graph), 1)

    def logits_sync(self, question: str, items: Sequence[str], cosines: Sequence[float]) -> Logits:
        out = np.empty(len(items), dtype=np.float32)
        for i, (item, cosine) in enumerate(zip(items, cosines, strict=True)):
            e = self._tokenizer.encode(question, item)
            feeds = {
                "input_ids": np.array([e.ids], dtype=np.int64),
                "attention_mask": np.array([e.attention_mask], dtype=np.int64),
                "token_type_ids": np.array([e.type_ids], dtype=np.int64),
                "cosine": np.array([cosine], dtype=np.float32),
            }
            out[i] = self._session.run(["logit"], feeds)[0][0]
        return out

    async def logits(self, question: str, items: Sequence[str], cosines: Sequence[float]) -> Logits:
        """As `logits_sync`, in the default executor (ONNX Runtime releases the GIL); raises
        EmbeddingError when the graph fails."""
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(
                None, self.logits_sync, question, list(items), list(cosines)
            )
        except Exception as exc:  # onnxruntime raises plain RuntimeErrors
            raise EmbeddingError(f"answer verifier failed: {exc}") from exc

    def probabilities(self, logits: Logits) -> Logits:
        z = self.platt.scale * logits.astype(np.float64) + self.platt.shift
        return (1.0 / (1.0 + np.exp(-z))).astype(np.float32)


# The embedder whose cosine the verifier is trained on (its second input): scripts/
# train_verifier.py trains beside the trained MiniLM, whichever version is committed.
VERIFIER_EMBEDDER = TRAINED_MODEL_ID


@cache
def verifier_for(embedder: str) -> Verifier | None:
    """The process's verifier (loaded once) when the service embeds with the model it was
    trained beside; None, with one warning, for another embedder: its cosines are not the
    verifier's input."""
    if embedder != VERIFIER_EMBEDDER:
        log.warning(
            "the answer verifier reads %s's cosines; the service embeds with %s: it is off",
            VERIFIER_EMBEDDER,
            embedder,
        )
        return None
    return Verifier()
