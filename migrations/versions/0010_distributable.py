"""Keys Citus can distribute by user_id, and SET LOCAL for the transaction's scope.

Citus (docs/scaling.md) distributes the user tables by `user_id` and requires every primary key
and unique constraint of a distributed table to contain `user_id`, and every foreign key between
distributed tables to contain it too. On plain Postgres the wider keys change no query: every
statement already names the user with the id (tests/repositories/test_user_scope.py).

- Primary keys become `(user_id, id)` (`(user_id, message_id, ord)` for passages); the unique
  indexes on `supersedes_id` and on an extraction job's `message_id` gain `user_id` in front.
- Foreign keys become `(user_id, x) -> parent(user_id, id)`. The two that were
  `ON DELETE SET NULL` (a memory's source message, the version it supersedes) become NO ACTION:
  Citus refuses SET NULL on a key containing the distribution column. The app clears those
  links itself before deleting a message (ConversationRepository); purge deletes a user's
  memory items before their messages. The database still refuses a dangling link.
- `pgrecall_set_local(names, values)`: SET LOCAL of each pair, in one statement. app/db.py
  scopes every transaction with it. Settings made with set_config() stay on the coordinator of a
  Citus cluster; SET LOCAL is forwarded to the worker connections when
  `citus.propagate_set_commands` is 'local', which the function sets first when Citus is
  loaded. Names are quoted as identifiers and values as literals.

Revision ID: 0010_distributable
Revises: 0009_passages
Create Date: 2026-11-27
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0010_distributable"
down_revision: str | None = "0009_passages"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# (table, column, parent, ON DELETE before): each becomes (user_id, column) -> parent (user_id,
# id), SET NULL becoming NO ACTION. Names follow app/models/base.py's naming convention.
FKS = (
    ("messages", "conversation_id", "conversations", "CASCADE"),
    ("memory_items", "source_message_id", "messages", "SET NULL"),
    ("memory_items", "supersedes_id", "memory_items", "SET NULL"),
    ("extraction_jobs", "message_id", "messages", "CASCADE"),
    ("message_passages", "message_id", "messages", "CASCADE"),
)
OLD_PKS = {
    "conversations": "id",
    "messages": "id",
    "memory_items": "id",
    "extraction_jobs": "id",
    "message_passages": "message_id, ord",
}
NEW_PKS = {
    "conversations": "user_id, id",
    "messages": "user_id, id",
    "memory_items": "user_id, id",
    "extraction_jobs": "user_id, id",
    "message_passages": "user_id, message_id, ord",
}
# (index, table, old columns, new columns)
UNIQUE = (
    ("uq_memory_items_supersedes_id", "memory_items", "supersedes_id", "user_id, supersedes_id"),
    ("uq_extraction_jobs_message_id", "extraction_jobs", "message_id", "user_id, message_id"),
)

SET_LOCAL_FUNCTION = """
CREATE FUNCTION pgrecall_set_local(names text[], vals text[]) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
    i int;
BEGIN
    IF current_setting('citus.propagate_set_commands', true) IS NOT NULL THEN
        SET LOCAL citus.propagate_set_commands = 'local';
    END IF;
    FOR i IN 1 .. coalesce(array_length(names, 1), 0) LOOP
        EXECUTE format(
            'SET LOCAL %s = %L',
            (SELECT string_agg(quote_ident(part), '.')
               FROM unnest(string_to_array(names[i], '.')) AS part),
            vals[i]
        );
    END LOOP;
END
$fn$
"""


def _keys(distributable: bool) -> None:
    new, old = (1, 0) if distributable else (0, 1)
    for table, column, parent, _ in FKS:
        name = f"fk_{table}_user_id_{parent}" if old else f"fk_{table}_{column}_{parent}"
        op.execute(f"ALTER TABLE {table} DROP CONSTRAINT {name}")
    for table, columns in (NEW_PKS if new else OLD_PKS).items():
        op.execute(f"ALTER TABLE {table} DROP CONSTRAINT pk_{table}")
        op.execute(f"ALTER TABLE {table} ADD CONSTRAINT pk_{table} PRIMARY KEY ({columns})")
    for name, table, *columns in UNIQUE:
        op.execute(f"DROP INDEX {name}")
        op.execute(f"CREATE UNIQUE INDEX {name} ON {table} ({columns[new]})")
    for table, column, parent, action in FKS:
        if new:
            name, key, parent_key = (
                f"fk_{table}_user_id_{parent}",
                f"user_id, {column}",
                "user_id, id",
            )
            action = "NO ACTION" if action == "SET NULL" else action
        else:
            name, key, parent_key = f"fk_{table}_{column}_{parent}", column, "id"
        op.execute(
            f"ALTER TABLE {table} ADD CONSTRAINT {name} FOREIGN KEY ({key}) "
            f"REFERENCES {parent} ({parent_key}) ON DELETE {action}"
        )


def upgrade() -> None:
    _keys(distributable=True)
    op.execute(SET_LOCAL_FUNCTION)


def downgrade() -> None:
    op.execute("DROP FUNCTION pgrecall_set_local(text[], text[])")
    _keys(distributable=False)
