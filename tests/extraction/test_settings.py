"""Extraction settings: off by default, and one clear line for each bad value."""

from __future__ import annotations

import os

import pytest

from app.config import ExtractionMode, SettingsError, load_settings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("PGRECALL_"):
            monkeypatch.delenv(name)


def test_off_by_default() -> None:
    settings = load_settings()
    assert settings.extraction is ExtractionMode.OFF
    assert settings.extraction_workers == 4 and settings.extraction_max_attempts == 5


def test_llm_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGRECALL_EXTRACTION", "llm")
    monkeypatch.setenv("PGRECALL_EXTRACTION_BASE_URL", "http://localhost:8001/v1/")
    monkeypatch.setenv("PGRECALL_EXTRACTION_USER_DAILY_TOKEN_CAP", "5000")
    settings = load_settings()
    assert settings.extraction is ExtractionMode.LLM
    assert settings.extraction_base_url == "http://localhost:8001/v1"
    assert settings.extraction_user_daily_token_cap == 5000


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"PGRECALL_EXTRACTION": "yes"}, "PGRECALL_EXTRACTION:"),
        ({"PGRECALL_EXTRACTION": "llm"}, "needs PGRECALL_EXTRACTION_API_KEY"),
        (
            {"PGRECALL_EXTRACTION": "llm", "PGRECALL_EXTRACTION_API_KEY": " "},
            "needs PGRECALL_EXTRACTION_API_KEY",
        ),
        ({"PGRECALL_EXTRACTION_BASE_URL": "localhost:8001"}, "PGRECALL_EXTRACTION_BASE_URL:"),
        ({"PGRECALL_EXTRACTION_JOB_TOKEN_CAP": "0"}, "PGRECALL_EXTRACTION_JOB_TOKEN_CAP:"),
        ({"PGRECALL_EXTRACTION_TIMEOUT_S": "0"}, "PGRECALL_EXTRACTION_TIMEOUT_S:"),
    ],
)
def test_bad_values_name_the_variable(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], message: str
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError, match=message):
        load_settings()


def test_the_worker_config_reads_the_extraction_settings_of_its_field_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from app.extraction.runtime import extraction_config

    monkeypatch.setenv("PGRECALL_EXTRACTION_LEASE_S", "42")
    monkeypatch.setenv("PGRECALL_EXTRACTION_JOB_TOKEN_CAP", "7000")
    config = extraction_config(load_settings())
    assert config.lease_s == 42.0 and config.job_token_cap == 7000
    assert config.batch_messages == 20 and config.workers == 4


def test_the_extractor_endpoint_is_read_from_its_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGRECALL_EXTRACTION_BASE_URL", "http://localhost:8001/v1/")
    monkeypatch.setenv("PGRECALL_EXTRACTION_API_KEY", "sk-test")
    monkeypatch.setenv("PGRECALL_EXTRACTION_MODEL", "small")
    endpoint = load_settings().extraction_endpoint
    assert (endpoint.api_key, endpoint.model) == ("sk-test", "small")
    assert endpoint.base_url is not None and endpoint.base_url.startswith("http://localhost:8001")
