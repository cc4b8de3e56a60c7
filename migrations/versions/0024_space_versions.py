"""A version on every shared space's search statistics, moved by every write of the space.

Issue 43. The query service keeps the memories of small shared spaces in memory
(app/services/query/space_cache.py) and scores them there instead of sending each space's
keyword, vector and row statements. What tells it that its copy is still the space's is
`search_stats.version`: one statement a query reads under row-level security (so only the
spaces the signed user may read), and a copy is used while the space's version is the one it
was read at.

- `search_stats.version bigint NOT NULL DEFAULT 0`. A space's row (`space:<id>`) gets a new
  value of the sequence `search_stats_version` at every INSERT and UPDATE of it (a BEFORE
  trigger): every keyword index write (index, reindex, unindex, bulk index) writes the row. A
  user's own rows keep 0 and pay only the trigger's WHEN test.
- An INSERT, DELETE, or UPDATE of a column a query reads (text, type, importance, times,
  validity, deletion, expiry, tags, vector, scope) of a space's memory touches its space's row
  in the same transaction (an AFTER trigger), so a vote, a supersession or a deletion that does
  not change the keyword index moves the version too. Columns no query reads (usage counts,
  metadata) do not.
- A space's memory belongs to no agent or run (every door writes it unscoped: app/api/spaces.py);
  a CHECK makes that a rule of the table, so a copy made for one member is the copy every member
  reads.

The sequence never hands out a value twice, so a space deleted and made again under its old id
gets versions its old copies never had. Where Citus is loaded the triggers are not made (the
copies are not used there: each space's statements route to its shard; docs/scaling.md).

Revision ID: 0024_space_versions
Revises: 0023_set_local_by_set_config
Create Date: 2026-12-07
"""

from collections.abc import Sequence

from alembic import op
from sqlalchemy import text

from app.roles import ADMIN_ROLE

revision: str = "0024_space_versions"
down_revision: str | None = "0023_set_local_by_set_config"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The columns of memory_items a query of a space reads (app/services/query/space_cache.py).
READ_COLUMNS = (
    "user_id, content, type, importance, created_at, source, source_message_id, tags, "
    "expires_at, deleted_at, valid_to, embedding, embedding_model, agent_id, run_id"
)

STATS_VERSION = """
CREATE FUNCTION pgrecall_space_stats_version() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    NEW.version := nextval('search_stats_version');
    RETURN NEW;
END
$fn$
"""

ITEMS_CHANGED = """
CREATE FUNCTION pgrecall_space_items_changed() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    IF TG_OP <> 'INSERT' AND OLD.user_id LIKE 'space:%' THEN
        UPDATE search_stats SET version = 0 WHERE user_id = OLD.user_id;
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.user_id LIKE 'space:%'
       AND (TG_OP = 'INSERT' OR NEW.user_id <> OLD.user_id) THEN
        UPDATE search_stats SET version = 0 WHERE user_id = NEW.user_id;
    END IF;
    RETURN NULL;
END
$fn$
"""


def _citus() -> bool:
    sql = "SELECT count(*) FROM pg_extension WHERE extname = 'citus'"
    return bool(op.get_bind().execute(text(sql)).scalar_one())


def upgrade() -> None:
    op.execute("ALTER TABLE search_stats ADD COLUMN version bigint NOT NULL DEFAULT 0")
    op.execute(
        "ALTER TABLE memory_items ADD CONSTRAINT ck_memory_items_space_unscoped CHECK "
        "(user_id NOT LIKE 'space:%' OR (agent_id IS NULL AND run_id IS NULL))"
    )
    if _citus():
        return
    op.execute("CREATE SEQUENCE search_stats_version")
    op.execute(f"GRANT USAGE ON SEQUENCE search_stats_version TO {ADMIN_ROLE}")
    op.execute(STATS_VERSION)
    op.execute(ITEMS_CHANGED)
    op.execute(
        "CREATE TRIGGER search_stats_space_version BEFORE INSERT OR UPDATE ON search_stats "
        "FOR EACH ROW WHEN (NEW.user_id LIKE 'space:%') "
        "EXECUTE FUNCTION pgrecall_space_stats_version()"
    )
    op.execute(
        "CREATE TRIGGER memory_items_space_insert AFTER INSERT ON memory_items "
        "FOR EACH ROW WHEN (NEW.user_id LIKE 'space:%') "
        "EXECUTE FUNCTION pgrecall_space_items_changed()"
    )
    op.execute(
        f"CREATE TRIGGER memory_items_space_update AFTER UPDATE OF {READ_COLUMNS} "
        "ON memory_items FOR EACH ROW "
        "WHEN (OLD.user_id LIKE 'space:%' OR NEW.user_id LIKE 'space:%') "
        "EXECUTE FUNCTION pgrecall_space_items_changed()"
    )
    op.execute(
        "CREATE TRIGGER memory_items_space_delete AFTER DELETE ON memory_items "
        "FOR EACH ROW WHEN (OLD.user_id LIKE 'space:%') "
        "EXECUTE FUNCTION pgrecall_space_items_changed()"
    )
    # The spaces' existing rows: versions of the sequence, as if each were written now.
    op.execute("UPDATE search_stats SET version = 0 WHERE user_id LIKE 'space:%'")


def downgrade() -> None:
    for trigger, table in (
        ("memory_items_space_delete", "memory_items"),
        ("memory_items_space_update", "memory_items"),
        ("memory_items_space_insert", "memory_items"),
        ("search_stats_space_version", "search_stats"),
    ):
        op.execute(f"DROP TRIGGER IF EXISTS {trigger} ON {table}")
    op.execute("DROP FUNCTION IF EXISTS pgrecall_space_items_changed()")
    op.execute("DROP FUNCTION IF EXISTS pgrecall_space_stats_version()")
    op.execute("DROP SEQUENCE IF EXISTS search_stats_version")
    op.execute("ALTER TABLE memory_items DROP CONSTRAINT ck_memory_items_space_unscoped")
    op.execute("ALTER TABLE search_stats DROP COLUMN version")
