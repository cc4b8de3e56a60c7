"""The optional LLM judge of query_memory (PGRECALL_JUDGE=llm; docs/retrieval.md, "An LLM
judge"): between the calibrated ranking and the answer stage, one batched model call says which
of the first few items answer the question, and the verdicts re-score them
(app/retrieval/verdicts.py says exactly how).

Verdicts are cached per (user, question, item text) in Redis: only the pairs not seen before go
to the model, and a question whose pairs are all cached makes no call. Any failure (the model's
deadline, an HTTP error, a malformed answer, Redis configured but down) leaves the local
ranking as it was, with one warning line and `judge = "fallback"` on the result; after a
failure the judge rests for `rest_s` (answers fall back at once, without a warning each), so a
dead endpoint does not add its deadline to every query. Without Redis configured at all the
judge runs uncached.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from app.adapters.judge import JudgeError, JudgeLLM
from app.retrieval.verdicts import apply_verdicts

if TYPE_CHECKING:
    from app.adapters.cache import Cache
    from app.repositories.retrieval import Candidate
    from app.retrieval.scoring import Ranked
    from app.services.query.model import QueryRequest, QueryResult

# The query package's logger: operators filter the query's warnings by it.
log = logging.getLogger("app.services.query")


class QueryJudge:
    """Judges the first `candidates` items of a ranking; holds no per-request state but the
    time until which it rests after a failure."""

    def __init__(
        self,
        llm: JudgeLLM,
        cache: Cache,
        *,
        candidates: int,
        floor: float,
        ttl_s: int,
        rest_s: float = 5.0,
    ) -> None:
        self.llm = llm
        self.cache = cache
        self.candidates = candidates
        self.floor = floor  # the service's floor (min_relevance): a request without its own
        self.ttl_s = ttl_s
        self.rest_s = rest_s
        self._rest_until = 0.0

    async def review(
        self,
        request: QueryRequest,
        question: str,
        ranked: list[Ranked[Any]],
        candidates: dict[Any, Candidate],
        result: QueryResult,
    ) -> list[Ranked[Any]]:
        """The ranking with the judge's verdicts applied (`result.judge = "llm"`), or as it was
        (`"fallback"`: the judge failed; unset: nothing to judge). Never raises JudgeError."""
        window = [r.key for r in ranked if r.key in candidates][: self.candidates]
        if not window:
            return ranked
        if time.monotonic() < self._rest_until:
            result.judge = "fallback"
            return ranked
        try:
            verdicts = await self._verdicts(request.user_id, question, window, candidates)
        except JudgeError as exc:
            self._rest_until = time.monotonic() + self.rest_s
            log.warning(
                "LLM judge failed (%s): the local ranking stands; the judge rests %gs",
                exc,
                self.rest_s,
            )
            result.judge = "fallback"
            return ranked
        result.judge = "llm"
        floor = request.min_score if request.min_score > 0 else self.floor
        return apply_verdicts(ranked, verdicts, floor)

    async def _verdicts(
        self, user_id: str, question: str, window: list[Any], candidates: dict[Any, Candidate]
    ) -> dict[Any, bool]:
        digests = {
            k: self.cache.verdict_digest(self.llm.model, question, candidates[k].content)
            for k in window
        }
        cached = await self.cache.get_verdicts(user_id, [digests[k] for k in window])
        if cached is None:
            raise JudgeError("Redis unavailable: its verdicts cannot be read")
        verdicts = {k: v for k, v in zip(window, cached, strict=True) if v is not None}
        missing = [k for k in window if k not in verdicts]
        if missing:
            answers = await self.llm.answers(question, [candidates[k].content for k in missing])
            verdicts.update(zip(missing, answers, strict=True))
            await self.cache.set_verdicts(
                user_id, {digests[k]: verdicts[k] for k in missing}, self.ttl_s
            )
        return verdicts

    async def aclose(self) -> None:
        await self.llm.aclose()
