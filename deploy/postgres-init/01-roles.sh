#!/bin/bash
# Runs once, when the compose stack's Postgres volume is first initialised (as the superuser).
# Creates the three roles of docs/security.md: the owner (migrates, owns the tables), the
# service's role (no superuser, no BYPASSRLS, owns nothing), so row-level security binds the API,
# and the admin role (admin work across users; the only role that reads the scope key).
set -euo pipefail

psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres \
  -v owner_pw="$PGRECALL_OWNER_PASSWORD" -v app_pw="$PGRECALL_APP_PASSWORD" \
  -v admin_pw="$PGRECALL_ADMIN_DB_PASSWORD" <<'SQL'
CREATE ROLE pgrecall_owner LOGIN PASSWORD :'owner_pw';
CREATE ROLE pgrecall_app LOGIN PASSWORD :'app_pw'
  NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE NOREPLICATION NOINHERIT;
CREATE ROLE pgrecall_admin LOGIN PASSWORD :'admin_pw'
  NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE NOREPLICATION NOINHERIT;
GRANT pgrecall_admin TO pgrecall_owner;
CREATE DATABASE pgrecall OWNER pgrecall_owner;
SQL

# pgvector is not a trusted extension: the superuser creates it in the new database.
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname pgrecall \
  -c "CREATE EXTENSION IF NOT EXISTS vector;"
