"""The near-duplicate threshold save_memory supersedes at (python -m eval.near_duplicates).

A save whose nearest valid memory has cosine >= the threshold supersedes it. Above the threshold
must be only restatements of the same memory (a typo, punctuation, a reworded same fact), never
a second fact that is also true: superseding that would hide it. The labelled pairs below cover
both, plus same-slot updates ("lives in Berlin" -> "lives in Lisbon"), which we would like to
catch but must not at the price of a true fact. Prints each group's cosine range and, per
candidate threshold, how many pairs of each group it would supersede. Local MiniLM, offline.
"""

from __future__ import annotations

import numpy as np

from app.adapters.embedder import LocalEmbedder

RESTATEMENTS = [
    ("My favourite colour is teal", "My favourite colour is teal."),
    ("Takes coffee black with no sugar", "Takes his coffee black, no sugar"),
    ("Is allergic to penicillin", "The user is allergic to penicillin"),
    ("Works as a nurse in Leeds", "Works as a nurse in leeds"),
    ("Prefers dark mode in every editor", "Prefers dark mode in all editors"),
    ("Has a daughter called Ines who is nine", "Has a nine-year-old daughter called Ines"),
    ("Drives a dark blue Volvo V60", "Drives a dark-blue Volvo V60"),
    ("Plays five-a-side football on Thursday evenings", "Plays 5-a-side football on Thursdays"),
    ("Decided to repaint the hallway sage green", "Decided to paint the hallway sage green"),
    ("Keeps a sourdough starter called Doughlores", "Has a sourdough starter named Doughlores"),
]
UPDATES = [  # the same slot, a new value: ideally superseded, but only explicitly is safe
    ("The user lives in Berlin", "The user moved to Lisbon"),
    ("My favourite colour is teal", "My favourite colour is green"),
    ("Works as a nurse in Leeds", "Works as a nurse in York now"),
    ("Drives a dark blue Volvo V60", "Drives a red Toyota Corolla"),
    ("Is 34 years old", "Is 35 years old"),
    ("Prefers flying with Ryanair", "Prefers flying with KLM"),
    ("Has a cat named Miso", "Has a cat named Tofu"),
    ("The project deadline is the 3rd of March", "The project deadline moved to the 10th of March"),
]
DISTINCT_TRUE = [  # both can hold at once: superseding would lose a fact
    ("Is allergic to penicillin", "Is allergic to peanuts"),
    ("Has a son called Milo", "Has a daughter called Ruby"),
    ("Speaks Portuguese", "Speaks Spanish"),
    ("Likes jazz", "Likes classical music"),
    ("Has a cat named Miso", "Has a dog named Rex"),
    ("Prefers tea in the morning", "Prefers coffee in the afternoon"),
    ("Visited Tokyo in 2024", "Visited Kyoto in 2024"),
    ("Owns a red bicycle", "Owns a blue bicycle"),
    ("Plays tennis on Mondays", "Plays squash on Mondays"),
    ("Reading list includes Blindness by Saramago", "Reading list includes Dune"),
]
THRESHOLDS = (0.80, 0.85, 0.88, 0.90, 0.92, 0.95)


def cosines(embedder: LocalEmbedder, pairs: list[tuple[str, str]]) -> np.ndarray:
    left = embedder.embed_sync([a for a, _ in pairs])
    right = embedder.embed_sync([b for _, b in pairs])
    return np.sum(np.asarray(left) * np.asarray(right), axis=1)  # unit vectors


def main() -> None:
    embedder = LocalEmbedder()
    groups = {
        "restatement": cosines(embedder, RESTATEMENTS),
        "update": cosines(embedder, UPDATES),
        "distinct": cosines(embedder, DISTINCT_TRUE),
    }
    for name, values in groups.items():
        print(
            f"{name:<12} n={len(values):>2}  min {values.min():.3f}  "
            f"median {np.median(values):.3f}  max {values.max():.3f}"
        )
    print("threshold  restatements caught  updates caught  distinct facts lost")
    for t in THRESHOLDS:
        caught = {k: int((v >= t).sum()) for k, v in groups.items()}
        print(
            f"{t:>9.2f}  {caught['restatement']:>10}/{len(RESTATEMENTS)}"
            f"  {caught['update']:>11}/{len(UPDATES)}"
            f"  {caught['distinct']:>15}/{len(DISTINCT_TRUE)}"
        )


if __name__ == "__main__":
    main()
