"""Which local embedding models exist: the default MiniLM graphs and the optional ones a user
installs, each with its name and dimension. Plain data: the settings read it for their defaults
and checks, the adapters (app/adapters/embedder.py, local_models.py) to load the files; it
imports nothing of the project, so the settings need not import the adapters."""

from __future__ import annotations

from dataclasses import dataclass

# MiniLM with int8 arithmetic (app/adapters/quantized_model.py), one text per inference: the
# default before issue 45, built from the installed package. The default before that, the
# package's graph as it is (int8 weights, float32 arithmetic), stays selectable by name too;
# vectors of any two models differ, so a store moves from one to another with `pgrecall
# reembed`.
LOCAL_MODEL_ID = "all-MiniLM-L6-v2-onnx-dq8"
FLOAT_MODEL_ID = "all-MiniLM-L6-v2-onnx-int8"
# MiniLM fine-tuned here so that a question's cosine to a memory that answers it stands out
# (issue 45; `make train-embedder`, scripts/train_embedder.py): the same tokenizer, pooling and
# int8 recipe as the default, its graph committed in the package (app/adapters/models/, with a
# manifest of how it was made). Its vectors are not the other models', so a store moves to it
# with `pgrecall reembed`.
TRAINED_MODEL_ID = "pgrecall-minilm-answers-v5"
LOCAL_MODELS = (LOCAL_MODEL_ID, FLOAT_MODEL_ID, TRAINED_MODEL_ID)
# The service's default embedder (PGRECALL_EMBEDDING_MODEL unset): the MiniLM trained here
# since 2026-12-05. With the default preset it holds the golden set's gates and ranks the
# corpus's paraphrases and LoCoMo's held-out conversations better than the int8 MiniLM
# (docs/retrieval.md, "The trained MiniLM by default"). A store written by another model moves
# to it with `pgrecall reembed` (the service says so at start), or keeps its model by setting
# PGRECALL_EMBEDDING_MODEL=all-MiniLM-L6-v2-onnx-dq8.
DEFAULT_MODEL_ID = TRAINED_MODEL_ID
LOCAL_DIMENSION = 384


@dataclass(frozen=True)
class LocalModelSpec:
    """One installable model: where its files are and how to run it."""

    name: str  # PGRECALL_EMBEDDING_MODEL, and the stored rows' embedding_model
    directory: str  # under the models directory
    graph: str  # the ONNX file in it
    dimension: int
    max_tokens: int  # sentence-transformers' max_seq_length
    pad_id: int
    pad_token: str
    tokenizer_sha256: str
    # A dynamically quantised graph quantises activations with one scale per input tensor, so
    # a text's vector would depend on its batch neighbours: such graphs run one text at a time.
    one_text_per_inference: bool
    install: str  # the command that installs it


_MPNET = dict(
    directory="all-mpnet-base-v2",
    dimension=768,
    max_tokens=384,
    pad_id=1,
    pad_token="<pad>",
    tokenizer_sha256="b8be2c30ba5dd723a6d5ee26d013da103d5408d92ddcb23747622f9e48f1d842",
    install="make model-mpnet",
)
MPNET = LocalModelSpec(
    name="all-mpnet-base-v2", graph="model.onnx", one_text_per_inference=False, **_MPNET
)
MPNET_INT8 = LocalModelSpec(
    name="all-mpnet-base-v2-int8",
    graph="model-int8.onnx",
    one_text_per_inference=True,
    **_MPNET,
)
OPTIONAL_LOCAL_MODELS: dict[str, LocalModelSpec] = {m.name: m for m in (MPNET, MPNET_INT8)}
