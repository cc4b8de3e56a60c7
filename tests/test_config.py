"""Settings: defaults, the PGRECALL_ environment, and one clear line for each bad value."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import SecretStr

from app.config import EmbeddingProvider, Settings, SettingsError, load_settings

ROOT = Path(__file__).resolve().parent.parent
PGRECALL = ROOT / ".venv" / "bin" / "pgrecall"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts from an environment without PGRECALL_ variables."""
    for name in list(os.environ):
        if name.startswith("PGRECALL_"):
            monkeypatch.delenv(name)


def test_defaults() -> None:
    settings = load_settings()
    assert settings.database_url is None and settings.embedded_database
    assert settings.redis_url is None
    assert settings.host == "127.0.0.1" and settings.port == 8000
    assert settings.data_dir == Path(".data")
    assert settings.embedding_provider is EmbeddingProvider.LOCAL
    assert settings.embedding_dimension == 384
    assert settings.token_budget == 1000
    assert settings.min_relevance == 0.3
    assert settings.max_results == 10
    assert settings.rate_limit_per_minute == 10
    assert settings.api_key is None and not settings.auth_enabled
    assert settings.log_level == "INFO"


def test_environment_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGRECALL_PORT", "9123")
    monkeypatch.setenv("PGRECALL_DATABASE_URL", "postgres://u:p@db:5432/mem")
    monkeypatch.setenv("PGRECALL_REDIS_URL", "redis://cache:6379/0")
    monkeypatch.setenv("PGRECALL_HOST", "0.0.0.0")
    monkeypatch.setenv("PGRECALL_API_KEY", "s3cret")
    monkeypatch.setenv("PGRECALL_LOG_LEVEL", "debug")
    monkeypatch.setenv("PGRECALL_EMBEDDING_PROVIDER", "openai")
    monkeypatch.setenv("PGRECALL_EMBEDDING_MODEL", "text-embedding-3-small")
    monkeypatch.setenv("PGRECALL_EMBEDDING_DIMENSION", "1536")
    settings = load_settings()
    assert settings.port == 9123
    # Normalised to the asyncpg driver.
    assert settings.database_url == "postgresql+asyncpg://u:p@db:5432/mem"
    assert settings.redis_url == "redis://cache:6379/0"
    assert settings.api_key == SecretStr("s3cret") and settings.auth_enabled
    assert "s3cret" not in repr(settings)
    assert settings.log_level == "DEBUG"
    assert settings.embedding_dimension == 1536


def test_override_beats_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGRECALL_PORT", "9000")
    assert load_settings(port=9001).port == 9001


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("PGRECALL_PORT", "abc"),
        ("PGRECALL_PORT", "70000"),
        ("PGRECALL_TOKEN_BUDGET", "0"),
        ("PGRECALL_MIN_RELEVANCE", "1.5"),
        ("PGRECALL_MAX_RESULTS", "0"),
        ("PGRECALL_DATABASE_URL", "mysql://x"),
        ("PGRECALL_REDIS_URL", "memcached://x"),
        ("PGRECALL_LOG_LEVEL", "loud"),
        ("PGRECALL_LOG_FORMAT", "xml"),
        ("PGRECALL_EMBEDDING_PROVIDER", "cohere"),
        ("PGRECALL_HOST", "0.0.0.0"),
        ("PGRECALL_EMBEDDING_DIMENSION", "1536"),
    ],
)
def test_invalid_value_names_the_variable_in_one_line(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as info:
        load_settings()
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("invalid setting ")
    assert name in message, message
    assert "Value error" not in message


def test_exposed_host_with_key_is_allowed() -> None:
    settings = Settings(host="0.0.0.0", api_key=SecretStr("k"))
    assert settings.host == "0.0.0.0"


def test_several_problems_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGRECALL_PORT", "abc")
    monkeypatch.setenv("PGRECALL_TOKEN_BUDGET", "0")
    with pytest.raises(SettingsError) as info:
        load_settings()
    message = str(info.value)
    assert "\n" not in message
    assert "PGRECALL_PORT" in message and "PGRECALL_TOKEN_BUDGET" in message


def _cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGRECALL_")}
    env.update(extra)
    return env


@pytest.mark.parametrize(
    ("extra", "args", "name"),
    [
        ({"PGRECALL_PORT": "abc"}, [], "PGRECALL_PORT"),
        ({}, ["--host", "0.0.0.0"], "PGRECALL_HOST"),
    ],
)
def test_serve_with_invalid_setting_exits_2_with_one_line(
    tmp_path: Path, extra: dict[str, str], args: list[str], name: str
) -> None:
    result = subprocess.run(
        [str(PGRECALL), "serve", *args],
        env=_cli_env(PGRECALL_DATA_DIR=str(tmp_path / "data"), **extra),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("pgrecall: invalid setting ")
    assert name in lines[0]
    assert "Traceback" not in result.stderr
    # Nothing was started: no database was created.
    assert not (tmp_path / "data" / "pg").exists()


def test_serve_port_option_must_be_a_number(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "app.cli", "serve", "--port", "abc"],
        cwd=ROOT,
        env=_cli_env(PGRECALL_DATA_DIR=str(tmp_path / "data")),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "--port" in result.stderr


@pytest.mark.parametrize("blank", ["", "   "])
def test_blank_keys_are_no_keys(monkeypatch: pytest.MonkeyPatch, blank: str) -> None:
    """Issue 10 finding 1: `PGRECALL_API_KEY=` must not bind 0.0.0.0 with auth off."""
    monkeypatch.setenv("PGRECALL_API_KEY", blank)
    monkeypatch.setenv("PGRECALL_ADMIN_API_KEY", blank)
    settings = load_settings()
    assert settings.api_key is None and settings.admin_api_key is None
    assert not settings.auth_enabled
    monkeypatch.setenv("PGRECALL_HOST", "0.0.0.0")
    with pytest.raises(SettingsError, match=r"PGRECALL_HOST: 0\.0\.0\.0 without PGRECALL_API_KEY"):
        load_settings()
    with pytest.raises(SettingsError, match="without PGRECALL_API_KEY"):
        load_settings(api_key=SecretStr(blank))
