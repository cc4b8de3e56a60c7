"""eval/, bench/ and scripts/ talk to the service only through the project's client
(`pgrecall.client`).

An AST scan of every Python module there: importing an HTTP client library (httpx, requests,
aiohttp, urllib3, httpcore, urllib.request, http.client), directly or by name through
importlib / __import__, is refused. Servers the scripts start (uvicorn) and free-port probes
(socket.bind) are not HTTP clients. A benchmark that needs something the client lacks adds it
to the client (typed and tested in tests/client/), as health(), max_connections and
client.console were.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("eval", "bench", "scripts")
FORBIDDEN = (
    "aiohttp",
    "http.client",
    "httpcore",
    "httpx",
    "pycurl",
    "requests",
    "urllib.request",
    "urllib3",
)


def _forbidden(name: str) -> bool:
    return any(name == f or name.startswith(f + ".") for f in FORBIDDEN)


def http_imports(source: str) -> list[tuple[int, str]]:
    """(line, module) of every HTTP client library the module imports."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif (
            isinstance(node, ast.Call)
            and (
                (isinstance(node.func, ast.Name) and node.func.id == "__import__")
                or (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
            )
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names = [node.args[0].value]
        found += [(node.lineno, name) for name in names if _forbidden(name)]
    return found


def _modules() -> list[Path]:
    return sorted(p for folder in SCANNED for p in (ROOT / folder).rglob("*.py"))


def test_the_scan_sees_every_way_of_importing_an_http_client() -> None:
    caught = [
        "import httpx",
        "import httpx as h",
        "from httpx import AsyncClient",
        "import requests.adapters",
        "import urllib.request",
        "from urllib import request",
        "from http import client",
        "import aiohttp",
        "import importlib\nimportlib.import_module('httpx')",
        "__import__('requests')",
        "def f():\n    import httpx\n    return httpx",
    ]
    for source in caught:
        assert http_imports(source), source
    allowed = [
        "import urllib.parse",
        "from urllib.parse import urlencode",
        "from http import HTTPStatus",
        "import socket",
        "import uvicorn",
        "from pgrecall.client import AsyncClient",
        "from . import httpx_notes",
    ]
    for source in allowed:
        assert http_imports(source) == [], source


def test_the_scan_covers_the_benchmarks() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in _modules()}
    assert {
        "bench/drive.py",
        "bench/run.py",
        "bench/real.py",
        "bench/fresh.py",
        "bench/server.py",
        "eval/harness.py",
        "scripts/bench_console.py",
        "scripts/bench_extraction_append.py",
        "scripts/bench_fairness.py",
    } <= names


@pytest.mark.parametrize("module", _modules(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_http_code_but_the_client(module: Path) -> None:
    found = http_imports(module.read_text())
    assert found == [], (
        f"{module.relative_to(ROOT)} imports an HTTP client {found}: call the service through "
        "pgrecall.client (add what it lacks there, with a test in tests/client/)"
    )
