"""docs/security.md shows the operator the same grants the code runs."""

from __future__ import annotations

from pathlib import Path

from app.roles import ADMIN_ROLE, DEFAULT_APP_ROLE, USER_TABLES, grant_statements

DOC = Path(__file__).resolve().parent.parent / "docs" / "security.md"


def test_the_documented_grants_are_the_ones_the_code_runs() -> None:
    doc = DOC.read_text()
    for statement in grant_statements(DEFAULT_APP_ROLE):
        assert f"{statement};" in doc, statement


def test_the_documented_tables_are_the_protected_ones() -> None:
    doc = DOC.read_text()
    listed = ", ".join(f"`{t}`" for t in USER_TABLES)
    assert listed in doc.replace("\n", " ")


ROOT = DOC.parent.parent


def test_the_compose_stack_serves_as_the_application_role() -> None:
    """docker-compose.yml: requests as the role RLS binds, migrations as the owner."""
    compose = (ROOT / "docker-compose.yml").read_text()
    init = (ROOT / "deploy" / "postgres-init" / "01-roles.sh").read_text()
    assert f"PGRECALL_DATABASE_URL: postgresql://{DEFAULT_APP_ROLE}:" in compose
    assert "PGRECALL_MIGRATION_DATABASE_URL: postgresql://pgrecall_owner:" in compose
    assert f"PGRECALL_ADMIN_DATABASE_URL: postgresql://{ADMIN_ROLE}:" in compose
    assert "./deploy/postgres-init:/docker-entrypoint-initdb.d" in compose
    created = init.split(f"CREATE ROLE {DEFAULT_APP_ROLE} ", 1)[1].split(";", 1)[0]
    admin = init.split(f"CREATE ROLE {ADMIN_ROLE} ", 1)[1].split(";", 1)[0]
    for attribute in ("NOSUPERUSER", "NOBYPASSRLS", "NOCREATEROLE"):
        assert attribute in created and attribute in admin
    assert "CREATE DATABASE pgrecall OWNER pgrecall_owner" in init
