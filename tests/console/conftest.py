"""The console served for real: the app on a loopback port (uvicorn in a thread), the shared
Postgres and Redis, a real MLflow store, and one headless Chromium (Debian's chromium and
chromium-driver, driven by Selenium; nothing is downloaded: the driver path is explicit and
Selenium Manager runs offline)."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import uvicorn
from pydantic import SecretStr

from app.adapters.embedder import LocalEmbedder
from app.embedded import EmbeddedPostgres
from app.main import create_app
from eval.metrics import Summary
from eval.report import log_to_mlflow
from tests.redis_server import RedisServer
from tests.served import free_port
from tests.servers import app_settings

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "console"
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ADMIN_KEY = "console-admin-key-0123456789"
SERVICE_KEY = "console-service-key-0123456789"
RECALL_AT_5 = 0.8765
PRECISION_AT_5 = 0.7654


@dataclass
class Console:
    base: str
    mlflow_uri: str

    def url(self, path: str) -> str:
        return f"{self.base}{path}"

    def api(self) -> httpx.Client:
        """The service's HTTP API (admin key) on the same server, to seed and to check."""
        return httpx.Client(
            base_url=self.base, headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=30
        )


@pytest.fixture(scope="module")
def mlflow_store() -> Iterator[str]:
    """A real MLflow store with one evaluation run, logged by the eval's own function."""
    directory = Path(tempfile.mkdtemp(prefix="pgr-console-mlflow-"))
    uri = f"sqlite:///{directory / 'mlflow.db'}"
    log_to_mlflow(
        experiment="pgrecall-eval-memory",
        run_name="memory-default-console-test",
        params={"dataset": "memory", "preset.name": "default", "git_commit": "0123456789abcdef"},
        summary=Summary(overall={"recall@5": RECALL_AT_5, "precision@5": PRECISION_AT_5}),
        artifacts=[],
        tracking_uri=uri,
    )
    yield uri
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def console(
    pg: EmbeddedPostgres, redis_srv: RedisServer, embedder: LocalEmbedder, mlflow_store: str
) -> Iterator[Console]:
    """The app with an admin key, served on a loopback port for the browser."""
    settings = app_settings(
        pg,
        redis_srv.url,
        api_key=SecretStr(SERVICE_KEY),
        admin_api_key=SecretStr(ADMIN_KEY),
        MLFLOW_TRACKING_URI=mlflow_store,
    )
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(settings, embedder=embedder),
            host="127.0.0.1",
            port=port,
            log_level="warning",
            lifespan="on",
        )
    )
    thread = threading.Thread(target=server.run, name="console-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            pytest.fail("the console server did not start")
        time.sleep(0.05)
    try:
        yield Console(f"http://127.0.0.1:{port}", mlflow_store)
    finally:
        server.should_exit = True
        thread.join(30)


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """One headless Chromium for the module."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.fail(
            "needs the Debian packages chromium and chromium-driver (make test installs them)"
        )
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must never download a browser or driver
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1440,1000",
        "--no-first-run",
        "--disable-extensions",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def screenshot(driver: object, name: str) -> Path:
    """Save the page as a test artifact (test-artifacts/console/, not committed)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    driver.save_screenshot(str(path))  # type: ignore[attr-defined]
    return path
