"""Settings: one pydantic-settings class, env prefix PGRECALL_, read only at the edges."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    AliasChoices,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.embedding_models import (
    DEFAULT_MODEL_ID,
    LOCAL_DIMENSION,
    LOCAL_MODELS,
    OPTIONAL_LOCAL_MODELS,
)

_ROLE_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def check_role_name(name: str) -> str:
    """Role names are formatted into DDL, so only plain lower-case identifiers are accepted.

    Here rather than in app/roles.py (which uses it for every role it creates) because the
    settings validate PGRECALL_APP_ROLE with it, and roles.py reads Settings."""
    if not _ROLE_NAME.fullmatch(name):
        raise ValueError("must be a lower-case identifier: a-z, 0-9, _ (max 63, not digit-first)")
    return name


class EmbeddingProvider(StrEnum):
    LOCAL = "local"
    OPENAI = "openai"


class ExtractionMode(StrEnum):
    OFF = "off"
    LLM = "llm"


class JudgeMode(StrEnum):
    OFF = "off"
    LLM = "llm"


class LogFormat(StrEnum):
    TEXT = "text"
    JSON = "json"


@dataclass(frozen=True)
class LLMEndpoint:
    """An OpenAI-compatible chat endpoint: base URL (None: the openai client's), key, model."""

    base_url: str | None
    api_key: str | None
    model: str


class Settings(BaseSettings):
    """Every knob of the service; the environment variable is PGRECALL_<NAME>."""

    model_config = SettingsConfigDict(env_prefix="PGRECALL_", extra="ignore")

    database_url: str | None = Field(
        default=None, description="Postgres DSN; unset = embedded Postgres in data_dir"
    )
    migration_database_url: str | None = Field(
        default=None,
        description="owner's DSN for migrations and grants when database_url is the service role",
    )
    admin_database_url: str | None = Field(
        default=None,
        description="DSN of the admin role (pgrecall_admin or a member) for admin work; unset: "
        "the embedded server's pgrecall_admin, or the migration (owner) DSN",
    )
    app_role: str = Field(
        default="pgrecall_app",
        description="the service's own role on the embedded server (created at start-up)",
    )
    redis_url: str | None = Field(
        default=None, description="Redis URL; unset = no cache, no rate limit"
    )
    data_dir: Path = Field(default=Path(".data"), description="embedded database and local state")
    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=1, le=65535)] = 8000

    embedding_provider: EmbeddingProvider = EmbeddingProvider.LOCAL
    embedding_model: str = DEFAULT_MODEL_ID
    embedding_dimension: Annotated[int, Field(ge=8, le=4096)] = LOCAL_DIMENSION
    embedding_timeout_s: Annotated[float, Field(gt=0, le=120)] = 10.0
    # onnxruntime threads per inference (more than one never spin). 1: with the int8-arithmetic
    # model a short query takes ~3 ms on one thread, and a second thread cost CPU without
    # lowering the latency (docs/performance.md, "Int8 arithmetic"); the float graph gained
    # latency from 2.
    embedding_threads: Annotated[int, Field(ge=1, le=64)] = 1
    openai_base_url: str | None = None
    openai_api_key: SecretStr | None = None

    token_budget: Annotated[int, Field(ge=1, le=100_000)] = 1000
    min_relevance: Annotated[float, Field(ge=0.0, le=1.0)] = 0.3
    max_results: Annotated[int, Field(ge=1, le=100)] = 10
    rate_limit_per_minute: Annotated[int, Field(ge=0)] = 10
    retrieval_preset: str = "default"
    query_timeout_s: Annotated[float, Field(gt=0, le=60)] = 2.0
    session_messages: Annotated[int, Field(ge=1, le=500)] = 20
    exact_search_max_items: Annotated[int, Field(ge=0)] = 10_000
    # Users with at most this many indexed items run the read statements after the first on
    # the connection's generic plans (planned once per connection) instead of a plan per query:
    # 0.7 ms less Postgres CPU per query for the real 10k bench's 369-663-turn users; a
    # 5,520-turn user's fetch was 4.5x slower on them, so bigger users keep custom plans
    # (docs/performance.md). 0 = always custom; always custom on Citus, whose coordinator
    # refuses them (docs/scaling.md).
    generic_plan_max_items: Annotated[int, Field(ge=0)] = 1_000
    # A user's size (exact or ANN search, passages, plans) is read once per this many seconds of
    # its queries, not per query (app/services/query/sizes.py); 0 reads it every time.
    search_size_ttl_s: Annotated[float, Field(ge=0, le=3600)] = 10.0
    # The memories of shared spaces of at most `space_copy_max_items` items (and on the exact
    # path: exact_search_max_items) are kept in memory by each service process, up to this many
    # MiB, and scored there: a query that reads spaces sends one statement for them (their
    # versions, under row-level security) instead of their keyword, vector and row statements.
    # A copy is read again after each write of its space, in the background: 31 ms for 300
    # memories, 0.24 s for 3,000 (docs/agents.md; app/services/query/space_cache.py). 0: none.
    space_cache_mb: Annotated[int, Field(ge=0, le=65_536)] = 256
    space_copy_max_items: Annotated[int, Field(ge=0)] = 5_000
    # On a Citus coordinator: the query path reads each user's shards on the worker that holds
    # them, not through the coordinator (app/services/query/shards.py; docs/scaling.md, "Reads
    # on the shard's worker"); where a user's shards are is looked up once per this many
    # seconds. 0 turns it off: every read goes through the coordinator. No effect elsewhere.
    citus_direct_reads_ttl_s: Annotated[float, Field(ge=0, le=3600)] = 10.0
    # Write a vector per sentence of multi-sentence messages (docs/retrieval.md, "Passages"):
    # better recall for about 2.2x the embedding work per appended turn. Off: the query scores
    # turns by their own vectors (and by passages written while it was on).
    message_passages: bool = True
    ivfflat_probes: Annotated[int, Field(ge=1, le=10_000)] = 10
    ivfflat_max_probes: Annotated[int, Field(ge=1, le=10_000)] = 100
    # A user on the ANN path probes at least this share of the lists of their own index
    # (user_lists_for(items)): 60 of a 50k-item user's 100 lists (app/services/query/model.py
    # ann_probes; 0.5 gave recall@10 0.94 with the int8 model's vectors at 1M, 0.6 gives 0.96).
    ivfflat_probe_share: Annotated[float, Field(ge=0.0, le=1.0)] = 0.6
    # The vector index `pgrecall reindex` builds (docs/performance.md, "Big users"); the query
    # path sets both methods' scan settings, so it works on either index.
    vector_index: Literal["ivfflat", "hnsw"] = "ivfflat"
    # `pgrecall reindex` gives every user above exact_search_max_items an ivfflat index of
    # their own rows (a partial index): ANN recall for big users in big tables.
    user_vector_indexes: bool = True
    # ... and every user with more than this many vectors in a table, up to
    # exact_search_max_items, an HNSW index of their own: their queries read it instead of
    # scoring each vector (the real 10k bench's 5,520-turn user: its vector statement 2.9 -> 1.9
    # ms of Postgres CPU, recall@10 0.998; docs/performance.md). At or over
    # exact_search_max_items: no HNSW band.
    user_hnsw_min_items: Annotated[int, Field(ge=0)] = 4_000
    hnsw_ef_search: Annotated[int, Field(ge=1, le=1000)] = 100
    hnsw_max_scan_tuples: Annotated[int, Field(ge=1, le=10_000_000)] = 20_000
    migrate_on_start: bool = True

    api_key: SecretStr | None = Field(default=None, description="service key (Bearer) for /v1")
    admin_api_key: SecretStr | None = Field(default=None, description="admin key for /v1/admin")
    key_cache_ttl_s: Annotated[float, Field(ge=0, le=3600)] = Field(
        default=10.0, description="per-user key rows cached this long: the revocation delay"
    )
    write_rate_limit_per_minute: Annotated[int, Field(ge=0)] = Field(
        default=30, description="agent writes (save/forget/rate) per user per minute; 0 = off"
    )
    max_entries_per_user: Annotated[int, Field(ge=0)] = Field(
        default=0,
        description="live memories a user may keep; a save_memory beyond it soft-deletes the "
        "least valuable ones (lowest importance, least recently retrieved, oldest): 0 = no cap",
    )

    chat_upstream_url: str | None = Field(
        default=None,
        description="OpenAI-compatible base URL the chat proxy forwards to (e.g. "
        "https://api.openai.com/v1); unset = POST /v1/chat/completions answers 501",
    )
    chat_upstream_key: SecretStr | None = Field(
        default=None, description="key sent upstream instead of the caller's Authorization"
    )
    chat_upstream_timeout_s: Annotated[float, Field(gt=0, le=3600)] = 300.0

    mcp_max_streams: Annotated[int, Field(ge=1, le=100_000)] = Field(
        default=1000, description="open GET /mcp streams at most, all keys together (503 over)"
    )
    mcp_max_streams_per_key: Annotated[int, Field(ge=1, le=100_000)] = Field(
        default=10, description="open GET /mcp streams at most per API key (429 over)"
    )
    mcp_stream_idle_s: Annotated[float, Field(gt=0, le=86_400)] = Field(
        default=300.0,
        description="a GET /mcp stream idle this long (no client bytes, nothing sent "
        "but keep-alive pings) is closed",
    )

    mlflow_tracking_uri: str | None = Field(
        default=None,
        validation_alias=AliasChoices("PGRECALL_MLFLOW_TRACKING_URI", "MLFLOW_TRACKING_URI"),
        description="the evaluation runs the console's Health page lists; unset = "
        "sqlite:///./mlruns/mlflow.db (where `python -m eval` logs)",
    )

    # LLM extraction of memories from user turns (docs/extraction.md); off by default.
    extraction: ExtractionMode = ExtractionMode.OFF
    extraction_base_url: str | None = Field(
        default=None, description="OpenAI-compatible base URL; unset = the openai client's default"
    )
    extraction_model: str = "gpt-4o-mini"
    extraction_api_key: SecretStr | None = None
    extraction_timeout_s: Annotated[float, Field(gt=0, le=600)] = 30.0
    extraction_max_attempts: Annotated[int, Field(ge=1, le=100)] = 5
    extraction_backoff_s: Annotated[float, Field(ge=0, le=86_400)] = Field(
        default=10.0, description="first retry delay; doubles per attempt"
    )
    extraction_backoff_max_s: Annotated[float, Field(ge=0, le=86_400)] = 3600.0
    extraction_max_output_tokens: Annotated[int, Field(ge=16, le=100_000)] = 1024
    extraction_job_token_cap: Annotated[int, Field(ge=1)] = Field(
        default=20_000, description="tokens one job (one user turn) may spend over all attempts"
    )
    extraction_user_daily_token_cap: Annotated[int, Field(ge=1)] = Field(
        default=200_000, description="tokens extraction may spend per user per UTC day"
    )
    # More than one: a batch whose model call runs to its deadline holds one task, and the
    # other users' batches go on beside it (issue 44: one task left the next job 43.6 s waiting).
    extraction_workers: Annotated[int, Field(ge=0, le=64)] = Field(
        default=4, description="worker tasks in `pgrecall serve`; 0 = serve only queues jobs"
    )
    extraction_poll_interval_s: Annotated[float, Field(gt=0, le=3600)] = 2.0
    extraction_batch_messages: Annotated[int, Field(ge=1, le=200)] = 20
    extraction_candidates: Annotated[int, Field(ge=0, le=50)] = 10
    extraction_lease_s: Annotated[float, Field(gt=0, le=86_400)] = Field(
        default=300.0, description="a claimed batch not finished by then is claimable again"
    )
    extraction_default: bool = Field(
        default=True,
        description="with PGRECALL_EXTRACTION=llm: conversations without their own setting "
        "(PATCH /v1/conversations/{id} extraction) are extracted",
    )
    extraction_summary_tokens: Annotated[int, Field(ge=0, le=2000)] = Field(
        default=200,
        description="with PGRECALL_EXTRACTION=llm: the rolling conversation summary's size in "
        "tokens at most (one more model call per extraction batch); 0 = no summaries",
    )

    # The optional LLM judge of query_memory (docs/retrieval.md, "An LLM judge"); off by
    # default. Unset endpoint settings reuse the extractor's (then the chat proxy's upstream).
    judge: JudgeMode = JudgeMode.OFF
    judge_base_url: str | None = Field(
        default=None,
        description="OpenAI-compatible base URL; with it and PGRECALL_JUDGE_API_KEY unset, the "
        "extractor's endpoint (URL and key), else the chat proxy's upstream",
    )
    judge_model: str | None = Field(default=None, description="unset = PGRECALL_EXTRACTION_MODEL")
    judge_api_key: SecretStr | None = Field(
        default=None, description="the key for PGRECALL_JUDGE_BASE_URL (or the openai default)"
    )
    judge_timeout_s: Annotated[float, Field(gt=0, le=30)] = Field(
        default=0.8,
        description="one deadline for the whole judge call (connect, headers, body); at most "
        "half of PGRECALL_QUERY_TIMEOUT_S",
    )
    judge_candidates: Annotated[int, Field(ge=1, le=20)] = Field(
        default=5, description="the first this many ranked items are judged"
    )
    judge_cache_ttl_s: Annotated[int, Field(ge=0, le=30 * 86_400)] = Field(
        default=86_400, description="a (question, item) verdict is kept in Redis this long"
    )

    db_pool_size: Annotated[int, Field(ge=1, le=200)] = 10
    max_body_bytes: Annotated[int, Field(ge=1024)] = 5 * 1024 * 1024
    log_level: str = "INFO"
    log_format: LogFormat = LogFormat.TEXT

    @field_validator("database_url", "migration_database_url", "admin_database_url")
    @classmethod
    def _normalise_dsn(cls, value: str | None) -> str | None:
        """Accept postgres:// and postgresql:// and use the asyncpg driver."""
        if value is None or value == "":
            return None
        for prefix in ("postgres://", "postgresql://", "postgresql+psycopg://"):
            if value.startswith(prefix):
                return "postgresql+asyncpg://" + value[len(prefix) :]
        if not value.startswith("postgresql+asyncpg://"):
            raise ValueError("must be a postgresql:// URL")
        return value

    @field_validator("api_key", "admin_api_key", mode="before")
    @classmethod
    def _blank_key_is_no_key(cls, value: object) -> object:
        """An empty (or blank) key is no key: one rule, here at the edge, for every reader.

        Otherwise `PGRECALL_API_KEY=` would bind 0.0.0.0 with authentication off.
        """
        raw = value.get_secret_value() if isinstance(value, SecretStr) else value
        if raw is None or (isinstance(raw, str) and not raw.strip()):
            return None
        return value

    @field_validator("app_role")
    @classmethod
    def _check_role(cls, value: str) -> str:
        return check_role_name(value)

    @field_validator("redis_url")
    @classmethod
    def _check_redis(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        if not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must be a redis://, rediss:// or unix:// URL")
        return value

    @field_validator("extraction_base_url")
    @classmethod
    def _check_extraction_url(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/")

    @field_validator("extraction_api_key", mode="before")
    @classmethod
    def _blank_extraction_key(cls, value: object) -> object:
        raw = value.get_secret_value() if isinstance(value, SecretStr) else value
        return None if isinstance(raw, str) and not raw.strip() else value

    @model_validator(mode="after")
    def _check_extraction(self) -> Settings:
        if self.extraction is ExtractionMode.LLM and (
            self.extraction_api_key is None and self.extraction_base_url is None
        ):
            raise ValueError(
                "PGRECALL_EXTRACTION=llm needs PGRECALL_EXTRACTION_API_KEY or "
                "PGRECALL_EXTRACTION_BASE_URL"
            )
        return self

    @field_validator("judge_base_url")
    @classmethod
    def _check_judge_url(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/")

    @field_validator("judge_model", "judge_api_key", mode="before")
    @classmethod
    def _blank_judge_setting(cls, value: object) -> object:
        raw = value.get_secret_value() if isinstance(value, SecretStr) else value
        return None if isinstance(raw, str) and not raw.strip() else value

    @model_validator(mode="after")
    def _check_judge(self) -> Settings:
        if self.judge != JudgeMode.LLM:
            return self
        if self.judge_timeout_s > self.query_timeout_s / 2:
            raise ValueError(
                "PGRECALL_JUDGE_TIMEOUT_S: at most half of PGRECALL_QUERY_TIMEOUT_S "
                f"({self.query_timeout_s / 2:g})"
            )
        endpoint = self.judge_endpoint
        if endpoint.api_key is None and endpoint.base_url is None:
            raise ValueError(
                "PGRECALL_JUDGE=llm needs an endpoint: PGRECALL_JUDGE_BASE_URL or "
                "PGRECALL_JUDGE_API_KEY (or the extractor's, or the chat proxy's upstream)"
            )
        return self

    @field_validator("chat_upstream_url")
    @classmethod
    def _check_upstream(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/")

    @field_validator("log_level")
    @classmethod
    def _check_level(cls, value: str) -> str:
        upper = value.upper()
        if upper not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
            raise ValueError("must be one of DEBUG, INFO, WARNING, ERROR")
        return upper

    @model_validator(mode="after")
    def _check_embedder(self) -> Settings:
        local = self.embedding_provider is EmbeddingProvider.LOCAL
        # The MiniLM graphs, and the opt-in models of `make model-mpnet` with their own width.
        dimensions = dict.fromkeys(LOCAL_MODELS, LOCAL_DIMENSION) | {
            name: spec.dimension for name, spec in OPTIONAL_LOCAL_MODELS.items()
        }
        if local and dimensions.get(self.embedding_model) != self.embedding_dimension:
            served = ", ".join(f"{name} (dimension {dim})" for name, dim in dimensions.items())
            raise ValueError(
                "PGRECALL_EMBEDDING_MODEL/PGRECALL_EMBEDDING_DIMENSION: the local provider "
                f"serves {served}"
            )
        return self

    @model_validator(mode="after")
    def _check_exposure(self) -> Settings:
        if self.api_key is None and self.host not in {"127.0.0.1", "localhost", "::1"}:
            raise ValueError(
                f"PGRECALL_HOST: {self.host} without PGRECALL_API_KEY; set a key or bind to "
                "127.0.0.1"
            )
        return self

    @field_validator("retrieval_preset")
    @classmethod
    def _check_preset(cls, value: str) -> str:
        from app.retrieval.presets import PRESETS

        if value not in PRESETS:
            raise ValueError(f"unknown preset; known: {', '.join(sorted(PRESETS))}")
        return value

    @property
    def extraction_endpoint(self) -> LLMEndpoint:
        """The extractor's endpoint: PGRECALL_EXTRACTION_BASE_URL, _API_KEY and _MODEL."""
        key = self.extraction_api_key
        return LLMEndpoint(
            base_url=self.extraction_base_url,
            api_key=key.get_secret_value() if key else None,
            model=self.extraction_model,
        )

    @property
    def judge_endpoint(self) -> LLMEndpoint:
        """The judge's endpoint: its own URL and key when either is set, else the extractor's,
        else the chat proxy's upstream (a key only ever goes with its own URL); its own model,
        else the extractor's."""
        pairs = (
            (self.judge_base_url, self.judge_api_key),
            (self.extraction_base_url, self.extraction_api_key),
            (self.chat_upstream_url, self.chat_upstream_key),
        )
        base_url, key = next(((u, k) for u, k in pairs if u or k), (None, None))
        return LLMEndpoint(
            base_url=base_url,
            api_key=key.get_secret_value() if key else None,
            model=self.judge_model or self.extraction_model,
        )

    @property
    def auth_enabled(self) -> bool:
        return self.api_key is not None

    @property
    def embedded_database(self) -> bool:
        return self.database_url is None


class SettingsError(Exception):
    """Invalid configuration, with one readable line per bad setting."""


def load_settings(**overrides: object) -> Settings:
    """Read settings from the environment; raise SettingsError naming the bad variable."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            message = err["msg"].removeprefix("Value error, ")
            if err["loc"]:
                loc = ".".join(str(p) for p in err["loc"])
                lines.append(f"invalid setting PGRECALL_{loc.upper()}: {message}")
            else:  # cross-field checks name their settings at the start of the message
                lines.append(f"invalid setting {message}")
        raise SettingsError("; ".join(lines)) from None


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Process-wide settings for the CLI and app factory."""
    return load_settings()
