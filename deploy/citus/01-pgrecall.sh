#!/bin/bash
# Runs once on every node of docker-compose.citus.yml, when its volume is first initialised (as
# the superuser): the three roles of docs/security.md, the pgrecall database (owned by the owner
# role: on PostgreSQL 15+ only it may create the tables in `public`), and in it the citus
# and vector extensions. Every node needs both extensions in that database before the
# coordinator adds the workers; pgvector is not a trusted extension, so the superuser creates
# it here and the owner's migrations find it installed (they never create it then: on Citus,
# even CREATE EXTENSION IF NOT EXISTS is forwarded to the workers and needs their superuser).
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

psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname pgrecall <<'SQL'
CREATE EXTENSION citus;
CREATE EXTENSION vector;
SQL
