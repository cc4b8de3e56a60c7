"""The answer verifier's loader (app/adapters/verifier.py): a graph that is not built, or whose
files do not check out, is a clear LocalModelMissingError, never a half-loaded model."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from app.adapters import verifier as verifier_module
from app.adapters.embedder import LocalEmbedder
from app.adapters.verifier import GRAPH, VERIFIER_EMBEDDER, Verifier, verifier_for
from app.errors import LocalModelMissingError


def test_not_built_names_the_command(tmp_path: Path) -> None:
    with pytest.raises(LocalModelMissingError, match="make train-verifier"):
        Verifier(tmp_path)


def test_a_graph_that_is_not_the_manifests_is_refused(tmp_path: Path) -> None:
    (tmp_path / GRAPH).write_bytes(b"not the trained graph")
    manifest = {"files": {GRAPH: "0" * 64}, "platt": {"scale": 1.0, "shift": 0.0}}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(LocalModelMissingError, match="sha256"):
        Verifier(tmp_path)


def test_an_unreadable_manifest_is_refused(tmp_path: Path) -> None:
    (tmp_path / GRAPH).write_bytes(b"graph")
    (tmp_path / "manifest.json").write_text('{"files": {}}')
    with pytest.raises(LocalModelMissingError, match="unreadable"):
        Verifier(tmp_path)


def test_another_embedder_gets_no_verifier(caplog: pytest.LogCaptureFixture) -> None:
    assert verifier_for("all-MiniLM-L6-v2-int8") is None
    assert VERIFIER_EMBEDDER in caplog.text


async def test_the_service_does_not_start_with_verified_and_no_graph(
    make_client: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(verifier_module, "verifier_dir", lambda: tmp_path)
    verifier_for.cache_clear()
    try:
        with pytest.raises(LocalModelMissingError, match="make train-verifier"):
            async with make_client(
                retrieval_preset="verified", embedder=LocalEmbedder(model=VERIFIER_EMBEDDER)
            ):
                pass
    finally:
        verifier_for.cache_clear()
