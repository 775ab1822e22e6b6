#!/usr/bin/env bash
# Benchmark of the dashboard's transaction list with one million transactions (issue 24: p99
# under 100 ms, both stores), run by hand; figures go to docs/PERFORMANCE.md.
#
# For each store asked for: a fresh database, one transaction created through the real server
# (`serve --demo`, then POST /initialize with a 2.8 KB two-item body), that row copied in SQL
# --count times for the demo provider and --other-count times for a second provider
# (`host-http/examples/dashboard_bench.rs seed`), then ~300 timed calls of the store's
# `list_transactions` per scenario (`... time`: p50/p95/p99/max), then each scenario's query
# plan (`... plans`: EXPLAIN QUERY PLAN on SQLite, EXPLAIN (ANALYZE, BUFFERS) on PostgreSQL).
#
# Usage: scripts/dashboard-bench.sh [--store sqlite|postgres|both] [--pg URL]
#            [--count N=1000000] [--other-count N=100000] [--calls N=300] [--budget-secs S=30]
#            [--keep]
#   --pg      a PostgreSQL server where the script may create and drop a database
#             (default postgres://postgres@127.0.0.1:5432/postgres)
#   --budget  a scenario stops after S seconds of timed calls (at least 5 calls), so that
#             scenarios of several seconds a call do not take an hour
#   --keep    keep the databases (the SQLite file, the PostgreSQL database) and print where
# Disk: about 6 GB for the SQLite file and 2.5 GB for PostgreSQL at 1.1 million rows.
# Needs: curl, python3; psql for PostgreSQL. Honours CARGO_TARGET_DIR.
set -euo pipefail

STORE="both"
PG="postgres://postgres@127.0.0.1:5432/postgres"
COUNT=1000000
OTHER=100000
CALLS=300
BUDGET=30
KEEP=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --store) STORE="$2"; shift 2 ;;
        --pg) PG="$2"; shift 2 ;;
        --count) COUNT="$2"; shift 2 ;;
        --other-count) OTHER="$2"; shift 2 ;;
        --calls) CALLS="$2"; shift 2 ;;
        --budget-secs) BUDGET="$2"; shift 2 ;;
        --keep) KEEP=1; shift ;;
        -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done
case "$STORE" in
    sqlite|postgres|both) ;;
    *) echo "--store takes sqlite, postgres or both" >&2; exit 2 ;;
esac

PORT="${BENCH_PORT:-18097}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="$(mktemp -d)"
SERVER_PID=""
PG_DB="dashbench_$$"
PG_CREATED=0

stop_server() {
    if [[ -n "$SERVER_PID" ]]; then
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
        SERVER_PID=""
    fi
}
cleanup() {
    stop_server
    if [[ "$KEEP" == 1 ]]; then
        echo "kept: $WORK (SQLite), database $PG_DB (PostgreSQL, if made)" >&2
        return
    fi
    if [[ "$PG_CREATED" == 1 ]]; then
        psql "$PG" -qc "DROP DATABASE IF EXISTS $PG_DB WITH (FORCE)" >/dev/null 2>&1 || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

for tool in curl python3; do
    command -v "$tool" >/dev/null || { echo "$tool not found" >&2; exit 1; }
done

echo "building (release): checkout-server and the dashboard_bench example..." >&2
cargo build --release --locked -p host-http --bin checkout-server --example dashboard_bench \
    --manifest-path "$ROOT/Cargo.toml" >&2
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}/release"
BIN="$TARGET/checkout-server"
BENCH="$TARGET/examples/dashboard_bench"

# The creation body of scripts/load.sh: two items, about 2.8 KB.
BODY="$(python3 "$ROOT/scripts/load-body.py")"

first_transaction() { # db: starts the server on db, creates one transaction, stops; sets PROVIDER
    local db="$1"
    "$BIN" serve --db "$db" --listen "127.0.0.1:$PORT" --demo >"$WORK/out.txt" 2>"$WORK/server.log" &
    SERVER_PID=$!
    for _ in $(seq 1 300); do
        curl -fsS "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && break
        sleep 0.1
    done
    curl -fsS "http://127.0.0.1:$PORT/healthz" >/dev/null || {
        echo "the server did not start:" >&2
        cat "$WORK/server.log" >&2
        exit 1
    }
    PROVIDER="$(awk '/providerId:/ {print $2}' "$WORK/out.txt")"
    local widget secret
    widget="$(awk '/widgetId:/ {print $2}' "$WORK/out.txt")"
    secret="$(awk '/backendSecret:/ {print $2}' "$WORK/out.txt")"
    curl -fsS -H "Authorization: Basic $(printf '%s:%s' "$widget" "$secret" | base64 -w0)" \
        -H 'Content-Type: application/json' -d "$BODY" \
        "http://127.0.0.1:$PORT/initialize" >"$WORK/created.json"
    stop_server
    echo "provider $PROVIDER, template transaction $(python3 -c \
        'import json,sys; print(json.load(open(sys.argv[1]))["transactionId"])' "$WORK/created.json")" >&2
}

bench() { # name db
    local name="$1" db="$2"
    echo "== $name: one transaction through the server" >&2
    first_transaction "$db"
    echo "== $name: seeding $COUNT + $OTHER transactions" >&2
    "$BENCH" seed --db "$db" --provider "$PROVIDER" --count "$COUNT" --other-count "$OTHER"
    echo "== $name: timing (up to $CALLS calls or ${BUDGET} s per scenario)" >&2
    "$BENCH" time --db "$db" --provider "$PROVIDER" --calls "$CALLS" --budget-secs "$BUDGET" |
        tee "$WORK/$name-times.txt"
    echo "== $name: query plans" >&2
    "$BENCH" plans --db "$db" --provider "$PROVIDER" | tee "$WORK/$name-plans.txt" >&2
}

if [[ "$STORE" == sqlite || "$STORE" == both ]]; then
    bench sqlite "$WORK/dashboard.db"
    if [[ "$KEEP" == 1 ]]; then du -h "$WORK"/dashboard.db* >&2; fi
fi
if [[ "$STORE" == postgres || "$STORE" == both ]]; then
    command -v psql >/dev/null || { echo "psql not found" >&2; exit 1; }
    psql "$PG" -qc "CREATE DATABASE $PG_DB" >/dev/null
    PG_CREATED=1
    PG_URL="${PG%/*}/$PG_DB"
    bench postgres "$PG_URL"
    psql "$PG_URL" -Atc "SELECT 'transactions: ' || pg_size_pretty(pg_total_relation_size('transactions'))" >&2
fi

echo
for name in sqlite postgres; do
    if [[ -f "$WORK/$name-times.txt" ]]; then
        echo "== $name"
        cat "$WORK/$name-times.txt"
    fi
done
