"""The question model's fit (eval.fit_question._fit): numpy only, on synthetic data where the
truth is known."""

from __future__ import annotations

import numpy as np

from eval.fit_question import _fit


def data(seed: int = 45) -> tuple[np.ndarray, np.ndarray]:
    """y depends on +x0 and -x1; x2 is noise."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(2000, 3))
    p = 1.0 / (1.0 + np.exp(-(2.0 * x[:, 0] - 1.5 * x[:, 1])))
    return x, (rng.random(2000) < p).astype(float)


def test_an_unconstrained_fit_finds_both_signs() -> None:
    x, y = data()
    w = _fit(x, y)
    assert w[0] > 1.5 and w[1] < -1.0 and abs(w[2]) < 0.2


def test_a_forbidden_sign_is_held_at_zero_and_the_rest_refitted() -> None:
    x, y = data()
    w = _fit(x, y, signs=[1, 1, 0])  # x1's weight may not be negative
    assert w[1] == 0.0 and w[0] > 1.0
    held = _fit(x, y, held=[0])
    assert held[0] == 0.0 and held[1] < -0.5
