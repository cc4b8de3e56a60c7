"""docs/security.md shows the operator the same grants the code runs."""

from __future__ import annotations

from pathlib import Path

from app.roles import DEFAULT_APP_ROLE, USER_TABLES, grant_statements

DOC = Path(__file__).resolve().parent.parent / "docs" / "security.md"


def test_the_documented_grants_are_the_ones_the_code_runs() -> None:
    doc = DOC.read_text()
    for statement in grant_statements(DEFAULT_APP_ROLE):
        assert f"{statement};" in doc, statement


def test_the_documented_tables_are_the_protected_ones() -> None:
    doc = DOC.read_text()
    listed = ", ".join(f"`{t}`" for t in USER_TABLES)
    assert listed in doc.replace("\n", " ")
