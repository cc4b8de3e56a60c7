"""How vectors are stored and sent: pgvector's `halfvec` (migration 0017_halfvec_covering).

Every embedding column (messages, message_passages, memory_items) is `halfvec(n)`: two bytes
per dimension instead of four. Half precision keeps about three significant digits of each
value, which moved none of `make eval`'s and `make eval-locomo`'s figures at four decimals
(docs/performance.md, "Half-precision vectors and index-only exact search"), and every
statement reads half the bytes: the exact path's scan, the ANN indexes' lists, the shared
buffers they occupy.

Stored vectors come back the same way, as halfvec's binary form (`stored_vector` in a SELECT,
`decode_halfvec`: float32 without a Python float per value, which `real[]` makes; the topic
links' eight vectors per query cost 1.098x of the service's CPU as `real[]` and 1.04x so,
`python -m bench.topics`, docs/retrieval.md "Newer wins a near tie").
The query path sends the query vector as a `real[]` bind (`query_vector`, cast with
`QUERY_VECTOR`: Postgres rounds each value to half precision): asyncpg encodes the array in
binary, checking every value in Python, about 0.15 ms of the client's CPU for 384 values
(2026-12-07: a prepared `SELECT cardinality(CAST($1 AS real[]))`, 2,000 calls, three rounds,
200 µs per call with 384 values against 55 µs with one); the text form costs about as much.
Other raw SQL sends vectors as text (`vector_literal`, arrays of them unnested and cast to
halfvec), and COPY sends halfvec's binary form (`encode_halfvec`). Python keeps float32 arrays
throughout: the ORM's column type (app/models/base.py, `HalfVec`) reads a stored vector back as
one.

Up to COVERING_MAX_DIMENSION the migration also gives messages and passages a covering index,
`(user_id, embedding_model) INCLUDE (id, embedding)`: the exact path scores a user's vectors
by an index-only scan of consecutive index entries instead of one heap row per vector. A btree
entry holds at most about 2.7 kB, so wider vectors (1536 for text-embedding-3-small) get no
such index and are read from the table as before.
"""

from __future__ import annotations

import functools
import struct
from typing import Any

import numpy as np

# The widest vector a covering btree entry holds: 2 bytes per dimension plus the halfvec
# header, a user id of up to 255 bytes, a model name of up to 100 and the id, within the
# 2,704-byte limit of an 8 kB page's btree entry (1024: about 2.45 kB at the worst).
COVERING_MAX_DIMENSION = 1024


# The query vector in raw SQL, bound as `query_vector(...)`. A scalar subquery, so the cast is
# made once per statement (an InitPlan) also in a generic plan, where a bare cast of the bind
# would run on every row: 6 ms instead of 1.6 for a small user's exact statement. An index
# scan takes the InitPlan's value as its ORDER BY operand like a bind.
QUERY_VECTOR = "(SELECT CAST(CAST(:q AS real[]) AS halfvec))"


def query_vector(vector: Any) -> list[float]:
    """The bind of QUERY_VECTOR: the float32 values (exact as Python floats)."""
    return np.asarray(vector, dtype=np.float32).ravel().tolist()  # type: ignore[no-any-return]


@functools.lru_cache(maxsize=8)
def _vector_format(dimension: int) -> str:
    return "[" + ",".join(["%.9g"] * dimension) + "]"


def vector_literal(vector: Any) -> str:
    """pgvector's text form of a vector, for `CAST(:param AS halfvec)` in raw SQL. Nine
    significant digits give back every float32 exactly, so the rounding to half precision is
    the server's alone; one %-format of the whole list costs a third of repr() per value
    (0.1 ms vs 0.3 per query)."""
    values = np.asarray(vector, dtype=np.float32).ravel().tolist()
    return _vector_format(len(values)) % tuple(values)


def encode_halfvec(value: Any) -> bytes:
    """halfvec's binary wire format (COPY): dimension, unused, big-endian float16 values."""
    array = np.asarray(value, dtype=">f2").ravel()
    return struct.pack(">HH", array.shape[0], 0) + array.tobytes()


# A stored vector in a SELECT list, as halfvec's binary form (bytea): `decode_halfvec` reads it.
def stored_vector(column: str) -> str:
    return f"halfvec_send({column})"


def decode_halfvec(data: bytes) -> np.ndarray[Any, np.dtype[np.float32]]:
    """A float32 array of halfvec's binary form (`encode_halfvec`'s): the exact values stored."""
    (dimension,) = struct.unpack_from(">H", data)
    if len(data) != 4 + 2 * dimension:
        raise ValueError(f"a halfvec of {dimension} dimensions in {len(data)} bytes")
    return np.frombuffer(data, dtype=">f2", offset=4).astype(np.float32)
