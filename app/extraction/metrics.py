"""Process counters of extraction (this process's worker), shown by /metrics beside the
durable figures read from the job and usage tables."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class ExtractionMetrics:
    calls: int = 0
    tokens: int = 0
    tokens_by_user: Counter[str] = field(default_factory=Counter)
    jobs: Counter[str] = field(default_factory=Counter)  # done | retried | failed | dead
    facts: Counter[str] = field(default_factory=Counter)  # added | updated | known | dropped
    malformed: int = 0
    cap_refusals: int = 0

    def snapshot(self, top: int = 20) -> dict[str, object]:
        return {
            "calls": self.calls,
            "tokens": self.tokens,
            "top_users": [
                {"user_id": u, "tokens": n} for u, n in self.tokens_by_user.most_common(top)
            ],
            "jobs": dict(self.jobs),
            "facts": dict(self.facts),
            "malformed_answers": self.malformed,
            "cap_refusals": self.cap_refusals,
        }
