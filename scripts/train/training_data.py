"""Training and validation data for the embedder fine-tune (scripts/train/finetune.py).

Pure Python over the project's own loaders (eval/datasets/curated.py, eval/datasets/locomo.py:
stdlib only, so they import in the throwaway training venv with the repository root on
sys.path). Everything the training sees is a `Group` (one person's memories, or one LoCoMo
conversation's turns) and its `Query`s, each naming the items that answer it by index.

Splits:
- curated corpus (eval/corpus/personas-*.json): a person's `split` field. "train" people are
  trained on, "validation" people choose epochs and hyper-parameters, "test" people are dropped
  as soon as the file is parsed: nothing here ever looks at them again.
- the development set (eval/curated_dev.json, no split field): DEV_VALIDATION's two people
  validate, the other four train (`--dev` runs only: a model trained on it is not shipped).
- LoCoMo (the development half): LOCOMO_HELD_OUT's conversations are never trained on (the
  lead measures on them); their questions give the validation's Recall@5 over turns. The
  questions of categories 1-4 with gold evidence give (question, evidence turn) positives.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from eval.datasets.curated import CuratedUser, load_curated, some_people
from eval.datasets.locomo import load_locomo

# LoCoMo conversations kept out of training: held out for the lead's honest measurement and
# for this script's validation Recall@5 (231 questions over 788 turns).
LOCOMO_HELD_OUT = ("conv-26", "conv-30")
# The development set's validation people (`--dev` only).
DEV_VALIDATION = ("cur-salon", "cur-pilot")
UNANSWERABLE_SHAPES = frozenset({"no_answer", "name_trap"})


@dataclass(frozen=True)
class Query:
    text: str
    shape: str  # a curated shape, or "locomo-<category>"
    answers: tuple[int, ...]  # indices into the group's items; () when nothing answers
    ignore: tuple[int, ...] = ()  # neither answer nor negative (a newer_wins "stale" memory)


@dataclass(frozen=True)
class Group:
    source: str  # "curated" or "locomo"
    id: str
    items: tuple[str, ...]
    queries: tuple[Query, ...]


@dataclass(frozen=True)
class Data:
    train: tuple[Group, ...]
    validation: tuple[Group, ...]  # curated validation people
    locomo_validation: tuple[Group, ...]  # the held-out conversations

    def summary(self) -> str:
        def count(groups: Iterable[Group]) -> tuple[int, int, int]:
            gs = list(groups)
            return len(gs), sum(len(g.items) for g in gs), sum(len(g.queries) for g in gs)

        parts = []
        for name, groups in (
            ("train curated", [g for g in self.train if g.source == "curated"]),
            ("train locomo", [g for g in self.train if g.source == "locomo"]),
            ("validation curated", self.validation),
            ("validation locomo", self.locomo_validation),
        ):
            n, items, queries = count(groups)
            parts.append(f"{name}: {n} groups, {items} items, {queries} questions")
        return "; ".join(parts)


def _curated_group(user: CuratedUser) -> Group:
    keys = [m.key for m in user.memories]
    index = {k: i for i, k in enumerate(keys)}
    queries = tuple(
        Query(
            text=q.query,
            shape=q.shape,
            answers=tuple(index[k] for k in q.answers),
            ignore=tuple(index[k] for k in q.stale),
        )
        for q in user.questions
    )
    return Group(
        source="curated",
        id=user.id,
        items=tuple(m.content for m in user.memories),
        queries=queries,
    )


def curated_groups(paths: Sequence[Path], dev: bool) -> tuple[list[Group], list[Group]]:
    """(train, validation) people of the curated files; test and calibration people are never
    returned."""
    train: list[Group] = []
    validation: list[Group] = []
    for path in paths:
        for user in load_curated(path).users:
            split = user.split
            if dev:
                if split:
                    raise ValueError(f"{path}: --dev expects a file without splits")
                split = "validation" if user.id in DEV_VALIDATION else "train"
            if split == "train":
                train.append(_curated_group(user))
            elif split == "validation":
                validation.append(_curated_group(user))
            elif split not in ("test", "calibration"):
                raise ValueError(f"{path}: user {user.id} has no split")
            # "test": dropped unread; "calibration": kept from the embedder for the question
            # model (eval/fit_question.py), whose data must be as new to it as a user's
    return train, validation


def locomo_groups(path: Path) -> tuple[list[Group], list[Group]]:
    """(training, held-out) conversations: every turn an item, every question with evidence a
    query whose answers are its evidence turns."""
    train: list[Group] = []
    held_out: list[Group] = []
    conversations = load_locomo(path)
    found = {c.sample_id for c in conversations}
    missing = set(LOCOMO_HELD_OUT) - found
    if missing:
        raise ValueError(f"{path}: no conversation {sorted(missing)} to hold out")
    for conversation in conversations:
        index = {t.dia_id: i for i, t in enumerate(conversation.turns)}
        group = Group(
            source="locomo",
            id=conversation.sample_id,
            items=tuple(t.content for t in conversation.turns),
            queries=tuple(
                Query(
                    text=q.question,
                    shape=f"locomo-{q.category}",
                    answers=tuple(index[e] for e in q.evidence),
                )
                for q in conversation.questions
                if q.evidence
            ),
        )
        (held_out if conversation.sample_id in LOCOMO_HELD_OUT else train).append(group)
    return train, held_out


def load_data(
    corpus: Sequence[Path], locomo: Path | None, dev: bool, train_people: int | None = None
) -> Data:
    train, validation = curated_groups(corpus, dev)
    if train_people is not None:
        kept = some_people([g.id for g in train], train_people)
        train = [g for g in train if g.id in kept]
    if not train or not validation:
        raise ValueError("the curated files give no train or no validation people")
    locomo_train: list[Group] = []
    locomo_validation: list[Group] = []
    if locomo is not None:
        locomo_train, locomo_validation = locomo_groups(locomo)
    return Data(
        train=tuple(train + locomo_train),
        validation=tuple(validation),
        locomo_validation=tuple(locomo_validation),
    )
