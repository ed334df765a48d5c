#!/bin/bash
# Instructions a PostgreSQL backend spends in the relay's claim cycles, counted by callgrind:
# exact and repeatable (within about 0.3 %), where wall time on a loaded 2-core machine
# spreads by 10-40 % between runs. For comparing builds of the cycle function's SQL.
#
#   examples/benchmark/callgrind.sh BIN [BIN...]
#
# Each BIN is an `outbox-relay` binary (for instance target/release/outbox-relay, copied
# aside per build). The script makes a scratch PostgreSQL cluster in $CG (default
# /tmp/outbox-callgrind, port $PORT, default 5499), migrates two databases per BIN with it
# (so a build with a migration of its own counts on its own schema), fills them with
# $ROWS pending rows (default 100,000; `cgn` without keys, `cgk` round robin over 1,000 keys,
# as `examples/claim_plans.rs` fills them), then, with the server stopped, runs
# `postgres --single` under callgrind on a fresh copy of the data for each database and
# build: a procedure calls the cycle function $CYCLES times (default 100), each call acking
# the call before's claims (marking them delivered) and claiming 64 rows in key runs of up
# to $RUN (default 8), and commits after each. Only the CALL is counted
# (--toggle-collect=ExecuteCallStmt); $CG/callgrind.<db>.<function> is kept for
# callgrind_annotate.
#
# $SETUP, when set, is SQL run in every database after the migration: a schema variant
# counted with the same build (an index a build before a migration still had, say).
#
# Needs valgrind and PostgreSQL 15's server binaries ($PGBIN, default
# /usr/lib/postgresql/15/bin). Run as root (the cluster runs as user postgres) or as the
# user that should own the cluster. It prints one line per build:
#   <function> keyless <instructions> keyed <instructions> keyed/keyless <ratio>
set -euo pipefail
CG=${CG:-/tmp/outbox-callgrind}
PORT=${PORT:-5499}
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
ROWS=${ROWS:-100000}
CYCLES=${CYCLES:-100}
RUN=${RUN:-8}
[ $# -ge 1 ] || { echo "usage: $0 OUTBOX_RELAY_BINARY..." >&2; exit 2; }
command -v valgrind > /dev/null || { echo "callgrind.sh: valgrind is not installed" >&2; exit 1; }
[ -x "$PGBIN/postgres" ] || { echo "callgrind.sh: no $PGBIN/postgres (set PGBIN)" >&2; exit 1; }

as_owner() { if [ "$(id -u)" = 0 ]; then su postgres -c "$1"; else bash -c "$1"; fi; }
sql() { psql -h 127.0.0.1 -p "$PORT" -U postgres -v ON_ERROR_STOP=1 -q "$@"; }

rm -rf "$CG"
mkdir -p "$CG"
[ "$(id -u)" = 0 ] && chown postgres "$CG"
as_owner "$PGBIN/initdb -D $CG/data --locale=C.UTF-8 -A trust -U postgres" > "$CG/initdb.log"
cat >> "$CG/data/postgresql.conf" <<CONF
port = $PORT
listen_addresses = '127.0.0.1'
unix_socket_directories = '$CG'
autovacuum = off
shared_buffers = 512MB
jit = off
CONF
as_owner "$PGBIN/pg_ctl -D $CG/data -l $CG/server.log -w start" > /dev/null
trap 'as_owner "$PGBIN/pg_ctl -D $CG/data -m fast stop" > /dev/null 2>&1 || true' EXIT

functions() {
    sql -d "$1" -Atc "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                      WHERE n.nspname = 'bench' AND p.proname LIKE '%\\_cycle\\_%' ORDER BY 1"
}

declare -a FNS=()
i=0
for bin in "$@"; do
    for kind in cgn cgk; do
        db=${kind}_$i
        sql -d postgres -c "CREATE DATABASE $db"
        cat > "$CG/$db.toml" <<TOML
database_url = "postgres://postgres@127.0.0.1:$PORT/$db"
schema = "bench"
[[lanes]]
lane = "l"
target = "sink"
sink = { kind = "log" }
TOML
        "$bin" --config "$CG/$db.toml" migrate > /dev/null
        [ -z "${SETUP:-}" ] || sql -d $db -c "$SETUP"
        fn=$(functions "$db" | head -1)
        [ -n "$fn" ] || { echo "callgrind.sh: $bin made no cycle function" >&2; exit 1; }
        FNS[$i]=$fn
        if [ $kind = cgk ]; then key="'k' || (i % 1000)"; head="i <= 1000"; else key=NULL; head=true; fi
        t=$(sql -d $db -Atc "SELECT format('%I.%I', schemaname, tablename) FROM pg_tables
                             WHERE schemaname = 'bench' AND tablename LIKE '%messages'")
        sql -d $db <<SQL
BEGIN;
-- The deferred check_head trigger would leave every unmarked row unmarked: skipping it
-- writes the same rows (as claim_plans' fill).
SET LOCAL session_replication_role = replica;
INSERT INTO $t (outbox_id, lane, target, payload, headers, ordering_key, status,
                attempt_count, max_attempts, available_at, created_at, updated_at, key_head)
SELECT gen_random_uuid(), 'l', 'sink', jsonb_build_object('i', i), '{}', $key,
       'pending', 0, 5, ts, ts, ts, $head
FROM generate_series(1, $ROWS::int8) AS i,
     LATERAL (SELECT now() - interval '1 hour' + i * interval '1 millisecond') AS n(ts);
COMMIT;
VACUUM ANALYZE $t;
CREATE PROCEDURE bench.loop_$fn(p_n int8) LANGUAGE plpgsql AS \$\$
DECLARE ids uuid[] := '{}'; tokens uuid[] := '{}';
BEGIN
  FOR c IN 0..p_n - 1 LOOP
    SELECT coalesce(array_agg(x.outbox_id) FILTER (WHERE x.outbox_id IS NOT NULL), '{}'),
           coalesce(array_agg(x.claim_token) FILTER (WHERE x.outbox_id IS NOT NULL), '{}')
    INTO ids, tokens
    FROM bench.$fn(NULL, 'l', 'sink', 64, 60000, 'callgrind', ids, tokens, false, true, $RUN,
                   false) x;
    COMMIT;
  END LOOP;
END \$\$;
SQL
        sql -d $db -c CHECKPOINT
    done
    i=$((i + 1))
done
as_owner "$PGBIN/pg_ctl -D $CG/data -w stop" > /dev/null
trap - EXIT
cp -a "$CG/data" "$CG/base"

# count DB FUNCTION: the instructions of one CALL on a fresh copy of the filled cluster.
count() {
    local run="$CG/run.$1.$2" out="$CG/callgrind.$1.$2"
    rm -rf "$run"
    cp -a "$CG/base" "$run"
    [ "$(id -u)" = 0 ] && chown -R postgres "$run"
    echo "CALL bench.loop_$2($CYCLES);" > "$CG/call.$1.$2.sql"
    chmod 644 "$CG/call.$1.$2.sql"
    as_owner "valgrind --tool=callgrind --toggle-collect=ExecuteCallStmt \
        --callgrind-out-file=$out $PGBIN/postgres --single -D $run $1 < $CG/call.$1.$2.sql" \
        > "$CG/run.$1.$2.log" 2>&1
    if grep -q ERROR "$CG/run.$1.$2.log"; then
        echo "callgrind.sh: $1 $2 failed:" >&2
        grep ERROR "$CG/run.$1.$2.log" >&2
        exit 1
    fi
    grep '^summary:' "$out" | awk '{print $2}'
    rm -rf "$run"
}

for i in "${!FNS[@]}"; do
    fn=${FNS[$i]}
    n=$(count cgn_$i "$fn")
    k=$(count cgk_$i "$fn")
    awk -v f="$fn" -v n="$n" -v k="$k" \
        'BEGIN { printf "%s keyless %d keyed %d keyed/keyless %.3f\n", f, n, k, k / n }'
done
