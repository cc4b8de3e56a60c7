"""The layers the build enforces: import-linter's contracts (pyproject.toml, [tool.importlinter])
hold, they fail when a forbidden import is added, and no module of the project (app, eval,
bench, and the client's pgrecall in client/) takes part in an import cycle, lazy and
TYPE_CHECKING imports included."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
# Each package and the folder it is imported from.
SOURCES = {"app": ROOT, "eval": ROOT, "bench": ROOT, "pgrecall": ROOT / "client"}
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(root: Path, *path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=root,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(str(p) for p in path)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_contracts_hold() -> None:
    result = lint_imports(ROOT, *sorted(set(SOURCES.values())))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        # A service reaching up into the HTTP door.
        ("app/services/purge.py", "import app.http.deps", "Layers: doors > tools"),
        # A door running SQL itself instead of through a service.
        ("app/cli/keys.py", "import app.repositories.api_keys", "Only services run SQL"),
        # One door importing another.
        ("app/proxy/schemas.py", "import app.console.auth", "The doors do not import each other"),
        # The pure ranking code touching the database layer.
        ("app/retrieval/fusion.py", "import app.db", "app.retrieval is pure"),
        # The product importing its benchmark.
        ("app/services/users.py", "import bench.options", "The product does not import"),
        # The light client importing the server.
        ("pgrecall/types.py", "import app.schemas.common", "The client imports nothing"),
        # A door mounted on the app entering through the API's modules instead of app.http.
        ("app/proxy/routes.py", "import app.api.tools", "enter through app.http"),
        # The console deciding whose data a page shows with the API's caller rules.
        ("app/console/web.py", "import app.api.memories", "enter through app.http"),
        # A wire schema reaching into the ORM.
        ("app/schemas/memory.py", "import app.models.base", "Wire schemas do not import"),
        # A repository computing a ranking input.
        ("app/repositories/retrieval/keyword.py", "import app.retrieval.names", "Repositories run"),
        # The settings importing an adapter.
        ("app/config.py", "import app.adapters.embedder", "Settings do not import the adapters"),
        # The loop between folders issue 41 found (doctor -> citus -> doctor).
        ("app/citus/doctor.py", "import app.doctor.checks", "No loop between the folders"),
    ],
)
def test_a_forbidden_import_breaks_a_contract(
    tmp_path: Path, module: str, line: str, broken: str
) -> None:
    for package, folder in SOURCES.items():
        shutil.copytree(
            folder / package,
            tmp_path / package,
            ignore=shutil.ignore_patterns("__pycache__", "out"),
        )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / module
    target.write_text(target.read_text() + f"\n{line}  # noqa\n")
    result = lint_imports(tmp_path, tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"{broken}" in result.stdout.split("Broken contracts")[1], result.stdout


def import_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    modules = sorted(graph.modules)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for start in modules:
        if start in index:
            continue
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.find_modules_directly_imported_by(nxt)))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        cycles.append(sorted(component))
    return cycles


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for importer, imported in [("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d")]:
        graph.add_import(importer=importer, imported=imported)
    assert import_cycles(graph) == [["p.a", "p.b", "p.c"]]


def test_no_import_cycle_among_the_projects_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    for folder in set(SOURCES.values()):
        monkeypatch.syspath_prepend(str(folder))
    graph = grimp.build_graph(*SOURCES, cache_dir=None)
    assert {m.split(".")[0] for m in graph.modules} == set(SOURCES)
    assert len(graph.modules) > 150  # the whole project was read
    assert import_cycles(graph) == []


def test_the_bench_uses_public_names_only() -> None:
    """The bench measures the service through its public names: a private one (`_x`) may change
    without notice, and a bench that imports it pins it."""
    private = [
        f"{path.relative_to(ROOT)}:{node.lineno}: {alias.name}"
        for path in sorted((ROOT / "bench").rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "app"
        for alias in node.names
        if alias.name.startswith("_")
    ]
    assert private == []
