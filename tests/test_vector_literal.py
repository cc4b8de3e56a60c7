"""vector_literal: pgvector's text form gives back every float32 exactly."""

from __future__ import annotations

import numpy as np
import pytest

from app.vectors import decode_halfvec, encode_halfvec, vector_literal


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


def test_halfvecs_binary_form_decodes_to_the_stored_values() -> None:
    """decode_halfvec reads what encode_halfvec (COPY's form, and halfvec_send's) writes: each
    value rounded to half precision once, as Postgres stores it; a short buffer is refused."""
    rng = np.random.default_rng(7)
    vector = rng.standard_normal(384).astype(np.float32)
    decoded = decode_halfvec(encode_halfvec(vector))
    assert decoded.dtype == np.float32 and decoded.shape == (384,)
    np.testing.assert_array_equal(decoded, vector.astype(np.float16).astype(np.float32))
    with pytest.raises(ValueError, match="384 dimensions"):
        decode_halfvec(encode_halfvec(vector)[:-2])
