"""The messages branch of the vector statement when passages score messages (passage_weight > 0;
docs/retrieval.md): exact over all the user's messages and passages, or ANN re-scored."""

from __future__ import annotations

from app.repositories.search_index import Source
from app.vectors import QUERY_VECTOR

# A message's passage score: its best passage's cosine, or its own where it has none (a turn of
# one sentence). Read through the passages' primary key, one index probe per scored message.
_BEST_PASSAGE = (
    f"coalesce((SELECT max(1 - (p.embedding <=> {QUERY_VECTOR})) FROM message_passages AS p "
    "WHERE p.user_id = :user_id AND p.message_id = {id} AND p.embedding_model = :model), {own})"
)


# Typed: a bare `1 - :w` makes Postgres infer an integer parameter, and 0.7 arrives as 0.
_W = "CAST(:w AS float8)"


def passage_messages_sql(exact: bool, when_sql: str, *, rescore: bool = False) -> str:
    """The messages branch of the vector statement with passage scoring (see `vector`).

    rescore (exact only): the messages are found exactly by their own vectors and their
    passages re-score them, as on the ANN path, instead of scoring every passage of the user:
    for a user of few turns and many passages (app/services/query/arms.py)."""
    own = f"1 - (t.embedding <=> {QUERY_VECTOR})"
    scope = (
        f"t.user_id = :user_id AND t.embedding IS NOT NULL AND t.embedding_model = :model{when_sql}"
    )
    if exact and not rescore:
        # Every message and every passage of the user in one list, grouped per message: no
        # join, so no plan can pair each message with each passage (a nested loop is what a
        # just-imported user's missing statistics chose for a join: 50 ms instead of 3).
        # HAVING drops passages of messages outside the scope (time filter, model).
        rows = (
            f"SELECT t.id, {own} AS own, NULL::float8 AS part FROM messages AS t WHERE {scope} "
            f"UNION ALL SELECT p.message_id, NULL, 1 - (p.embedding <=> {QUERY_VECTOR}) "
            "FROM message_passages AS p "
            "WHERE p.user_id = :user_id AND p.embedding_model = :model"
        )
        inner = (
            f"SELECT u.id, (1 - {_W}) * max(u.own) + {_W} * coalesce(max(u.part), max(u.own)) "
            f"AS cosine FROM ({rows}) AS u GROUP BY u.id HAVING max(u.own) IS NOT NULL "
            "ORDER BY cosine DESC LIMIT :limit"
        )
    else:
        # The index (or, exact, the user's rows) finds the messages by their own vectors;
        # their passages re-score them.
        found = (
            f"SELECT t.id, {own} AS own FROM messages AS t WHERE {scope} "
            f"ORDER BY t.embedding <=> {QUERY_VECTOR} LIMIT :limit"
        )
        if exact:
            # `+ 0`: an order the ivfflat index cannot serve. The distance is computed once per
            # row and named: in the select list and the ORDER BY it would be computed twice.
            found = (
                "SELECT f.id, 1 - f.d AS own FROM (SELECT t.id, "
                f"(t.embedding <=> {QUERY_VECTOR}) + 0 AS d FROM messages AS t WHERE {scope} "
                "ORDER BY d LIMIT :limit) AS f"
            )
        inner = (
            f"SELECT a.id, (1 - {_W}) * a.own + {_W} * "
            f"{_BEST_PASSAGE.format(id='a.id', own='a.own')} AS cosine FROM ({found}) AS a"
        )
    return (
        f"(SELECT {int(Source.MESSAGE)} AS source, c.id, c.cosine "
        f"FROM ({inner}) AS c ORDER BY c.cosine DESC)"
    )
