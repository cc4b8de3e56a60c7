"""app/vectors.py: the text form gives back every float32 exactly; halfvec's binary form."""

from __future__ import annotations

import struct

import numpy as np

from app.vectors import encode_halfvec, vector_literal


def test_the_text_form_round_trips_every_float32() -> None:
    rng = np.random.default_rng(7)
    for vector in (
        rng.standard_normal(384).astype(np.float32),
        np.array([1e-38, -3.4e38, 0.0, 1.0, 0.1, 1 / 3], dtype=np.float32),
        [0.25, -0.5],
    ):
        text = vector_literal(vector)
        assert text.startswith("[") and text.endswith("]") and " " not in text
        parsed = np.array([np.float32(x) for x in text[1:-1].split(",")], dtype=np.float32)
        np.testing.assert_array_equal(parsed, np.asarray(vector, dtype=np.float32))


def test_halfvec_binary_form_is_the_dimension_then_big_endian_halves() -> None:
    """What pgvector's halfvec_recv reads (COPY): int16 dimension, int16 unused, float16s."""
    encoded = encode_halfvec(np.array([1.0, -2.0, 0.1], dtype=np.float32))
    assert encoded[:4] == struct.pack(">HH", 3, 0)
    assert encoded[4:] == np.array([1.0, -2.0, 0.1], dtype=">f2").tobytes()
    halves = np.frombuffer(encoded[4:], dtype=">f2").astype(np.float32)
    np.testing.assert_array_equal(halves, np.float16([1.0, -2.0, 0.1]).astype(np.float32))
