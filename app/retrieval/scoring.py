"""Calibration of raw arm scores into a relevance in [0, 1], and the final ranking."""

from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, TypeVar

from app.retrieval.dates import TimeWindow
from app.retrieval.fusion import convex, max_scaled, min_max, rrf, z_scored
from app.retrieval.presets import RetrievalPreset
from app.retrieval.relevance import (
    RelevanceModel,
    blend,
    features,
    load_model,
    odds,
    probability_of,
    recency,
)

K = TypeVar("K", bound=Hashable)


def clamp01(value: float) -> float:
    return 0.0 if value < 0.0 else 1.0 if value > 1.0 else value


def vector_relevance(cosine: float, floor: float, ceiling: float) -> float:
    """Linear map of cosine similarity: floor -> 0, ceiling -> 1."""
    return clamp01((cosine - floor) / max(ceiling - floor, 1e-9))


def keyword_relevance(bm25: float, max_bm25: float, saturation: float) -> float:
    """BM25 as a share of the best score the query could reach, saturating at `saturation`."""
    if max_bm25 <= 0.0 or bm25 <= 0.0:
        return 0.0
    return clamp01(bm25 / (max_bm25 * saturation))


def combine_relevance(keyword: float, semantic: float, wk: float, wv: float) -> float:
    """Weighted noisy-OR: either signal alone can make an item relevant, both make it more so.

    1 - (1 - kw)^(wk/w_max) * (1 - sem)^(wv/w_max); with equal weights the plain noisy-OR.
    """
    top = max(wk, wv)
    if top <= 0.0:
        return 0.0
    miss = (1.0 - keyword) ** (wk / top) * (1.0 - semantic) ** (wv / top)
    return clamp01(1.0 - miss)


@dataclass(frozen=True)
class Ranked(Generic[K]):
    key: K
    fused: float  # the fusion score that orders results
    relevance: float  # calibrated, comparable with min_score
    keyword: float  # calibrated keyword relevance
    semantic: float  # calibrated semantic relevance


def rank(
    keyword_scores: Mapping[K, float],
    max_bm25: float,
    cosines: Mapping[K, float],
    preset: RetrievalPreset,
    expansion: Mapping[K, float] | None = None,
    plain: Mapping[K, float] | None = None,
    model: RelevanceModel | None = None,
    has_names: bool = False,
    memories: Collection[K] = (),
) -> list[Ranked[K]]:
    """Fuse the two arms and calibrate; items with no signal at all are dropped.

    fusion "learned": the relevance model's probability is the relevance, and its odds the
    ranking score (the later stages multiply odds; `finalise` turns them back into the
    relevance the caller sees, so order and reported relevance agree). `plain` is the BM25 over
    the question's non-name lexemes; `has_names`: the question names someone; `memories`: the
    keys that are curated memories (the model weighs their evidence by its own vector).

    `expansion` (pseudo-relevance feedback BM25) adds `preset.prf_weight` of its score to the
    keyword arm's ranking score; the calibrated relevance stays the query's own.

    An item is kept only if it matched a keyword or its cosine is above the floor: an unrelated
    query returns nothing instead of the least-bad nearest neighbours.
    """
    kw_rel = {
        k: keyword_relevance(v, max_bm25, preset.keyword_saturation)
        for k, v in keyword_scores.items()
    }
    vec_rel = {
        k: vector_relevance(v, preset.vector_floor, preset.vector_ceiling)
        for k, v in cosines.items()
    }
    if preset.fusion == "learned":
        return _learned(
            keyword_scores,
            max_bm25,
            cosines,
            preset,
            kw_rel,
            vec_rel,
            plain or {},
            model or load_model(),
            has_names,
            memories,
        )
    wk = preset.keyword_weight if preset.use_keyword else 0.0
    wv = preset.vector_weight if preset.use_vector else 0.0
    total = (wk + wv) or 1.0
    keys = [
        k
        for k in {**keyword_scores, **cosines}
        if kw_rel.get(k, 0.0) > 0 or vec_rel.get(k, 0.0) > 0
    ]
    if expansion:
        keyword_scores = {
            k: keyword_scores.get(k, 0.0) + preset.prf_weight * expansion.get(k, 0.0)
            for k in {**keyword_scores, **expansion}
        }
    if preset.fusion == "rrf":
        by_kw = sorted((k for k in keys if k in keyword_scores), key=lambda k: -keyword_scores[k])
        by_vec = sorted((k for k in keys if k in cosines), key=lambda k: -cosines[k])
        fused = dict(rrf([by_kw, by_vec], [wk, wv], k=preset.rrf_k))
    else:
        scale = {"minmax": min_max, "max": max_scaled, "zscore": z_scored}[preset.normalisation]
        kw_norm = scale({k: keyword_scores[k] for k in keys if k in keyword_scores})
        vec_norm = scale({k: cosines[k] for k in keys if k in cosines})
        fused = dict(convex([kw_norm, vec_norm], [wk / total, wv / total]))

    results = [
        Ranked(
            key=k,
            fused=fused.get(k, 0.0)
            + preset.relevance_weight
            * combine_relevance(kw_rel.get(k, 0.0), vec_rel.get(k, 0.0), wk, wv),
            relevance=combine_relevance(kw_rel.get(k, 0.0), vec_rel.get(k, 0.0), wk, wv),
            keyword=kw_rel.get(k, 0.0),
            semantic=vec_rel.get(k, 0.0),
        )
        for k in keys
    ]
    results = [r for r in results if r.relevance > 0.0]
    results.sort(key=lambda r: (-r.fused, -r.relevance))
    return results


def _learned(
    keyword_scores: Mapping[K, float],
    max_bm25: float,
    cosines: Mapping[K, float],
    preset: RetrievalPreset,
    kw_rel: Mapping[K, float],
    vec_rel: Mapping[K, float],
    plain: Mapping[K, float],
    model: RelevanceModel,
    has_names: bool,
    memories: Collection[K] = (),
) -> list[Ranked[K]]:
    """The candidates with evidence of their own, scored by the relevance model (see `rank`).

    Evidence: a keyword match on a word that is not a name (in an item whose cosine is over
    `keyword_cosine_floor`), or a cosine above the preset's `vector_floor`. The model orders
    candidates relative to each other and was fitted on stores where every question is about
    the user; the floor is what keeps a store of unrelated items from answering a question
    about nothing in it (as in the convex preset).
    """
    # An item the vector arm did not return has a cosine at most the lowest it returned; with
    # no vector arm (keyword-only search) the cosine says nothing.
    lowest = min(cosines.values(), default=None)
    evidenced = []
    name_floor = preset.vector_floor + preset.name_cosine_margin
    for k in {**keyword_scores, **cosines}:
        bm25 = keyword_scores.get(k, 0.0)
        if vec_rel.get(k, 0.0) <= 0.0:
            if plain.get(k, bm25) <= 0.0:
                continue
            cosine = cosines.get(k, lowest)
            if cosine is not None and cosine <= preset.keyword_cosine_floor:
                continue
        elif bm25 > 0.0 and plain.get(k, bm25) <= 0.0 and cosines.get(k, 0.0) <= name_floor:
            continue  # matched by a name alone, and its cosine no further than the name's share
        evidenced.append(k)
    # the features of the candidates with evidence alone (most of the vector arm's are not)
    x = features(
        keyword_scores, plain, max_bm25, cosines, has_names, model.neutral_cosine_z, evidenced
    )
    results = []
    for k, row in x.items():
        p = model.probability(row, k in memories)
        results.append(
            Ranked(
                key=k,
                fused=odds(p),
                relevance=model.relevance(p),
                keyword=kw_rel.get(k, 0.0),
                semantic=vec_rel.get(k, 0.0),
            )
        )
    results.sort(key=lambda r: (-r.fused, -r.relevance))
    return results


def finalise(
    ranked: list[Ranked[K]],
    preset: RetrievalPreset,
    ages_days: Mapping[K, float],
    recency_weight: float,
    model: RelevanceModel | None = None,
) -> list[Ranked[K]]:
    """The last step of the ranking: what the caller sees, in the order it sees it.

    Learned fusion: relevance becomes the probability of the final odds (after the stages) on
    the model's reporting scale (`RelevanceModel.relevance`, relative to the question's best
    probability by `preset.relative_exponent`), so the items come in the order of the
    relevance they report. Then the recency blend (issue 28):
    score = (1 - w) * relevance + w * exp(-age_days / half_life), the reported relevance and
    the order both (w = 0: unchanged). An item without an age keeps its relevance x (1 - w).
    """
    learned = preset.fusion == "learned"
    if not learned and recency_weight <= 0.0:
        return ranked
    scale = (model or load_model()).relevance if learned else None
    if learned and preset.recency_odds > 0.0:
        ranked = newer_wins_ties(
            ranked, ages_days, preset.recency_odds, preset.recency_half_life_days
        )
    best = max((probability_of(r.fused) for r in ranked), default=0.0) if learned else 0.0
    out = []
    for r in ranked:
        # Only an item with evidence of its own stands relative to the best: a turn ranked for
        # following a matching turn ("Thanks, noted.") keeps the model's own scale.
        own = r.keyword > 0.0 or r.semantic > 0.0
        relevance = (
            scale(probability_of(r.fused), best, preset.relative_exponent if own else 0.0)
            if scale
            else r.relevance
        )
        age = ages_days.get(r.key)
        if recency_weight > 0.0:
            half_life = preset.recency_half_life_days
            relevance = (
                blend(relevance, age, recency_weight, half_life)
                if age is not None
                else (1.0 - recency_weight) * relevance
            )
        # today's fusion orders by its fused score: the blend moves that the same way
        fused = (
            relevance
            if learned
            else blend(r.fused, age or 0.0, recency_weight, preset.recency_half_life_days)
        )
        out.append(Ranked(r.key, fused, relevance, r.keyword, r.semantic))
    out.sort(key=lambda r: (-r.fused, -r.relevance))
    return out


def newer_wins_ties(
    ranked: list[Ranked[K]], ages_days: Mapping[K, float], strength: float, half_life: float
) -> list[Ranked[K]]:
    """Odds (learned fusion's fused score) x (1 + strength x recency) / (1 + strength x the
    newest candidate's recency), recency = exp(-age / half_life): of two items the model finds
    about as likely, the newer comes first (a decision replaced without a `supersedes` link),
    while the newest candidate keeps its odds. Items without an age count as the oldest."""
    if strength <= 0.0 or not ranked:
        return ranked
    fresh = {k: recency(a, half_life) for k, a in ages_days.items()}
    top = max((fresh.get(r.key, 0.0) for r in ranked), default=0.0)
    norm = 1.0 + strength * top
    out = [
        Ranked(
            r.key,
            r.fused * (1.0 + strength * fresh.get(r.key, 0.0)) / norm,
            r.relevance,
            r.keyword,
            r.semantic,
        )
        for r in ranked
    ]
    out.sort(key=lambda r: (-r.fused, -r.relevance))
    return out


def apply_thresholds(
    ranked: list[Ranked[K]], min_score: float, relative_cutoff: float, exempt_ranks: int = 0
) -> list[Ranked[K]]:
    """Keep items at or above min_score and within `relative_cutoff` of the best relevance.

    The first `exempt_ranks` places of the ranking are exempt from the relative cut (never
    from min_score): the ranking put them there on evidence the calibrated relevance does not
    carry (dialogue neighbours, fusion), so cutting them drops answers the ranking had found.
    min_score = 0 asks for the plain ranking: no absolute and no relative filter.
    """
    if min_score <= 0.0:
        return list(ranked)
    exempt = {id(r) for r in ranked[:exempt_ranks]}
    kept = [r for r in ranked if r.relevance >= min_score]
    if relative_cutoff > 0.0 and kept:
        best = max(r.relevance for r in kept)
        kept = [r for r in kept if r.relevance >= relative_cutoff * best or id(r) in exempt]
    return kept


def propagate(
    ranked: list[Ranked[K]],
    neighbours: Mapping[K, tuple[K | None, K | None]],
    *,
    next_weight: float,
    previous_weight: float,
) -> list[Ranked[K]]:
    """Let ranked turns pass a share of their score to the turns around them.

    `neighbours[key] = (previous, next)` for the seed turns. A neighbour's fused score becomes
    the larger of its own and the inherited share (never a sum, so nothing rises above the turn
    that matched and a turn matched twice is not counted twice). Only the ranking moves: the
    relevance a filtered query compares with min_score stays the turn's own, so a follow-up
    like "What should we cook tonight?" is never returned for matching nothing itself.
    """
    if not neighbours or (next_weight <= 0.0 and previous_weight <= 0.0):
        return ranked
    by_key = {r.key: r for r in ranked}
    inherited: dict[K, Ranked[K]] = {}
    for seed in ranked:
        pair = neighbours.get(seed.key)
        if pair is None:
            continue
        for neighbour, weight in ((pair[0], previous_weight), (pair[1], next_weight)):
            if neighbour is None or weight <= 0.0:
                continue
            candidate = Ranked(
                key=neighbour, fused=weight * seed.fused, relevance=0.0, keyword=0.0, semantic=0.0
            )
            best = inherited.get(neighbour)
            if best is None or candidate.fused > best.fused:
                inherited[neighbour] = candidate
    merged: list[Ranked[K]] = []
    for key in {**by_key, **inherited}:
        own, got = by_key.get(key), inherited.get(key)
        if own is None:
            merged.append(got)  # type: ignore[arg-type]
        elif got is None:
            merged.append(own)
        else:
            merged.append(
                Ranked(key, max(own.fused, got.fused), own.relevance, own.keyword, own.semantic)
            )
    merged.sort(key=lambda r: (-r.fused, -r.relevance))
    return merged


def answers_inherit(
    ranked: list[Ranked[K]], answers: Mapping[K, K], share: float
) -> list[Ranked[K]]:
    """An answer is relevant when its question is: `answers[question] = answer`, and the
    answer's relevance becomes at least `share` x the question's (its keyword and semantic
    parts stay its own). Only relevance moves, not the order: what thresholds compare."""
    if share <= 0.0 or not answers:
        return ranked
    by_key = {r.key: r for r in ranked}
    lifted: dict[K, float] = {}
    for question, answer in answers.items():
        asked = by_key.get(question)
        if asked is not None and answer in by_key:
            lifted[answer] = max(lifted.get(answer, 0.0), share * asked.relevance)
    return [
        Ranked(r.key, r.fused, max(r.relevance, lifted[r.key]), r.keyword, r.semantic)
        if r.key in lifted
        else r
        for r in ranked
    ]


def prefer_window(
    ranked: list[Ranked[K]],
    times: Mapping[K, datetime],
    window: TimeWindow | None,
    boost: float,
) -> list[Ranked[K]]:
    """A soft time preference: items whose time falls in `window` get `boost` more fused score.

    fused x (1 + boost): the gain is proportional to how well the item matched the query
    itself, so an item that matched nothing gains nothing, and items outside the window keep
    their order. Relevance (what thresholds compare) does not change. (An additive gain of
    boost x relevance x the best fused score was measured too and ranked worse on LoCoMo.)
    """
    if window is None or boost <= 0.0:
        return ranked
    out = [
        Ranked(r.key, r.fused * (1.0 + boost), r.relevance, r.keyword, r.semantic)
        if r.key in times and times[r.key] in window
        else r
        for r in ranked
    ]
    out.sort(key=lambda r: (-r.fused, -r.relevance))
    return out


def boost(
    ranked: list[Ranked[K]], chosen: Collection[K], factor: float, *, lower: bool = False
) -> list[Ranked[K]]:
    """The chosen items get fused x (1 + factor) and the ranking is re-sorted; relevance (what
    thresholds compare) does not change, and an item that matched nothing gains nothing.
    `lower`: a factor in (-1, 0) lowers them instead (0 = off either way)."""
    if not chosen or factor == 0.0 or (factor < 0.0 and not lower) or factor <= -1.0:
        return ranked
    out = [
        Ranked(r.key, r.fused * (1.0 + factor), r.relevance, r.keyword, r.semantic)
        if r.key in chosen
        else r
        for r in ranked
    ]
    out.sort(key=lambda r: (-r.fused, -r.relevance))
    return out


def diversify(
    ranked: list[Ranked[K]], groups: Mapping[K, Hashable], cap: int, depth: int
) -> list[Ranked[K]]:
    """At most `cap` items of one group (a conversation) in the first `depth` places.

    Walks the ranking in order; an item whose group is full is deferred and the deferred items
    follow in their own order once `depth` places are filled (or the ranking runs out). The
    best item always stays first. Items without a group are never deferred. cap <= 0 is off.
    """
    if cap <= 0 or depth <= 0:
        return ranked
    placed: list[Ranked[K]] = []
    deferred: list[Ranked[K]] = []
    counts: dict[Hashable, int] = {}
    for r in ranked:
        group = groups.get(r.key)
        if len(placed) >= depth or group is None or counts.get(group, 0) < cap:
            placed.append(r)
            if group is not None:
                counts[group] = counts.get(group, 0) + 1
        else:
            deferred.append(r)
    if len(placed) <= depth:
        return placed + deferred
    return placed[:depth] + deferred + placed[depth:]


def group_vote(
    ranked: list[Ranked[K]], groups: Mapping[K, Hashable], weight: float, depth: int
) -> list[Ranked[K]]:
    """Session-level evidence: a conversation's matching turns vote for each other.

    A group's vote is the sum of the fused scores of its items among the first `depth`,
    scaled so the best group's vote is 1; each grouped item gains `weight` x its group's vote
    times its own fused score (so an item that matched nothing still gains nothing). An
    answer told over several turns of one session rises together. weight <= 0 is off.
    """
    if weight <= 0.0 or depth <= 0:
        return ranked
    votes: dict[Hashable, float] = {}
    for r in ranked[:depth]:
        group = groups.get(r.key)
        if group is not None:
            votes[group] = votes.get(group, 0.0) + r.fused
    top = max(votes.values(), default=0.0)
    if top <= 0.0:
        return ranked
    out = []
    for r in ranked:
        group = groups.get(r.key)
        share = votes.get(group, 0.0) / top if group is not None else 0.0
        fused = r.fused * (1.0 + weight * share)
        out.append(Ranked(r.key, fused, r.relevance, r.keyword, r.semantic))
    out.sort(key=lambda x: (-x.fused, -x.relevance))
    return out


def own_first(ranked: list[Ranked[K]], shared: Collection[K]) -> list[Ranked[K]]:
    """The user's own item before a shared space's where they tie (the same reported
    relevance, consecutive in the order): the order is otherwise kept as it is."""
    if not shared:
        return ranked
    reported = [round(r.relevance, 4) for r in ranked]
    out: list[Ranked[K]] = []
    i = 0
    while i < len(ranked):
        j = i + 1
        while j < len(ranked) and reported[j] == reported[i]:
            j += 1
        if j == i + 1:
            out.append(ranked[i])  # no tie: nothing to reorder
        else:
            group = ranked[i:j]
            out += [r for r in group if r.key not in shared]
            out += [r for r in group if r.key in shared]
        i = j
    return out
