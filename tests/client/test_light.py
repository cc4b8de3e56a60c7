"""The client is its own light distribution (client/pyproject.toml, `pip install ./client`).

- its metadata, built as pip builds it, declares httpx and pydantic and nothing else, and the
  adapters' frameworks only as the `langgraph` and `agents` extras;
- no module of it imports the server (app, eval, bench), read from the source;
- it imports with the server and every server-only dependency made unimportable (a meta-path
  hook in a fresh interpreter), the adapters with their frameworks;
- its modules import each other without a cycle;
- the server's wheel no longer carries it.
"""

from __future__ import annotations

import ast
import email.parser
import shutil
import subprocess
import sys
import textwrap
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from setuptools import find_packages

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "client"
PACKAGE = CLIENT / "pgrecall"
LIGHT = {"httpx", "pydantic"}
EXTRAS = {
    "langgraph": {"langgraph", "langgraph-checkpoint"},
    "agents": {"openai-agents"},
}
# The server and the repository's measurement code (bench/ once issue 23 moves it out of eval/).
SERVER_PACKAGES = {"app", "eval", "bench"}
CORE_MODULES = ["pgrecall", "pgrecall.client", "pgrecall.aio", "pgrecall.console", "pgrecall.types"]
ADAPTERS = ["pgrecall.langgraph_store", "pgrecall.agents_session"]


def built_metadata(tmp_path: Path) -> email.message.Message:
    """The client's METADATA as setuptools builds it for pip (on a copy: no egg-info here)."""
    source = tmp_path / "src"
    shutil.copytree(CLIENT, source, ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"))
    out = tmp_path / "meta"
    out.mkdir()
    hook = "import sys; from setuptools import build_meta as b; "
    hook += "print(b.prepare_metadata_for_build_wheel(sys.argv[1]))"
    done = subprocess.run(
        [sys.executable, "-c", hook, str(out)],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    folder = done.stdout.strip().splitlines()[-1]
    return email.parser.Parser().parsestr((out / folder / "METADATA").read_text())


def test_the_client_declares_httpx_and_pydantic_only(tmp_path: Path) -> None:
    meta = built_metadata(tmp_path)
    assert meta["Name"] == "pgrecall-client"
    requirements = [Requirement(r) for r in meta.get_all("Requires-Dist") or []]
    base = {canonicalize_name(r.name) for r in requirements if r.marker is None}
    assert base == LIGHT, f"the client must need httpx and pydantic only, declares {base}"
    assert set(meta.get_all("Provides-Extra") or []) == set(EXTRAS)
    for extra, wanted in EXTRAS.items():
        named = {
            canonicalize_name(r.name)
            for r in requirements
            if r.marker is not None and r.marker.evaluate({"extra": extra})
        }
        assert named == wanted, (extra, named)


def server_distributions() -> set[str]:
    """The distributions the server's pyproject.toml requires (its dependencies list)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {canonicalize_name(Requirement(r).name) for r in project["dependencies"]}


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every absolute import in the file, in functions and TYPE_CHECKING too,
    and of importlib.import_module / __import__ with a literal name."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None))
            in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append((node.lineno, node.args[0].value))
    return found


def _client_files() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_the_import_scan_sees_a_server_import(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from app.schemas import x\n"
        "def f():\n    import eval.harness\n    return __import__('app.main')\n"
        "import importlib\nimportlib.import_module('bench.drive')\n"
    )
    tops = {name.split(".")[0] for _, name in _imports(probe)}
    assert tops >= SERVER_PACKAGES


@pytest.mark.parametrize("path", _client_files(), ids=lambda p: p.relative_to(CLIENT).as_posix())
def test_no_client_module_imports_the_server(path: Path) -> None:
    found = [(line, name) for line, name in _imports(path) if name.split(".")[0] in SERVER_PACKAGES]
    assert found == [], f"{path.relative_to(ROOT)} imports the server: {found}"


def _closure(names: set[str]) -> set[str]:
    """Those distributions and everything they require, as installed here."""
    seen: set[str] = set()
    todo = [canonicalize_name(n) for n in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.distribution(name).requires or []
        except metadata.PackageNotFoundError:
            continue
        for line in requires:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(req.name))
    return seen


def blocked_modules(allowed: set[str]) -> set[str]:
    """app, eval and the top-level modules of every server dependency outside `allowed`'s
    dependency closure."""
    forbidden = server_distributions() - _closure(allowed)
    modules = set(SERVER_PACKAGES)
    for module, distributions in metadata.packages_distributions().items():
        if any(canonicalize_name(d) in forbidden for d in distributions):
            modules.add(module)
    return modules


HOOKED = """
import importlib, importlib.abc, sys
sys.path.insert(0, {client!r})
BLOCKED = set({blocked!r})

class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError("blocked server module: " + name)
        return None

sys.meta_path.insert(0, Refuse())
for name in {modules!r}:
    importlib.import_module(name)
loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
assert not loaded, loaded
print("imported", len({modules!r}))
"""


def run_hooked(modules: list[str], blocked: set[str]) -> subprocess.CompletedProcess[str]:
    source = HOOKED.format(client=str(CLIENT), blocked=sorted(blocked), modules=modules)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(source)],
        cwd=ROOT.parent,  # not the repository: nothing importable by accident
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_client_imports_without_the_server() -> None:
    blocked = blocked_modules(LIGHT)
    # The list is the server's: a wrong computation would make this test pass vacuously.
    assert {"app", "fastapi", "sqlalchemy", "asyncpg", "onnxruntime", "mlflow"} <= blocked
    assert not {"httpx", "pydantic", "pydantic_core"} & blocked
    done = run_hooked(CORE_MODULES, blocked)
    assert done.returncode == 0, done.stderr[-3000:]


def test_the_adapters_import_without_the_server() -> None:
    blocked = blocked_modules(LIGHT | {n for names in EXTRAS.values() for n in names})
    assert {"app", "eval", "sqlalchemy", "asyncpg", "onnxruntime", "mlflow"} <= blocked
    done = run_hooked(ADAPTERS, blocked)
    assert done.returncode == 0, done.stderr[-3000:]


def test_the_hook_refuses_a_server_import() -> None:
    done = run_hooked(["pgrecall.client", "app.config"], blocked_modules(LIGHT))
    assert done.returncode != 0 and "blocked server module: app" in done.stderr


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph (as a path), or None."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def client_graph() -> dict[str, set[str]]:
    """Which pgrecall module imports which (TYPE_CHECKING and in-function imports count)."""
    names = {
        ".".join(p.relative_to(CLIENT).with_suffix("").parts).removesuffix(".__init__")
        for p in _client_files()
    }
    graph: dict[str, set[str]] = {}
    for path in _client_files():
        module = ".".join(path.relative_to(CLIENT).with_suffix("").parts)
        module = module.removesuffix(".__init__")
        targets = {name for _, name in _imports(path)}
        graph[module] = {n for n in targets if n in names and n != module}
    return graph


def test_the_client_modules_import_without_cycles() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle(client_graph()) is None


def test_the_server_wheel_does_not_carry_the_client() -> None:
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    shipped = find_packages(str(ROOT), include=find["find"]["include"])
    assert "app" in shipped
    assert not [p for p in shipped if p.split(".")[0] == "pgrecall"]
