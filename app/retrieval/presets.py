"""Named retrieval presets: a typed configuration the eval logs field by field."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Literal

Fusion = Literal["convex", "rrf"]
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
    vector_floor: float = 0.15
    vector_ceiling: float = 0.5
    # Share of the query's keyword information (sum of idf) that counts as a full match.
    keyword_saturation: float = 0.6
    # Dialogue neighbours: the turn after a matching turn inherits `next_turn_weight` of its
    # score (answers follow questions), the turn before inherits `previous_turn_weight`.
    next_turn_weight: float = 0.5
    previous_turn_weight: float = 0.0
    neighbour_seeds: int = 20  # how many top-ranked messages pass score to their neighbours
    # Drop results whose relevance is under this share of the best result's (0 = off).
    relative_cutoff: float = 0.6

    def as_params(self) -> dict[str, object]:
        """Flat name -> value, for logs and MLflow."""
        return {f"preset.{k}": v for k, v in asdict(self).items()}

    def with_(self, **changes: object) -> RetrievalPreset:
        return replace(self, **changes)  # type: ignore[arg-type]


DEFAULT = RetrievalPreset(name="default")

PRESETS: dict[str, RetrievalPreset] = {
    "default": DEFAULT,
    "keyword_only": DEFAULT.with_(name="keyword_only", use_vector=False),
    "vector_only": DEFAULT.with_(name="vector_only", use_keyword=False),
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
