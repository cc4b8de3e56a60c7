"""CPU per query embedding: the int8 MiniLM against the trained one (the default), in one process.

Run by the project's interpreter (it loads both through app.adapters.embedder.LocalEmbedder,
one intra-op thread each, as the service does by default). The same short questions are embedded
one by one by each model in alternating bursts (the order flips every round), after a warm-up,
and `time.process_time()` is summed per model: the machine's speed drifts while other work runs,
and alternation spreads the drift over both.

    python scripts/train/query_cpu.py [--questions 500] [--rounds 10]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from app.adapters.embedder import LOCAL_MODEL_ID, TRAINED_MODEL_ID, LocalEmbedder  # noqa: E402
from eval.datasets.curated import load_curated  # noqa: E402
from eval.datasets.locomo import load_locomo  # noqa: E402

LOCOMO = REPO.parent / "shared" / "datasets" / "locomo" / "locomo-dev.json"


def questions(count: int) -> list[str]:
    """Short questions: the development set's, then LoCoMo's (no corpus test person)."""
    texts = [q.query for _, q in load_curated().questions()]
    if LOCOMO.is_file():
        texts += [q.question for c in load_locomo(LOCOMO) for q in c.questions]
    return (texts * (count // max(len(texts), 1) + 1))[:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    texts = questions(args.questions)
    models = {
        name: LocalEmbedder(threads=1, model=name) for name in (LOCAL_MODEL_ID, TRAINED_MODEL_ID)
    }
    for embedder in models.values():  # warm-up
        for text in texts[:50]:
            embedder.embed_sync([text])
    spent = dict.fromkeys(models, 0.0)
    size = -(-len(texts) // args.rounds)
    for round_ in range(args.rounds):
        burst = texts[round_ * size : (round_ + 1) * size]
        order = list(models) if round_ % 2 == 0 else list(reversed(models))
        for name in order:
            started = time.process_time()
            for text in burst:
                models[name].embed_sync([text])
            spent[name] += time.process_time() - started
    for name, seconds in spent.items():
        print(f"{name}: {1000 * seconds / len(texts):.3f} ms CPU per query ({len(texts)} queries)")
    ratio = spent[TRAINED_MODEL_ID] / spent[LOCAL_MODEL_ID]
    print(f"ratio {TRAINED_MODEL_ID} / {LOCAL_MODEL_ID}: {ratio:.3f}")


if __name__ == "__main__":
    main()
