"""The LLM judge's settings: off by default, its endpoint borrowed from the extractor (else the
chat proxy's upstream) when it has none, a deadline well under the query's."""

from __future__ import annotations

import os

import pytest

from app.config import JudgeMode, SettingsError, load_settings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("PGRECALL_"):
            monkeypatch.delenv(name)


def test_off_by_default() -> None:
    settings = load_settings()
    assert settings.judge is JudgeMode.OFF
    assert settings.judge_candidates == 5 and settings.judge_cache_ttl_s == 86_400
    assert settings.judge_timeout_s <= settings.query_timeout_s / 2


def test_reuses_the_extractors_endpoint_and_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGRECALL_JUDGE", "llm")
    monkeypatch.setenv("PGRECALL_EXTRACTION_BASE_URL", "http://localhost:8001/v1/")
    monkeypatch.setenv("PGRECALL_EXTRACTION_API_KEY", "ek")
    monkeypatch.setenv("PGRECALL_EXTRACTION_MODEL", "small-model")
    monkeypatch.setenv("PGRECALL_CHAT_UPSTREAM_URL", "http://upstream/v1")
    endpoint = load_settings().judge_endpoint
    assert (endpoint.base_url, endpoint.api_key) == ("http://localhost:8001/v1", "ek")
    assert endpoint.model == "small-model"


def test_else_the_chat_proxys_upstream(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGRECALL_JUDGE", "llm")
    monkeypatch.setenv("PGRECALL_CHAT_UPSTREAM_URL", "http://upstream/v1")
    monkeypatch.setenv("PGRECALL_CHAT_UPSTREAM_KEY", "uk")
    endpoint = load_settings().judge_endpoint
    assert (endpoint.base_url, endpoint.api_key) == ("http://upstream/v1", "uk")


def test_its_own_endpoint_never_takes_anothers_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGRECALL_JUDGE", "llm")
    monkeypatch.setenv("PGRECALL_JUDGE_BASE_URL", "http://judge/v1")
    monkeypatch.setenv("PGRECALL_JUDGE_MODEL", "judge-model")
    monkeypatch.setenv("PGRECALL_EXTRACTION_API_KEY", "ek")
    endpoint = load_settings().judge_endpoint
    assert (endpoint.base_url, endpoint.api_key, endpoint.model) == (
        "http://judge/v1",
        None,
        "judge-model",
    )


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({}, "PGRECALL_JUDGE=llm needs an endpoint"),
        ({"PGRECALL_JUDGE_BASE_URL": "ftp://x"}, "PGRECALL_JUDGE_BASE_URL"),
        (
            {"PGRECALL_JUDGE_BASE_URL": "http://j/v1", "PGRECALL_JUDGE_TIMEOUT_S": "1.5"},
            "PGRECALL_JUDGE_TIMEOUT_S",
        ),
    ],
)
def test_bad_judge_settings_name_themselves(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], named: str
) -> None:
    monkeypatch.setenv("PGRECALL_JUDGE", "llm")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError, match=named):
        load_settings()
