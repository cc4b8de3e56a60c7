"""Pure figures of the curated development set (eval/curated_dev.json), per question shape.

Each question is asked twice: through the agent tool (what an agent gets, after the floor and
the cut) and through the plain ranking (/v1/memory/query, min_score 0, top 10). Beside them
stands the embedding model's own ordering (`cosine`: the question's cosine to each of the
user's memories, nothing else), the ceiling a paraphrase that shares no word with its answer
meets when only the embedder can find it. An `Answer` is
what one endpoint returned, as memory keys best first; the functions below turn answers into
the shares the issue's acceptance names (see GATE_METRICS) and a few diagnostics.

Conventions: a share over no questions is NaN (shown as such, and failing any gate on it), so
an empty or truncated run cannot pass by default.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = [
    "RANKING_DEPTH",
    "Answer",
    "Judged",
    "all_present",
    "by_cosine",
    "cosine_first",
    "figures",
    "first",
    "has_cosine",
    "newer_first",
    "present",
    "shape_rows",
    "threshold_sweep",
]

RANKING_DEPTH = 10  # the plain ranking is asked for its top 10


@dataclass(frozen=True)
class Answer:
    """One endpoint's answer: memory keys best first (None for an item that is none of the
    user's seeded memories), the relevance it reported for each, and any error it reported."""

    keys: tuple[str | None, ...]
    relevances: tuple[float, ...]
    error: str | None = None
    latency_ms: float = 0.0
    # The answer's `metadata.confidence` (the agent tool's; 0 where none was reported).
    confidence: float = 0.0
    # The keys the tool marked possibly outdated (a newer memory on the same topic).
    outdated: tuple[str | None, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.keys


@dataclass(frozen=True)
class Judged:
    """One question with both answers."""

    question_id: str
    user: str
    shape: str
    query: str
    answers: tuple[str, ...]
    stale: tuple[str, ...]
    tool: Answer
    ranking: Answer
    cosine: Answer | None = None  # the embedder's cosine alone (`by_cosine`); None: not run

    @property
    def answerable(self) -> bool:
        return bool(self.answers)


def by_cosine(
    question: npt.NDArray[np.float32],
    memories: npt.NDArray[np.float32],
    keys: Sequence[str],
    depth: int = RANKING_DEPTH,
) -> Answer:
    """The first `depth` of `keys` by the cosine of their unit vectors (`memories`, one row
    per key) to the question's unit vector, best first: the embedder's ranking alone."""
    cosines = memories @ question
    order = np.argsort(-cosines, kind="stable")[:depth]
    return Answer(tuple(keys[i] for i in order), tuple(float(cosines[i]) for i in order))


# --------------------------------------------------------------------------- one question


def present(keys: Sequence[str | None], answers: Sequence[str], depth: int | None = None) -> bool:
    """An answer key is among the (first `depth`) returned keys."""
    shown = keys if depth is None else keys[:depth]
    return any(a in shown for a in answers)


def all_present(keys: Sequence[str | None], answers: Sequence[str]) -> bool:
    """Every answer key was returned (False when there are none to find)."""
    return bool(answers) and all(a in keys for a in answers)


def first(keys: Sequence[str | None], answers: Sequence[str]) -> bool:
    """The first returned key is an answer."""
    return bool(keys) and keys[0] in answers


def newer_first(keys: Sequence[str | None], answer: str, stale: Sequence[str]) -> bool:
    """The newer memory was returned and ranks before every stale one that was returned."""
    if answer not in keys:
        return False
    position = keys.index(answer)
    return all(s not in keys or keys.index(s) > position for s in stale)


# --------------------------------------------------------------------------- aggregates


def _share(questions: Sequence[Judged], test: Callable[[Judged], bool]) -> float:
    if not questions:
        return math.nan
    return sum(1 for q in questions if test(q)) / len(questions)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def _of(judged: Sequence[Judged], *shapes: str) -> list[Judged]:
    return [q for q in judged if q.shape in shapes]


def _unanswerable(judged: Sequence[Judged]) -> list[Judged]:
    return [q for q in judged if not q.answerable]


def figures(judged: Sequence[Judged]) -> dict[str, float]:
    """The run's figures by name: tool path first, then the plain ranking (`ranking_`)."""
    paraphrase = _of(judged, "paraphrase")
    shared = _of(judged, "shared_word")
    answerable = [q for q in judged if q.answerable]
    unanswerable = _unanswerable(judged)
    traps_unanswerable = [q for q in _of(judged, "name_trap") if not q.answerable]
    traps_answerable = [q for q in _of(judged, "name_trap") if q.answerable]
    newer = _of(judged, "newer_wins")
    pairs = _of(judged, "two_memories")

    def tool_present(q: Judged) -> bool:
        return present(q.tool.keys, q.answers)

    def tool_first(q: Judged) -> bool:
        return first(q.tool.keys, q.answers)

    def ranking_present(q: Judged) -> bool:
        return present(q.ranking.keys, q.answers, RANKING_DEPTH)

    def ranking_first(q: Judged) -> bool:
        return first(q.ranking.keys, q.answers)

    def answered(q: Judged) -> bool:
        return not q.tool.empty

    return {
        "paraphrase_present": _share(paraphrase, tool_present),
        "paraphrase_first": _share(paraphrase, tool_first),
        "shared_word_present": _share(shared, tool_present),
        "shared_word_first": _share(shared, tool_first),
        "answerable_present": _share(answerable, tool_present),
        "answerable_first": _share(answerable, tool_first),
        "answerable_empty": _share(answerable, lambda q: q.tool.empty),
        "unanswerable_answered": _share(unanswerable, answered),
        "no_answer_answered": _share(_of(judged, "no_answer"), answered),
        "name_trap_answered": _share(traps_unanswerable, answered),
        "name_trap_first": _share(traps_answerable, tool_first),
        "newer_wins_newer_first": _share(
            newer, lambda q: newer_first(q.tool.keys, q.answers[0], q.stale)
        ),
        "two_memories_both_present": _share(pairs, lambda q: all_present(q.tool.keys, q.answers)),
        "answerable_returned_mean": _mean([float(len(q.tool.keys)) for q in answerable]),
        "unanswerable_returned_mean": _mean([float(len(q.tool.keys)) for q in unanswerable]),
        "ranking_paraphrase_present@10": _share(paraphrase, ranking_present),
        "ranking_paraphrase_first": _share(paraphrase, ranking_first),
        "ranking_answerable_present@10": _share(answerable, ranking_present),
        "ranking_answerable_first": _share(answerable, ranking_first),
        "ranking_newer_wins_newer_first": _share(
            newer, lambda q: newer_first(q.ranking.keys, q.answers[0], q.stale)
        ),
        # Of the memories the tool marked possibly outdated: those the set names stale for
        # the question (right), and the others (links the set does not know: false links at
        # most), per question asked.
        "outdated_marked_stale": _share(
            newer, lambda q: any(k in q.stale for k in q.tool.outdated)
        ),
        "false_links_per_question": _mean(
            [float(sum(1 for k in q.tool.outdated if k not in q.stale)) for q in judged]
        ),
        "confidence_auc": auc(
            [q.tool.confidence for q in answerable], [q.tool.confidence for q in unanswerable]
        ),
        **_cosine_figures(judged),
        "tool_errors": float(sum(1 for q in judged if q.tool.error is not None)),
        "ranking_errors": float(sum(1 for q in judged if q.ranking.error is not None)),
    }


def auc(positives: Sequence[float], negatives: Sequence[float]) -> float:
    """The probability that a positive scores above a negative (ties count half): how well a
    score such as the tool's confidence tells answerable questions from those with no answer."""
    if not positives or not negatives:
        return math.nan
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in positives for n in negatives)
    return wins / (len(positives) * len(negatives))


def has_cosine(judged: Sequence[Judged]) -> bool:
    """Whether the run has the embedder's ranking for every question (its figures need it)."""
    return bool(judged) and all(q.cosine is not None for q in judged)


def cosine_first(q: Judged) -> bool:
    """The embedder's ranking alone puts an answer first."""
    return q.cosine is not None and first(q.cosine.keys, q.answers)


def _cosine_figures(judged: Sequence[Judged]) -> dict[str, float]:
    """The embedder's ceiling (`cosine_`), when the run computed it for every question."""
    if not has_cosine(judged):
        return {}
    answerable = [q for q in judged if q.answerable]
    return {
        "cosine_paraphrase_first": _share(_of(judged, "paraphrase"), cosine_first),
        "cosine_answerable_first": _share(answerable, cosine_first),
    }


# Per-shape table columns: (heading, what it measures on one question, who it applies to).
_ANSWERABLE_COLUMNS: tuple[tuple[str, Callable[[Judged], bool]], ...] = (
    ("tool present", lambda q: present(q.tool.keys, q.answers)),
    ("tool first", lambda q: first(q.tool.keys, q.answers)),
    ("tool empty", lambda q: q.tool.empty),
    ("rank present@10", lambda q: present(q.ranking.keys, q.answers, RANKING_DEPTH)),
    ("rank first", lambda q: first(q.ranking.keys, q.answers)),
)


def shape_rows(
    judged: Sequence[Judged], shapes: Sequence[str]
) -> list[tuple[str, dict[str, float]]]:
    """One row per shape (answerable and unanswerable name traps apart): count, the answerable
    columns (NaN for unanswerable rows; "cosine first" when the run has the embedder's ranking),
    the share the tool answered, mean items returned."""
    with_cosine = has_cosine(judged)
    groups: list[tuple[str, list[Judged]]] = []
    for shape in shapes:
        members = _of(judged, shape)
        if shape == "name_trap":
            groups.append(("name_trap (answer)", [q for q in members if q.answerable]))
            groups.append(("name_trap (none)", [q for q in members if not q.answerable]))
        else:
            groups.append((shape, members))
    rows = []
    for name, members in groups:
        answerable = [q for q in members if q.answerable]
        row: dict[str, float] = {"questions": float(len(members))}
        for heading, test in _ANSWERABLE_COLUMNS:
            row[heading] = _share(answerable, test)
        if with_cosine:
            row["cosine first"] = _share(answerable, cosine_first)
        row["tool answered"] = _share(members, lambda q: not q.tool.empty)
        row["returned"] = _mean([float(len(q.tool.keys)) for q in members])
        rows.append((name, row))
    return rows


def threshold_sweep(
    judged: Sequence[Judged], thresholds: Sequence[float], *, tool: bool = False
) -> list[tuple[float, float, float]]:
    """(threshold, answerable present, unanswerable answered) if items under `threshold` of
    their own reported relevance were dropped: presence and abstention pull against each other.

    On the plain ranking (default) this reads the whole top 10; on the tool it adds a floor on
    top of the tool's own (so only thresholds above that floor change anything)."""
    answerable = [q for q in judged if q.answerable]
    unanswerable = _unanswerable(judged)
    out = []
    for t in thresholds:

        def kept(q: Judged, t: float = t) -> list[str | None]:
            answer = q.tool if tool else q.ranking
            return [k for k, r in zip(answer.keys, answer.relevances, strict=True) if r >= t]

        out.append(
            (
                t,
                _share(answerable, lambda q, kept=kept: present(kept(q), q.answers)),
                _share(unanswerable, lambda q, kept=kept: bool(kept(q))),
            )
        )
    return out
