"""The newer-wins pair model's data and fit (eval.fit_revision): a synthetic ranking CSV, a
fake embedder (pure: no model is read), and synthetic pairs whose truth is known."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from app.retrieval.revision import REVISION_FEATURES
from eval.datasets.curated import CuratedMemory, CuratedQuestion, CuratedUser
from eval.fit_revision import Pair, fit, pairs


class FakeEmbedder:
    """Unit vectors by the text's first word: memories about one thing share one."""

    def embed_sync(self, texts: list[str]) -> list[np.ndarray]:
        out = []
        for text in texts:
            v = np.zeros(4, dtype=np.float32)
            v[{"School": 0, "Apprenticeship": 0, "Rugby": 2}.get(text.split()[0], 3)] = 1.0
            out.append(v)
        return out


def memory(key: str, content: str, age: int, kind: str = "note") -> CuratedMemory:
    return CuratedMemory(key=key, content=content, type=kind, importance=0.5, age_days=age)


USER = CuratedUser(
    id="cp-test",
    persona="a test person",
    memories=(
        memory("m01", "School: Tama wants to study architecture.", 300),
        memory("m02", "Apprenticeship: School is done, Tama starts as an electrician.", 30),
        memory("m03", "Rugby on Saturdays.", 10),
    ),
    questions=(
        CuratedQuestion("q1", "What will Tama do after school?", "newer_wins", ("m02",), ("m01",)),
        CuratedQuestion("q2", "What does Tama want to study?", "paraphrase", ("m01",)),
    ),
)


def write_run(path: Path) -> Path:
    rows = [  # the older ranked above the newer in both questions
        {
            "user": "cp-test",
            "answers": "m02",
            "stale": "m01",
            "ranking_keys": "m01:0.400 m02:0.300",
        },
        {"user": "cp-test", "answers": "m01", "stale": "", "ranking_keys": "m01:0.500 m03:0.200"},
    ]
    out = path / "curated_questions.csv"
    with out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return out


def test_pairs_label_a_stale_memory_above_its_newer_answer_and_an_answer_above_a_newer_miss(
    tmp_path: Path,
) -> None:
    found = pairs(write_run(tmp_path), {"cp-test": USER}, FakeEmbedder())  # type: ignore[arg-type]
    assert [p.label for p in found] == [1, 0]
    lift, keep = (dict(zip(REVISION_FEATURES, p.x, strict=True)) for p in found)
    assert lift["cosine"] == 1.0 and keep["cosine"] == 0.0
    assert lift["older_relevance"] == 0.4 and lift["newer_relevance"] == 0.3
    assert lift["same_type"] == 1.0 and lift["both_decisions"] == 0.0
    assert found[0].tie is False  # 0.3 is under tie_ratio x 0.4: today's near tie misses it


def test_the_fit_learns_that_close_pairs_are_revisions() -> None:
    rng = np.random.default_rng(45)
    examples = []
    for n in range(600):
        cosine = float(rng.uniform(0, 1))
        label = int(rng.random() < 1 / (1 + np.exp(-(12 * cosine - 7))))
        x = [cosine, float(rng.normal()), 0.0, 1.0, 0.3, 0.4]
        examples.append(Pair(f"p{n % 20}", label, x, tie=False, decision=False))
    model = fit(examples)
    assert model.weights[0] > 6.0
    assert model.probability([0.9, 0.0, 0.0, 1.0, 0.3, 0.4]) > 0.9
    assert model.probability([0.2, 0.0, 0.0, 1.0, 0.3, 0.4]) < 0.1
