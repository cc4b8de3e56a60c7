"""Export the fine-tuned MiniLM to ONNX the way the service runs its default model.

Run inside the training venv (scripts/train/finetune.py calls `export`). Writes

- model.onnx: the transformer in fp32, inputs input_ids, attention_mask and token_type_ids
  (int64, batch x tokens: the inputs of the default graph, so app/adapters/embedder.py's
  LocalEmbedder feeds it unchanged), output last_hidden_state; pooling and the L2 norm stay in
  the service;
- model-int8.onnx: the default model's recipe exactly (app/adapters/quantized_model.py,
  `build_dynamic_int8`): onnxruntime's `quantize_dynamic` with its default operator set (every
  MatMul as MatMulInteger, the feed-forward down-projection included, and the embedding tables
  as uint8 Gathers), int8 weights per channel, activations quantised per inference, so the
  service runs one text per inference. It is the faster of the two recipes in this repository
  (scripts/export_sentence_onnx.py keeps the down-projection and the embeddings in fp32:
  larger, and slower per query) and the one whose file fits in 25 MB.

Checked here: the fp32 graph against torch (cosine >= 0.9999), the int8 graph against the fp32
graph one text per inference (cosine >= INT8_MIN_COSINE on every check text).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import torch
from onnxruntime.quantization import QuantType, quantize_dynamic
from tokenizers import Tokenizer

INT8_MIN_COSINE = 0.97
FP32_MIN_COSINE = 0.9999
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class _Hidden(torch.nn.Module):
    """The transformer with a plain tensor output (ONNX export wants no ModelOutput)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
    ) -> torch.Tensor:
        return self.model(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).last_hidden_state


def feeds(tokenizer: Tokenizer, texts: Sequence[str]) -> dict[str, np.ndarray]:
    encodings = tokenizer.encode_batch(list(texts))
    ids = np.array([e.ids for e in encodings], dtype=np.int64)
    mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}


def mean_pooled(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """As app/adapters/embedder.py: mean over the real tokens, then the L2 norm."""
    weights = mask[:, :, None].astype(np.float32)
    pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


def session(path: Path, threads: int = 1) -> onnxruntime.InferenceSession:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return onnxruntime.InferenceSession(
        str(path), sess_options=options, providers=["CPUExecutionProvider"]
    )


def embed_onnx(
    graph: onnxruntime.InferenceSession, tokenizer: Tokenizer, texts: Sequence[str]
) -> np.ndarray:
    """One text per inference, as the service runs a dynamically quantised graph."""
    rows = []
    for text in texts:
        batch = feeds(tokenizer, [text])
        (hidden,) = graph.run(["last_hidden_state"], batch)
        rows.append(mean_pooled(hidden, batch["attention_mask"])[0])
    return np.stack(rows).astype(np.float32)


@contextlib.contextmanager
def _quiet_root_logger() -> Iterator[None]:
    """The quantiser advises pre-processing through the root logger: not needed here (the
    service's graph is quantised without it)."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)


def export(
    model: torch.nn.Module,
    tokenizer: Tokenizer,
    out: Path,
    check_texts: Sequence[str],
) -> dict[str, float]:
    """Write out/model.onnx and out/model-int8.onnx; return the checks' figures."""
    model = model.eval()
    wrapped = _Hidden(model)
    trace = feeds(tokenizer, check_texts[:3])
    fp32_path, int8_path = out / "model.onnx", out / "model-int8.onnx"
    # torch's own vectors for the check texts, each alone, before the export traces the module.
    with torch.no_grad():
        want = []
        for text in check_texts:
            one = feeds(tokenizer, [text])
            hidden = wrapped(*(torch.from_numpy(one[name]) for name in INPUTS)).numpy()
            want.append(mean_pooled(hidden, one["attention_mask"])[0])
        reference = np.stack(want)
        torch.onnx.export(
            wrapped,
            tuple(torch.from_numpy(trace[name]) for name in INPUTS),
            str(fp32_path),
            input_names=list(INPUTS),
            output_names=["last_hidden_state"],
            dynamic_axes={
                **{name: {0: "batch", 1: "tokens"} for name in INPUTS},
                "last_hidden_state": {0: "batch", 1: "tokens"},
            },
            opset_version=17,
            dynamo=False,
        )
    fp32 = embed_onnx(session(fp32_path), tokenizer, check_texts)
    fp32_vs_torch = float((fp32 * reference).sum(axis=1).min())
    print(f"fp32 ONNX vs torch: min cosine {fp32_vs_torch:.6f}", flush=True)
    if fp32_vs_torch < FP32_MIN_COSINE:
        raise SystemExit(f"the exported graph does not match torch ({fp32_vs_torch:.6f})")
    onnx.checker.check_model(str(fp32_path))
    with _quiet_root_logger():
        # app/adapters/quantized_model.py's call, argument for argument.
        quantize_dynamic(fp32_path, int8_path, weight_type=QuantType.QInt8, per_channel=True)
    int8 = embed_onnx(session(int8_path), tokenizer, check_texts)
    cosines = (int8 * fp32).sum(axis=1)
    figures = {
        "fp32_vs_torch_min_cosine": fp32_vs_torch,
        "int8_vs_fp32_min_cosine": float(cosines.min()),
        "int8_vs_fp32_mean_cosine": float(cosines.mean()),
        "int8_check_texts": float(len(check_texts)),
        "int8_bytes": float(int8_path.stat().st_size),
    }
    print(
        f"int8 ONNX vs fp32, one text per inference, {len(check_texts)} texts: "
        f"min cosine {cosines.min():.4f}, mean {cosines.mean():.4f}; "
        f"{int8_path.stat().st_size / 1e6:.1f} MB",
        flush=True,
    )
    if cosines.min() < INT8_MIN_COSINE:
        raise SystemExit(f"the int8 graph drifted from fp32 (min cosine {cosines.min():.4f})")
    return figures
