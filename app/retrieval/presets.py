"""Named retrieval presets: a typed configuration the eval logs field by field."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Literal

from app.domain import ContextWeights

Fusion = Literal["convex", "rrf", "learned"]
Normalisation = Literal["minmax", "max", "zscore"]


@dataclass(frozen=True)
class RetrievalPreset:
    """Every ranking parameter in one place; `default` is chosen by the LoCoMo and golden evals."""

    name: str
    fusion: Fusion = "convex"
    keyword_weight: float = 0.6
    vector_weight: float = 0.4
    normalisation: Normalisation = "minmax"  # per-list score scaling before a convex fusion
    rrf_k: int = 60
    candidates: int = 50  # per arm and source
    use_keyword: bool = True
    use_vector: bool = True
    bm25_k1: float = 1.2
    bm25_b: float = 0.5
    # Cosine similarity mapped to semantic relevance: <= floor -> 0, >= ceiling -> 1.
    # Passages (app/retrieval/passages.py): a message's cosine is (1 - w) x its own + w x its
    # best sentence's, for messages of two or more sentences (0 = off: the turn's own vector).
    passage_weight: float = 0.7
    vector_floor: float = 0.15
    vector_ceiling: float = 0.5
    # Share of the query's keyword information (sum of idf) that counts as a full match.
    keyword_saturation: float = 0.6
    # The ranking score adds this share of the calibrated relevance to the fused score: the
    # per-query normalisation alone cannot tell a strong list from a weak one (0 = off).
    relevance_weight: float = 0.0
    # Dialogue neighbours: the turn after a matching turn inherits `next_turn_weight` of its
    # score (answers follow questions), the turn before inherits `previous_turn_weight`.
    next_turn_weight: float = 0.5
    previous_turn_weight: float = 0.0
    neighbour_seeds: int = 20  # how many top-ranked messages pass score to their neighbours
    # The turn that answers a matching question (the seed ends with '?', the next turn is the
    # other speaker's) counts as relevant too: its relevance is at least this share of the
    # question's (0 = off: an item's relevance is its own words' only).
    answer_relevance: float = 1.0
    # ... and inherits this share of the question's fused score in the ranking (more than an
    # ordinary next turn's `next_turn_weight`: the answer is where a question's facts are told;
    # 0 = off).
    answer_weight: float = 0.9
    # Drop results whose relevance is under this share of the best result's (0 = off).
    relative_cutoff: float = 0.6
    # The first this many places of the ranking are exempt from the relative cut (still not
    # from min_score): the agent tool then keeps what the ranking found (0 = off).
    cutoff_exempt_ranks: int = 0
    # How many top-ranked items get their metadata read for the time preference and the
    # diversification below (both reorder only these).
    rerank_depth: int = 50
    # Soft time preference: when the question names a time ("last May", "in 2023"), items
    # created in that window get fused x (1 + time_boost) (0 = off). Things are told about
    # after they happen, so the window is extended by `time_mention_slack_days`.
    time_boost: float = 1.0
    time_mention_slack_days: float = 14.0
    # A question asking *when* ("When did ...?", "What year ...?") prefers items that tell a
    # time ("yesterday", "last week", a weekday, a date): fused x (1 + when_boost) among the
    # first `rerank_depth` (0 = off). Its answer is the turn that places the event in time.
    when_boost: float = 2.0
    # A question that names a conversation participant ("What books has Tim read?") prefers
    # that participant's own turns (messages whose `metadata.speaker` is a name in the
    # question): fused x (1 + speaker_boost) among the fetched candidates (0 = off). Messages
    # without a speaker are never moved.
    speaker_boost: float = 1.0
    # Diversification: at most this many items of one conversation in the first
    # `diversify_depth` places (0 = off); the best item always stays first.
    conversation_cap: int = 0
    diversify_depth: int = 5
    # Session voting: a conversation's items among the first `rerank_depth` sum their scores;
    # each item gains `session_vote_weight` x its conversation's share of the best sum (0 = off).
    session_vote_weight: float = 0.0
    # Pseudo-relevance feedback, one round in SQL: the `prf_terms` rarest lexemes (in at least
    # `prf_min_df` items) of the `prf_docs` best keyword hits that the query lacks score the
    # items again; `prf_weight` of that score joins the keyword arm's ranking score (not its
    # calibrated relevance). prf_docs = 0 is off.
    prf_docs: int = 0
    prf_terms: int = 10
    prf_min_df: int = 2
    prf_weight: float = 0.3
    # Recency (issues 28 and 29): score = (1 - w) x relevance + w x exp(-age_days / half_life),
    # the reported relevance and the order; a request's `recency` overrides w (0 = off).
    recency_weight: float = 0.0
    recency_half_life_days: float = 30.0
    # Learned fusion only. An item whose only evidence is a keyword match (its cosine at or
    # under `vector_floor`) also needs a cosine over this: a shared word in an item whose
    # meaning is unrelated ("team" in "What's my favourite football team?" against "Works on
    # the search team") is not an answer (0 = off).
    keyword_cosine_floor: float = 0.0
    # Learned fusion only. An item whose keyword match is on the question's names alone ("Tom"
    # in "What is Tom's phone number?" against "Tom repairs bicycles") shares the name with the
    # question in its cosine too: its cosine evidence needs `vector_floor` plus this (0 = off).
    name_cosine_margin: float = 0.0
    # Learned fusion only: the reported relevance of an item below the question's best is
    # best ** gamma x (p / p_best) ** relative_exponent (RelevanceModel.relevance; 0 = the
    # model's own scale, p ** gamma, for every item).
    relative_exponent: float = 0.0
    # Learned fusion only: newer wins a near tie. An item's odds gain a factor
    # (1 + recency_odds x exp(-age_days / recency_half_life_days)), divided by that of the
    # newest candidate so the newest keeps its own odds (a store written today is not moved);
    # 0 = off. A tie-break, not a preference: at 0.1 an item 150 days older than a competitor
    # of today needs 1/1.1 of the competitor's odds to stay ahead.
    recency_odds: float = 0.0
    # Newer wins on one topic (app/retrieval/topics.py): two memories among the first
    # `topic_depth` memories of the ranking whose stored vectors have a cosine at or over
    # `topic_link` are one topic; the newer ranks at least
    # where the older stood, and the older is reported as possibly outdated (0 = off).
    topic_link: float = 0.0
    topic_depth: int = 8
    # Newer wins between two decisions (memories of type `decision`) among those first
    # `topic_depth` memories whose stored vectors have a cosine at or over this: a question
    # that both answer is their topic, and a later decision revises an earlier one even when
    # their words differ ("a 12-frame radial extractor from Lega", later "ordering the
    # 20-frame electric one from Lyson"); 0 = off (docs/retrieval.md, "Newer wins").
    decision_link: float = 0.0
    # Newer wins a near tie on one topic (app/retrieval/topics.py): of two memories among
    # those first `topic_depth`, of any kinds, whose stored vectors have a cosine at or over
    # `tie_link` and whose newer one's relevance is at least `tie_ratio` of the older one's,
    # the newer ranks at least where the older stands; nothing is marked outdated (0 = off;
    # docs/retrieval.md, "Newer wins a near tie").
    tie_link: float = 0.0
    tie_ratio: float = 0.95
    # Newer wins by a learned pair model (app/retrieval/revision.py, fitted per embedder): of
    # two memories among those first `topic_depth`, the older ranked first, whose pair the
    # embedder's revision model gives at least this probability that the newer revises the
    # older, the newer ranks at least where the older stands, as for a near tie (0 = off, or an
    # embedder without a revision model; docs/retrieval.md, "Newer wins by a pair model").
    revision_threshold: float = 0.0
    # ... and where it gives at least this, the older is reported possibly outdated too, as the
    # decision link reports its pairs (0 = never).
    revision_outdates: float = 0.0
    # Who a question is about (app/retrieval/subjects.py): a memory that names none of the
    # people or things the question names, when the store knows them, reports at most this
    # relevance, under the spec's floor (unless both it and the question are about the user);
    # 0 = off (docs/retrieval.md, "Who a question is about").
    subject_cap: float = 0.0
    # A past turn that asks a question ("What is my dog's name?") is where a fact was wanted,
    # not where it was told: its odds (learned fusion's ranking score, and so its relevance)
    # are multiplied by this, after its answer inherited from it (1 = off).
    question_odds: float = 1.0
    # The answer head (app/retrieval/answer_head.py) scores the first this many candidates of
    # the ranking from their stored vectors; its logit joins the relevance model's (learned
    # fusion with a model that has a head weight; 0 = off).
    answer_depth: int = 0
    # Which relevance model of the embedder the learned fusion reads (relevance.model_file):
    # "" its plain (listwise) one, "answers" the pointwise one with the answer head's weight.
    relevance_model: str = ""
    # The answer verifier (app/adapters/verifier.py, a cross-encoder of our own) reads the first
    # this many candidates of the calibrated ranking with their text, and its probability
    # becomes their relevance (app/retrieval/verdicts.apply_verified; 0 = off).
    verify_depth: int = 0
    # The question model (app/retrieval/abstention.py): the best item's relevance is the
    # probability that the store answers the question at all; the others keep their ratio to it.
    question_model: bool = False
    # The question model caps the best item's relevance instead of setting it: it can only
    # lower it (say that nothing answers), and the rest of the ranking keeps its own scale.
    question_caps: bool = False
    # The keyword index: how the lexemes of a turn's neighbouring turns count beside its own
    # (app.domain.ContextWeights); the index's writers apply them, so a change needs the index
    # rebuilt (`pgrecall rebuild-keywords`, app/services/keywords.py).
    context_weights: ContextWeights = field(default_factory=ContextWeights)

    @property
    def links_topics(self) -> bool:
        """Whether the ranking links memories of one topic (newer wins)."""
        return (
            self.topic_link > 0.0
            or self.decision_link > 0.0
            or self.tie_link > 0.0
            or self.revision_threshold > 0.0
        )

    def as_params(self) -> dict[str, object]:
        """Flat name -> value, for logs and MLflow."""
        return {f"preset.{k}": v for k, v in asdict(self).items()}

    def with_(self, **changes: object) -> RetrievalPreset:
        return replace(self, **changes)  # type: ignore[arg-type]


# Today's ranking before issue 29: min-max convex fusion, calibrated noisy-OR relevance.
CONVEX = RetrievalPreset(name="convex")
# Issue 29: the learned relevance model orders and calibrates (app/retrieval/relevance.py).
# The stages multiply the model's odds; their strengths were re-chosen on that scale in a
# replay of both halves of the LoCoMo development set (docs/retrieval.md).
# vector_floor is its evidence floor: a candidate without a keyword match on a non-name word
# and with a cosine at or under it is not returned (the golden set's unrelated stores), nor one
# with such a match and a cosine at or under keyword_cosine_floor. relative_exponent keeps the
# second and third answers of a question several memories answer near the first
# (docs/retrieval.md, "Several answers").
LEARNED = CONVEX.with_(
    name="learned",
    fusion="learned",
    speaker_boost=3.0,
    answer_weight=2.0,
    time_boost=3.0,
    vector_floor=0.25,
    keyword_cosine_floor=0.10,
    relative_exponent=0.2,
    recency_odds=0.1,
)
# Issue 45: an absolute relevance. The relevance model is fitted pointwise (with the
# question's own features and questions nothing answers in its data), the answer head's logit
# joins it for the first `answer_depth` candidates, and the reported relevance is the model's
# own scale (no relative exponent); a past question steps aside and newer wins on one topic.
ANSWERS = LEARNED.with_(
    name="answers",
    relevance_model="answers",
    relative_exponent=0.0,
    answer_depth=20,
    relative_cutoff=0.3,
    topic_link=0.55,
    decision_link=0.2,
    question_odds=0.3,
    question_model=True,
    subject_cap=0.2,
    name_cosine_margin=0.06,
)
# Issue 45's verifier over `answers`: the first candidates' relevance is the cross-encoder's
# probability that they answer (it needs the trained embedder, whose cosine it reads).
VERIFIED = ANSWERS.with_(name="verified", verify_depth=8, question_model=False)
# Issue 45: newer wins between two decisions a question finds and a near tie on one topic, the
# question model (of the service's embedder, when it has one) caps the best relevance when
# nothing seems to answer, a memory about none of the people a question names stays under the
# floor, and one that matches a question by a name alone needs a cosine 0.06 over the evidence
# floor (chosen on the corpus's validation people: docs/retrieval.md, "Newer wins", "Newer wins
# a near tie", "The trained MiniLM by default", "Who a question is about" and "Twice the
# people"); an item under 0.75 of the best item's relevance is cut (0.6 until the 80-people
# embedder, then 0.65: the golden set's Precision@5 0.896 -> 0.911; with the 144-people one
# 0.75: 0.898 -> 0.902, Recall@5 0.972 -> 0.968, the validation people unmoved; "Eighty people",
# "A hundred and forty-four people"). A keyword match needs a cosine over 0.05 (LEARNED's 0.10:
# with the 144-people embedder a one-word question's cosine to a long memory holding that rare
# word fell to 0.089; the golden set, the validation people and the development set do not
# move). Newer wins too where the embedder's revision model says the newer of two memories
# revises the older ranked above it (P >= 0.7, 0.6 before its refit on phatic.content_words;
# at 0.95 the older is marked possibly outdated; the near tie stays beside it: "Newer wins by
# a pair model"). The evidence floor is 0.20 (LEARNED's 0.25 was chosen on the int8 base MiniLM:
# under the trained embedder a paraphrase's answer that shares no word with it often has a
# cosine of 0.20-0.25, and the floor dropped it; validation people's paraphrase present 0.908 ->
# 0.917, no-answer answered 0.201 -> 0.192, the golden set's Precision@5 unmoved: "The evidence
# floor of the trained embedder").
DEFAULT = LEARNED.with_(
    name="default",
    decision_link=0.2,
    tie_link=0.5,
    revision_threshold=0.7,
    revision_outdates=0.95,
    question_model=True,
    question_caps=True,
    subject_cap=0.2,
    name_cosine_margin=0.06,
    relative_cutoff=0.75,
    keyword_cosine_floor=0.05,
    vector_floor=0.20,
)

PRESETS: dict[str, RetrievalPreset] = {
    "default": DEFAULT,
    "convex": CONVEX,
    "learned": LEARNED,
    "answers": ANSWERS,
    "verified": VERIFIED,
    "keyword_only": DEFAULT.with_(name="keyword_only", use_vector=False),
    "vector_only": DEFAULT.with_(name="vector_only", use_keyword=False),
    # The ranking without the time preference (what a caller who wants no date reading gets).
    "untimed": DEFAULT.with_(name="untimed", time_boost=0.0, time_mention_slack_days=0.0),
    # The ranking without issue 13's stages (time preference, when-questions, answers
    # inheriting relevance, named speakers, passages): the reference for their latency cost
    # (bench/).
    "baseline": DEFAULT.with_(
        name="baseline",
        time_boost=0.0,
        time_mention_slack_days=0.0,
        when_boost=0.0,
        answer_relevance=0.0,
        answer_weight=0.0,
        speaker_boost=0.0,
        passage_weight=0.0,
    ),
    "rrf_equal": DEFAULT.with_(
        name="rrf_equal", fusion="rrf", keyword_weight=1.0, vector_weight=1.0
    ),
}


def get_preset(name: str) -> RetrievalPreset:
    """A preset by name; ValueError lists the known names."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown retrieval preset {name!r}; known: {sorted(PRESETS)}") from None


def with_overrides(preset: RetrievalPreset, assignments: Sequence[str]) -> RetrievalPreset:
    """`preset` with "field=value" assignments applied (for eval runs); ValueError on an unknown
    field or a value of the wrong kind. The name gains the assignments, so runs tell apart."""
    if not assignments:
        return preset
    current = asdict(preset)
    known = {f.name for f in fields(preset) if not isinstance(current[f.name], dict)} - {"name"}
    changes: dict[str, object] = {}
    for assignment in assignments:
        key, sep, text = assignment.partition("=")
        key, text = key.strip(), text.strip()
        if not sep or key not in known:
            raise ValueError(f"{assignment!r}: expected FIELD=VALUE, FIELD one of {sorted(known)}")
        old = current[key]
        try:
            if isinstance(old, bool):
                if text.lower() not in {"true", "false", "1", "0"}:
                    raise ValueError(text)
                value: object = text.lower() in {"true", "1"}
            elif isinstance(old, int):
                value = int(text)
            elif isinstance(old, float):
                value = float(text)
            else:
                value = text
        except ValueError:
            raise ValueError(f"{assignment!r}: {key} takes a {type(old).__name__}") from None
        changes[key] = value
    name = preset.name + "+" + ",".join(f"{k}={v}" for k, v in changes.items())
    return replace(preset, name=name, **changes)  # type: ignore[arg-type]
