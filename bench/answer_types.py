"""What the question model's answer-type features cost per question, measured in one run.

`python -m bench.answer_types`: every question of the corpus's validation people against each
of its person's memories in turn as the best candidate (the two features read one text per
question: app/retrieval/abstention.py), `asked` + `carries` + `contradicts` as
`question_features` calls them. Prints the CPU time per question (this process's user +
system time), the share of the questions that ask a kind and of the (question, memory) pairs
where a feature fires, with the machine's load. A query's whole CPU is in bench.topics and
bench.compare; this is the part these features add to it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Annotated

import typer

from app.retrieval.answer_types import asked, carries, contradicts
from eval.datasets.curated import load_curated


def main(
    corpus: Annotated[Path, typer.Option(help="the corpus")] = Path("eval/corpus"),
    split: Annotated[str, typer.Option(help="whose questions")] = "validation",
    rounds: Annotated[int, typer.Option(min=1, help="passes over the pairs")] = 3,
) -> None:
    users = load_curated(corpus, split).users
    pairs = [(q.query, m.content) for u in users for q in u.questions for m in u.memories]
    questions = [q.query for u in users for q in u.questions]
    typer.echo(
        f"{len(questions)} questions of {len(users)} {split} people, {len(pairs)} (question, "
        f"memory) pairs; load {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs"
    )
    missing = conflicts = 0
    start = time.process_time()
    for _ in range(rounds):
        missing = conflicts = 0
        for query, text in pairs:
            kind = asked(query)
            missing += kind is not None and not carries(kind, text)
            conflicts += contradicts(query, text)
    spent = time.process_time() - start
    per = spent / (rounds * len(pairs))
    typer.echo(f"CPU per question (one best candidate): {per * 1e6:.1f} us")
    share = sum(asked(q) is not None for q in questions) / len(questions)
    typer.echo(f"questions that ask a kind: {share:.3f}")
    typer.echo(
        f"pairs where the memory lacks the kind asked: {missing / len(pairs):.3f}; "
        f"where it names another qualifier: {conflicts / len(pairs):.3f}"
    )


if __name__ == "__main__":
    typer.run(main)
