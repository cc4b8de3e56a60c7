"""The query's types: its settings (QueryConfig), a request, the items and result it answers
with, the trace the admin console explains, and the result cache's key."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from app.domain import MemoryScope
from app.repositories.maintenance import user_lists_for
from app.repositories.retrieval import Candidate, TagFilter, TimeFilter
from app.repositories.search_index import Source
from app.retrieval.presets import RetrievalPreset

if TYPE_CHECKING:
    from app.retrieval.budget import Packed
    from app.retrieval.scoring import Ranked

MAX_QUERY_CHARS = 8192
SourceName = Literal["memory", "message"]
JudgeOutcome = Literal["llm", "fallback"]
VerifierOutcome = Literal["local", "fallback"]


@dataclass(frozen=True)
class QueryConfig:
    """Service-wide retrieval settings: each field but the preset is the Settings field of the
    same name (app.runtime.query.query_config; the defaults live in app/config.py)."""

    preset: RetrievalPreset
    token_budget: int
    min_relevance: float
    max_results: int
    rate_limit_per_minute: int
    timeout_s: float
    exact_search_max_items: int
    ivfflat_probes: int
    ivfflat_max_probes: int
    ivfflat_probe_share: float
    hnsw_ef_search: int
    hnsw_max_scan_tuples: int
    generic_plan_max_items: int = 0  # users up to this size run on generic plans (0: none)
    search_size_ttl_s: float = 0.0  # how long a user's size is remembered (sizes.py; 0: not)
    space_cache_mb: int = 0  # the memory of the copies of shared spaces (space_cache.py; 0: none)
    space_copy_max_items: int = 0  # the biggest space copied


def ann_probes(items: int, probes: int, share: float) -> int:
    """ivfflat probes for a user with `items` indexed items on the ANN path: at least `probes`,
    and at least `share` of the lists of the user's own index (`pgrecall reindex` sizes it to
    user_lists_for(rows)), each of which holds that user's rows only. Real conversation turns
    need more than half of them for recall@10 >= 0.95 (docs/performance.md, "Big users on real
    conversation turns", and the 1M figures of "Against the issue's own baseline"): the
    default share 0.6 probes 60 of a 50k-item user's 100 lists."""
    return max(probes, math.ceil(share * user_lists_for(items)))


@dataclass(frozen=True)
class QueryRequest:
    user_id: str
    query: str
    limit: int
    min_score: float
    types: tuple[str, ...] | None = None
    sources: tuple[SourceName, ...] = ("memory", "message")
    token_budget: int | None = None
    # Hard filters on event time (created_at), inclusive; as_of: nothing created after it.
    time_from: datetime | None = None
    time_to: datetime | None = None
    as_of: datetime | None = None
    # Only memories with any (or all) of these tags; messages have none.
    tags: tuple[str, ...] | None = None
    tags_match: Literal["any", "all"] = "any"
    # Recency weight w of this request (None: the preset's): score = (1 - w) x relevance
    # + w x exp(-age_days / half_life).
    recency: float | None = None
    # The memory scope within the user's (agent, run, own, spaces; docs/agents.md); None: the
    # user's whole memory (a whole-memory scope given is stored as None: one form, one cache
    # key). Its user is `user_id`.
    memory: MemoryScope | None = None

    def __post_init__(self) -> None:
        if self.memory is not None and self.memory.whole:
            object.__setattr__(self, "memory", None)

    @property
    def scope(self) -> MemoryScope:
        """The scope the read transactions are signed for (the request's user)."""
        return self.memory if self.memory is not None else MemoryScope(self.user_id)

    @property
    def when(self) -> TimeFilter:
        return TimeFilter(self.time_from, self.time_to, self.as_of)

    @property
    def tag_filter(self) -> TagFilter | None:
        return TagFilter(self.tags, self.tags_match == "all") if self.tags else None


@dataclass(frozen=True)
class QueryItem:
    id: str
    source_kind: SourceName
    content: str
    type: str
    relevance_score: float
    keyword_score: float
    semantic_score: float
    source: str | None
    created_at: datetime
    importance: float | None
    role: str | None
    conversation_id: str | None
    tokens: int
    cut: bool
    # A newer memory on the same topic (app/retrieval/topics.py): this one may be outdated.
    newer_id: str | None = None
    # The shared space the memory lives in (None: the user's own memory).
    space: str | None = None


@dataclass
class QueryResult:
    items: list[QueryItem] = field(default_factory=list)
    total_count: int = 0
    query_embedding_ms: int = 0
    retrieval_ms: int = 0
    total_ms: float = 0.0
    token_count: int = 0
    truncated: bool = False
    degraded: str | None = None
    error: str | None = None
    rate_limited: bool = False
    cached: bool = False
    query_truncated: bool = False
    # The best relevance of any candidate, kept or not (0: nothing matched at all): how sure
    # the service is that the store holds an answer.
    confidence: float = 0.0
    # The LLM judge's part (PGRECALL_JUDGE=llm, judge.py): "llm" its verdicts re-scored the
    # first items, "fallback" it failed and the local ranking stands; None: off or nothing to
    # judge.
    judge: JudgeOutcome | None = None
    # The local answer verifier's part (preset verify_depth, app/adapters/verifier.py):
    # "local" its probabilities re-scored the first candidates, "fallback" it failed and the
    # calibrated ranking stands; None: off, or the query had no vector.
    verifier: VerifierOutcome | None = None

    def to_json(self) -> bytes:
        # Field by field, not dataclasses.asdict: asdict deep-copies every value (about 1 ms
        # of CPU per answer of 10 items; docs/performance.md, "Half the CPU per query").
        data: dict[str, Any] = {name: getattr(self, name) for name in _RESULT_FIELDS}
        data["items"] = [{name: getattr(i, name) for name in _ITEM_FIELDS} for i in self.items]
        return json.dumps(data, default=str).encode()

    @classmethod
    def from_json(cls, payload: bytes) -> QueryResult:
        data = json.loads(payload)
        items = [
            QueryItem(**{**i, "created_at": datetime.fromisoformat(i["created_at"])})
            for i in data.pop("items")
        ]
        return cls(items=items, **data)


_ITEM_FIELDS = tuple(f.name for f in fields(QueryItem))
_RESULT_FIELDS = tuple(f.name for f in fields(QueryResult) if f.name != "items")


@dataclass
class QueryTrace:
    """What the ranking did with every candidate of one query (the admin console explains it).

    Filled only when asked for (`QueryService.explain`); the ranking itself is the same code
    path as `query`, so an explanation never differs from what the agent would get.
    """

    bm25: dict[tuple[Source, Any], float] = field(default_factory=dict)  # raw keyword scores
    cosine: dict[tuple[Source, Any], float] = field(default_factory=dict)  # raw similarities
    ranked: list[Ranked[tuple[Source, Any]]] = field(default_factory=list)  # before thresholds
    # the relevance model's inputs per candidate (app/retrieval/relevance.FEATURES)
    features: dict[tuple[Source, Any], tuple[float, ...]] = field(default_factory=dict)
    # the answer head's logit per scored candidate (app/retrieval/answer_head.py)
    head: dict[tuple[Source, Any], float] = field(default_factory=dict)
    kept: list[tuple[Source, Any]] = field(default_factory=list)  # passed both thresholds
    candidates: dict[tuple[Source, Any], Candidate] = field(default_factory=dict)
    packed: dict[tuple[Source, Any], Packed] = field(default_factory=dict)  # what the budget let in
    budget: int = 0


def query_hash(query: str) -> str:
    return hashlib.sha256(query.encode()).hexdigest()


def _cache_key(request: QueryRequest, preset: RetrievalPreset, budget: int) -> str:
    normalised = " ".join(request.query.lower().split())
    return json.dumps(
        [
            normalised,
            request.limit,
            request.min_score,
            request.types,
            request.sources,
            budget,
            preset.name,
            request.time_from,
            request.time_to,
            request.as_of,
            request.tags,
            request.tags_match,
            request.recency,
            # an agent's or run's answer is not the user's; one that reads spaces is never
            # stored (service.py), and its key matches no stored answer
            [m.agent_id, m.run_id, m.own, m.spaces] if (m := request.memory) is not None else None,
            # Relative time expressions ("yesterday") resolve against today's date.
            datetime.now(UTC).date() if request.as_of is None else None,
        ],
        default=str,
    )
