"""Export a sentence-transformers checkpoint (safetensors) to ONNX; install time only.

Run by scripts/install_local_model.py inside a throwaway venv that has torch, transformers,
onnx and onnxruntime: the service itself never imports torch. Writes

- model.onnx: the transformer, inputs input_ids and attention_mask (int64, batch x tokens),
  output last_hidden_state; pooling and the L2 norm stay in the service (app/adapters/
  local_models.py), as sentence-transformers does them outside the transformer;
- model-int8.onnx (with --int8): onnxruntime's dynamic quantisation of its MatMuls (int8
  weights per channel; activations quantised per inference, so the service runs one text per
  inference), except each layer's feed-forward down-projection (`output/dense`): its input, the
  GELU output, has outliers one int8 scale cannot hold (quantised too, a sentence's vector kept
  only cosine 0.86-0.93 to fp32; without them 0.98-0.995, docs/retrieval.md);

and checks the fp32 graph against torch on a few texts (mean pooling, cosine >= 0.9999).

    python export_sentence_onnx.py CHECKPOINT_DIR OUT_DIR [--int8]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnxruntime
import torch
from transformers import AutoModel, AutoTokenizer

CHECK_TEXTS = [
    "I prefer uv over pip for Python projects.",
    "Which package manager should I use?",
    "Melanie: I went to a pottery class with the kids last Saturday and we made little bowls.",
]

# sentence-transformers' max_seq_length for this model (sentence_bert_config.json).
MAX_TOKENS = 384
# Measured 0.977-0.996 on these texts; a graph under this is not installed.
INT8_MIN_COSINE = 0.97


class _Hidden(torch.nn.Module):
    """The transformer with a plain tensor output (ONNX export wants no ModelOutput)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def _mean_pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    weights = mask[:, :, None].astype(np.float32)
    pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


CASES = [CHECK_TEXTS, *([text] for text in CHECK_TEXTS)]


def _reference(wrapped: torch.nn.Module, tokenizer: object) -> list[tuple[dict, np.ndarray]]:
    """Each case's numpy feeds and torch's sentence vectors. Computed before the export: after
    it, the traced module no longer gives the plain model's outputs (measured: cosine 0.94)."""
    out = []
    for texts in CASES:
        batch = tokenizer(  # type: ignore[operator]
            texts, padding=True, truncation=True, max_length=MAX_TOKENS, return_tensors="pt"
        )
        with torch.no_grad():
            hidden = wrapped(batch["input_ids"], batch["attention_mask"]).numpy()
        feeds = {
            "input_ids": batch["input_ids"].numpy(),
            "attention_mask": batch["attention_mask"].numpy(),
        }
        out.append((feeds, _mean_pool(hidden, feeds["attention_mask"])))
    return out


def _worst(
    session: onnxruntime.InferenceSession, reference: list[tuple[dict, np.ndarray]]
) -> float:
    """The lowest cosine between the graph's sentence vectors and torch's."""
    worst = 1.0
    for feeds, want in reference:
        (hidden,) = session.run(["last_hidden_state"], feeds)
        got = _mean_pool(hidden, feeds["attention_mask"])
        worst = min(worst, float((want * got).sum(axis=1).min()))
    return worst


def export(checkpoint: Path, out: Path, int8: bool) -> None:
    model = AutoModel.from_pretrained(str(checkpoint), local_files_only=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(checkpoint), local_files_only=True)
    wrapped = _Hidden(model)
    reference = _reference(wrapped, tokenizer)
    batch = tokenizer(CHECK_TEXTS, padding=True, return_tensors="pt")
    onnx_path = out / "model.onnx"
    with torch.no_grad():
        torch.onnx.export(
            wrapped,
            (batch["input_ids"], batch["attention_mask"]),
            str(onnx_path),
            input_names=["input_ids", "attention_mask"],
            output_names=["last_hidden_state"],
            dynamic_axes={
                "input_ids": {0: "batch", 1: "tokens"},
                "attention_mask": {0: "batch", 1: "tokens"},
                "last_hidden_state": {0: "batch", 1: "tokens"},
            },
            opset_version=17,
            dynamo=False,
        )
    # The batch the graph was traced on, and each text alone (other shapes than the trace's).
    session = onnxruntime.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    worst = _worst(session, reference)
    print(f"fp32 ONNX vs torch: min cosine {worst:.6f}")
    if worst < 0.9999:
        sys.exit(f"the exported graph does not match torch (min cosine {worst:.6f})")
    if int8:
        import onnx
        from onnxruntime.quantization import QuantType, quantize_dynamic

        graph = onnx.load(str(onnx_path), load_external_data=False).graph
        keep_fp32 = [
            n.name for n in graph.node if n.op_type == "MatMul" and "output/dense" in n.name
        ]
        int8_path = out / "model-int8.onnx"
        quantize_dynamic(
            str(onnx_path),
            str(int8_path),
            per_channel=True,
            weight_type=QuantType.QInt8,
            op_types_to_quantize=["MatMul"],
            nodes_to_exclude=keep_fp32,
        )
        session = onnxruntime.InferenceSession(str(int8_path), providers=["CPUExecutionProvider"])
        # One text per inference, as the service runs a dynamically quantised graph.
        worst = _worst(session, reference[1:])
        print(f"int8 ONNX vs torch fp32, one text per inference: min cosine {worst:.4f}")
        if worst < INT8_MIN_COSINE:
            sys.exit(f"the int8 graph drifted from fp32 (min cosine {worst:.4f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--int8", action="store_true", help="also write model-int8.onnx")
    args = parser.parse_args()
    export(args.checkpoint, args.out, args.int8)


if __name__ == "__main__":
    main()
