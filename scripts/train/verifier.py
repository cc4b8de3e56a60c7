"""Train the answer verifier of issue 45: a small cross-encoder, P(this item answers this question).

Run inside the throwaway training venv by scripts/train_verifier.py, which mines the pairs
first (`--pairs`: each question of the corpus's train and validation people and of LoCoMo's
training conversations against its closest items by the trained embedder's cosine, the
person's other questions among them; see that script). The test people are never in the file.

The model reads "[CLS] question [SEP] item [SEP]" with the first `--layers` layers of
all-MiniLM-L6-v2 and says, from the [CLS] state and the pair's cosine under the service's
embedder (an input: the pipeline has it), the logit that the item answers the question:

    logit = w . h_cls + a * cosine + b        (a starts at 12, b at -6: the cosine's prior)

Loss: binary cross-entropy over every mined pair (answers 1, every other candidate 0, a
question nothing answers all 0: so the logit is absolute, not relative to the other
candidates), positives weighted to a third of the total. Fixed seed, 2 threads, AdamW with a
linear warm-up and decay. After each epoch the validation people's pairs give the figures the
epoch is kept by (AUC of each question's best logit, answerable over none; ties to first
place); the kept epoch's logits on validation fit the Platt scale the service reads
(P = sigmoid(scale * logit + shift)). Then the ONNX export (inputs input_ids, attention_mask,
token_type_ids, cosine; output logit) and its dynamic int8 graph, one pair per inference as the
service runs it, checked against fp32.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime
import torch

# export_onnx and finetune are beside this file (its directory is the path's first entry
# when it runs): their one-thread session and AUC, not copies of them.
from export_onnx import session
from finetune import auc
from onnxruntime.quantization import QuantType, quantize_dynamic
from tokenizers import Tokenizer
from transformers import AutoModel

SEED = 45
LAYERS = 3
EPOCHS = 3
LEARNING_RATE = 4e-5
HEAD_LEARNING_RATE = 1e-3
BATCH = 32
MAX_TOKENS = 128
EVAL_DEPTH = 10  # the validation figures read each question's first 10 candidates
INT8_MAX_DIFF = 0.6  # logits: int8 against fp32, the largest difference allowed
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class Verifier(torch.nn.Module):
    def __init__(self, checkpoint: Path, layers: int) -> None:
        super().__init__()
        self.bert = AutoModel.from_pretrained(str(checkpoint))
        self.bert.encoder.layer = self.bert.encoder.layer[:layers]
        self.bert.config.num_hidden_layers = layers
        self.linear = torch.nn.Linear(self.bert.config.hidden_size, 1)
        torch.nn.init.zeros_(self.linear.weight)
        torch.nn.init.zeros_(self.linear.bias)
        self.a = torch.nn.Parameter(torch.tensor(12.0))
        self.b = torch.nn.Parameter(torch.tensor(-6.0))

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor,
        cosine: torch.Tensor,
    ) -> torch.Tensor:
        hidden = self.bert(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).last_hidden_state[:, 0]
        return self.linear(hidden).squeeze(-1) + self.a * cosine + self.b


def tokenizer_for(path: Path) -> Tokenizer:
    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.enable_truncation(max_length=MAX_TOKENS)
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    return tokenizer


def feeds(tokenizer: Tokenizer, questions: list[str], items: list[str]) -> dict[str, np.ndarray]:
    encodings = tokenizer.encode_batch(list(zip(questions, items, strict=True)))
    return {
        "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
        "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
        "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
    }


def figures(questions: list[dict[str, Any]], scores: list[list[float]]) -> dict[str, float]:
    """First place, paraphrase first, present in 5, and the AUC of each question's best score
    (answerable over none) over the first EVAL_DEPTH candidates."""
    first, paraphrase, present, best_answerable, best_none = [], [], [], [], []
    for q, row in zip(questions, scores, strict=True):
        labels = [c["label"] for c in q["candidates"][:EVAL_DEPTH]]
        order = sorted(range(len(row)), key=lambda i: -row[i])
        if q["answerable"]:
            best_answerable.append(max(row))
            first.append(labels[order[0]] == 1)
            if q["shape"] == "paraphrase":
                paraphrase.append(labels[order[0]] == 1)
            present.append(any(labels[i] == 1 for i in order[:5]))
        else:
            best_none.append(max(row))
    out = {
        "first": float(np.mean(first)),
        "present5": float(np.mean(present)),
        "questions": float(len(questions)),
    }
    if paraphrase:
        out["paraphrase_first"] = float(np.mean(paraphrase))
    if best_none:
        out["auc"] = auc(best_answerable, best_none)
    return out


def show(label: str, f: dict[str, float]) -> None:
    parts = [f"{k} {v:.3f}" for k, v in f.items() if k != "questions"]
    print(f"{label:<28} " + "  ".join(parts), flush=True)


def score(
    model: Verifier, tokenizer: Tokenizer, questions: list[dict[str, Any]]
) -> list[list[float]]:
    model.eval()
    flat = [(i, c) for i, q in enumerate(questions) for c in q["candidates"][:EVAL_DEPTH]]
    out = np.zeros(len(flat), dtype=np.float32)
    with torch.no_grad():
        for start in range(0, len(flat), 64):
            chunk = flat[start : start + 64]
            batch = feeds(
                tokenizer, [questions[i]["q"] for i, _ in chunk], [c["text"] for _, c in chunk]
            )
            cosine = torch.tensor([c["cosine"] for _, c in chunk])
            tensors = [torch.from_numpy(batch[n]) for n in INPUTS]
            out[start : start + 64] = model(*tensors, cosine).numpy()
    model.train()
    rows: list[list[float]] = [[] for _ in questions]
    for (i, _), s in zip(flat, out, strict=True):
        rows[i].append(float(s))
    return rows


def platt(scores: list[list[float]], questions: list[dict[str, Any]]) -> tuple[float, float]:
    """P(answers) = sigmoid(scale * logit + shift), fitted by Newton's method on the pairs."""
    x = np.array([s for row in scores for s in row], dtype=np.float64)
    y = np.array(
        [float(c["label"] == 1) for q in questions for c in q["candidates"][:EVAL_DEPTH]],
        dtype=np.float64,
    )
    w = np.array([1.0, 0.0])
    design = np.stack([x, np.ones_like(x)], axis=1)
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-(design @ w)))
        gradient = design.T @ (p - y)
        hessian = design.T @ (design * (p * (1 - p))[:, None]) + 1e-6 * np.eye(2)
        w -= np.linalg.solve(hessian, gradient)
    return float(w[0]), float(w[1])


class _Graph(torch.nn.Module):
    def __init__(self, model: Verifier) -> None:
        super().__init__()
        self.model = model

    def forward(
        self, ids: torch.Tensor, mask: torch.Tensor, types: torch.Tensor, cosine: torch.Tensor
    ) -> torch.Tensor:
        return self.model(ids, mask, types, cosine)


def onnx_logits(
    graph: onnxruntime.InferenceSession, tokenizer: Tokenizer, pairs: list[tuple[str, str, float]]
) -> np.ndarray:
    """One pair per inference, as the service runs the dynamically quantised graph."""
    out = []
    for question, item, cosine in pairs:
        batch = feeds(tokenizer, [question], [item])
        batch["cosine"] = np.array([cosine], dtype=np.float32)
        out.append(graph.run(["logit"], batch)[0][0])
    return np.array(out, dtype=np.float32)


def export(
    model: Verifier, tokenizer: Tokenizer, out: Path, check: list[tuple[str, str, float]]
) -> dict[str, float]:
    model = model.eval()
    fp32_path, int8_path = out / "verifier.onnx", out / "verifier-int8.onnx"
    trace = feeds(tokenizer, [q for q, _, _ in check[:3]], [m for _, m, _ in check[:3]])
    with torch.no_grad():
        want = np.array(
            [
                model(
                    *(torch.from_numpy(feeds(tokenizer, [q], [m])[n]) for n in INPUTS),
                    torch.tensor([c]),
                ).item()
                for q, m, c in check
            ],
            dtype=np.float32,
        )
        torch.onnx.export(
            _Graph(model),
            (
                *(torch.from_numpy(trace[n]) for n in INPUTS),
                torch.tensor([c for _, _, c in check[:3]]),
            ),
            str(fp32_path),
            input_names=[*INPUTS, "cosine"],
            output_names=["logit"],
            dynamic_axes={
                **{n: {0: "batch", 1: "tokens"} for n in INPUTS},
                "cosine": {0: "batch"},
                "logit": {0: "batch"},
            },
            opset_version=17,
            dynamo=False,
        )
    fp32 = onnx_logits(session(fp32_path), tokenizer, check)
    fp32_diff = float(np.abs(fp32 - want).max())
    print(f"fp32 ONNX vs torch: max logit difference {fp32_diff:.5f}", flush=True)
    if fp32_diff > 1e-3:
        raise SystemExit("the exported graph does not match torch")
    quantize_dynamic(fp32_path, int8_path, weight_type=QuantType.QInt8, per_channel=True)
    int8 = onnx_logits(session(int8_path), tokenizer, check)
    diff = np.abs(int8 - fp32)
    print(
        f"int8 vs fp32, {len(check)} pairs one per inference: logit difference max "
        f"{diff.max():.3f}, mean {diff.mean():.3f}; {int8_path.stat().st_size / 1e6:.1f} MB",
        flush=True,
    )
    if diff.max() > INT8_MAX_DIFF:
        raise SystemExit(f"the int8 graph drifted from fp32 (max {diff.max():.3f})")
    return {
        "fp32_vs_torch_max_diff": fp32_diff,
        "int8_vs_fp32_max_diff": float(diff.max()),
        "int8_vs_fp32_mean_diff": float(diff.mean()),
        "int8_bytes": float(int8_path.stat().st_size),
        "check_pairs": float(len(check)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--pairs", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--layers", type=int, default=LAYERS)
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    parser.add_argument("--learning-rate", type=float, default=LEARNING_RATE)
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args()
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.set_num_threads(2)
    args.out.mkdir(parents=True, exist_ok=True)
    data = json.loads(args.pairs.read_text())
    train = [q for q in data["questions"] if q["split"] == "train"]
    validation = [q for q in data["questions"] if q["split"] == "validation"]
    locomo = [q for q in data["questions"] if q["split"] == "locomo_validation"]
    if {q["split"] for q in data["questions"]} - {"train", "validation", "locomo_validation"}:
        raise SystemExit("the pairs file holds a split other than train and validation")
    pairs = [
        (q["q"], c["text"], float(c["label"]), c["cosine"])
        for q in train
        for c in q["candidates"]
        if c["label"] >= 0  # -1: a stale memory of a newer-wins question, neither
    ]
    positives = sum(1 for p in pairs if p[2] > 0)
    weight = (len(pairs) - positives) / positives / 2  # positives: a third of the total
    print(f"{len(train)} train questions, {len(pairs)} pairs ({positives} answers)", flush=True)
    tokenizer = tokenizer_for(args.checkpoint / "tokenizer.json")
    model = Verifier(args.checkpoint, args.layers)
    head = [model.linear.weight, model.linear.bias, model.a, model.b]
    encoder = [p for n, p in model.named_parameters() if n.startswith("bert.")]
    optimiser = torch.optim.AdamW(
        [{"params": encoder, "lr": args.learning_rate}, {"params": head, "lr": HEAD_LEARNING_RATE}],
        weight_decay=0.01,
    )
    steps = args.epochs * math.ceil(len(pairs) / BATCH)
    warmup = max(1, int(0.06 * steps))
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimiser, lambda s: min(1.0, (s + 1) / warmup) * max(0.02, 1 - s / steps)
    )
    loss_fn = torch.nn.BCEWithLogitsLoss(reduction="none")
    cosine_rows = [[c["cosine"] for c in q["candidates"][:EVAL_DEPTH]] for q in validation]
    base = figures(validation, cosine_rows)
    show("cosine alone (validation)", base)
    history: list[dict[str, Any]] = []
    best: tuple[float, float] | None = None
    started = time.monotonic()
    for epoch in range(1, args.epochs + 1):
        random.shuffle(pairs)
        t0, total = time.monotonic(), 0.0
        for n, start in enumerate(range(0, len(pairs), BATCH), 1):
            chunk = pairs[start : start + BATCH]
            batch = feeds(tokenizer, [p[0] for p in chunk], [p[1] for p in chunk])
            labels = torch.tensor([p[2] for p in chunk])
            logits = model(
                *(torch.from_numpy(batch[k]) for k in INPUTS), torch.tensor([p[3] for p in chunk])
            )
            weights = torch.where(labels > 0, torch.tensor(weight), torch.tensor(1.0))
            loss = (loss_fn(logits, labels) * weights).mean()
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            scheduler.step()
            total += loss.item()
            if n % 100 == 0:
                print(
                    f"epoch {epoch} step {n}: loss {total / 100:.4f}, "
                    f"{time.monotonic() - t0:.0f} s",
                    flush=True,
                )
                total = 0.0
        scores = score(model, tokenizer, validation)
        f = figures(validation, scores)
        f["locomo_present5"] = (
            figures(locomo, score(model, tokenizer, locomo))["present5"] if locomo else float("nan")
        )
        f["seconds"] = time.monotonic() - t0
        show(f"epoch {epoch} (validation)", f)
        history.append({"epoch": epoch, **f})
        key = (f.get("auc", 0.0), f["first"])
        if best is None or key > best:
            best = key
            torch.save(model.state_dict(), args.out / "best.pt")
            kept = {"epoch": epoch, "platt": platt(scores, validation), **f}
    model.load_state_dict(torch.load(args.out / "best.pt"))
    check = [(q["q"], c["text"], c["cosine"]) for q in validation[:40] for c in q["candidates"][:5]]
    exported = export(model, tokenizer, args.out, check)
    report = {
        "seed": args.seed,
        "layers": args.layers,
        "epochs": args.epochs,
        "learning_rate": args.learning_rate,
        "batch": BATCH,
        "max_tokens": MAX_TOKENS,
        "train_pairs": len(pairs),
        "train_positives": positives,
        "train_seconds": round(time.monotonic() - started, 1),
        "cosine_alone": base,
        "history": history,
        "kept": kept,
        "export": exported,
        "versions": {"torch": torch.__version__, "onnxruntime": onnxruntime.__version__},
    }
    (args.out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"kept epoch {kept['epoch']}: platt {kept['platt']}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
