#!/usr/bin/env bash
# Load test of checkout-server, run by hand (not in CI). Builds the release binary and drives
# `serve --demo` on loopback ports with wrk:
#   1. GET /healthz          the hello-world ceiling (no auth, no storage)
#   2. POST /initialize      durable creates (a reply only after its commit)
#   3. GET /status/{id}      authenticated status reads
# First on SQLite (a temporary file, synchronous=FULL, group commit). With --db URL (a
# PostgreSQL server where the script may create a database), then in the same run on
# PostgreSQL: one instance, and two instances on the same database (wrk drives both at once,
# half the connections each, and the rates are summed).
#
# Usage: scripts/load.sh [--db postgres://user@host:port/db] [DURATION_SECONDS=10]
#                        [CONNECTIONS=64] [THREADS=2]
# Needs: wrk (apt-get install wrk), curl, python3; psql for PostgreSQL.
# Set RUST_LOG=warn to measure without request logs.
set -euo pipefail

PG_URL=""
if [[ "${1:-}" == "--db" ]]; then
    PG_URL="$2"
    shift 2
fi
DURATION="${1:-10}"
CONNECTIONS="${2:-64}"
THREADS="${3:-2}"
PORT="${LOAD_PORT:-18089}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="$(mktemp -d)"
PIDS=()
PG_DB=""

cleanup() {
    for pid in "${PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    if [[ -n "$PG_DB" ]]; then
        psql "$PG_URL" -qc "DROP DATABASE IF EXISTS $PG_DB WITH (FORCE)" >/dev/null 2>&1 || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

command -v wrk >/dev/null || { echo "wrk not found (apt-get install wrk)" >&2; exit 1; }

cargo build --release -p host-http --manifest-path "$ROOT/Cargo.toml" >&2
BIN="$ROOT/target/release/checkout-server"
BODY='{"title":"Load trip","currency":"EUR","items":[{"name":"Flight","category":"FLIGHT","price":100.50,"taxes":[{"value":19}]},{"name":"Hotel","category":"ACCOMMODATION","price":80,"quantity":{"amount":2,"unit":"PER_NIGHT"}}]}'

start() { # db, port, extra flags...: starts a server, waits until it answers
    local db="$1" port="$2"
    shift 2
    RUST_LOG="${RUST_LOG:-info}" "$BIN" serve --db "$db" --listen "127.0.0.1:$port" "$@" \
        >"$WORK/out-$port.txt" 2>"$WORK/server-$port.log" &
    PIDS+=($!)
    for _ in $(seq 1 200); do
        curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    echo "server on port $port did not start:" >&2
    cat "$WORK/server-$port.log" >&2
    exit 1
}

stop_all() {
    for pid in "${PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    PIDS=()
}

credentials() { # port of a `serve --demo`: sets AUTH and writes the wrk POST script
    local port="$1"
    local widget secret
    widget="$(awk '/widgetId:/ {print $2}' "$WORK/out-$port.txt")"
    secret="$(awk '/backendSecret:/ {print $2}' "$WORK/out-$port.txt")"
    AUTH="Basic $(printf '%s:%s' "$widget" "$secret" | base64 -w0)"
    cat >"$WORK/post.lua" <<LUA
wrk.method = "POST"
wrk.body = '$BODY'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "$AUTH"
LUA
}

create_one() { # port: creates a transaction, prints its id
    curl -fsS -H "Authorization: $AUTH" -H 'Content-Type: application/json' -d "$BODY" \
        "http://127.0.0.1:$1/initialize" | sed -E 's/.*"transactionId":"([^"]+)".*/\1/'
}

run() { # name, ports (comma-separated), path, wrk args...: one wrk per port, at once
    local name="$1" ports="$2" path="$3"
    shift 3
    local count i=0 waiting=()
    IFS=, read -ra list <<<"$ports"
    count="${#list[@]}"
    local connections=$((CONNECTIONS / count)) threads=$((THREADS / count))
    ((threads >= 1)) || threads=1
    for port in "${list[@]}"; do
        wrk -t"$threads" -c"$connections" -d"${DURATION}s" --latency "$@" \
            "http://127.0.0.1:$port$path" >"$WORK/$name-$i.txt" &
        waiting+=($!)
        i=$((i + 1))
    done
    wait "${waiting[@]}"
    cat "$WORK/$name"-*.txt >&2
}
rps() { cat "$WORK/$1"-*.txt | awk '/^Requests\/sec/ {sum += $2} END {printf "%.0f", sum}'; }
p99() { cat "$WORK/$1"-*.txt | awk '$1 == "99%" {print $2}' | sort -h | tail -1; }
errors() { cat "$WORK/$1"-*.txt | awk '/Non-2xx/ {sum += $NF} END {print sum + 0}'; }
row() { # label, name, ceiling rate
    local rate
    rate="$(rps "$2")"
    printf '%-46s %10s %10s %8s %8s\n' "$1" "$rate" "$(p99 "$2")" "$(errors "$2")" \
        "$(awk -v a="$rate" -v b="$3" 'BEGIN {printf "%.2f", a / b}')"
}

measure() { # label, ports: the three routes on these servers
    local label="$1" ports="$2" first="${2%%,*}"
    credentials "$first"
    ID="$(create_one "$first")"
    run "$label-hello" "$ports" /healthz
    run "$label-create" "$ports" /initialize -s "$WORK/post.lua"
    run "$label-status" "$ports" "/status/$ID" -H "Authorization: $AUTH"
}

RESULTS=()
# SQLite, the embedded default.
start "$WORK/load.db" "$PORT" --demo
measure sqlite "$PORT"
stop_all
SQLITE_STORED="$(python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('select count(*) from transactions').fetchone()[0])" "$WORK/load.db" 2>/dev/null || echo "?")"

if [[ -n "$PG_URL" ]]; then
    PG_DB="checkout_load_$$"
    psql "$PG_URL" -qc "CREATE DATABASE $PG_DB" >/dev/null
    PG_TARGET="$(python3 -c 'import sys,urllib.parse as u; p=u.urlsplit(sys.argv[1]); print(u.urlunsplit(p._replace(path="/"+sys.argv[2])))' "$PG_URL" "$PG_DB")"
    "$BIN" migrate --db "$PG_TARGET" >/dev/null
    start "$PG_TARGET" "$PORT" --demo
    measure pg1 "$PORT"
    start "$PG_TARGET" "$((PORT + 1))" --sandbox
    measure pg2 "$PORT,$((PORT + 1))"
    stop_all
    PG_STORED="$(psql "$PG_TARGET" -Atc 'SELECT count(*) FROM transactions')"
fi

echo
echo "connections=$CONNECTIONS threads=$THREADS duration=${DURATION}s cores=$(nproc) RUST_LOG=${RUST_LOG:-info}"
printf '%-46s %10s %10s %8s %8s\n' route req/s p99 non-2xx ratio
for label in sqlite pg1 pg2; do
    [[ -f "$WORK/$label-hello-0.txt" ]] || continue
    case "$label" in
        sqlite) name="SQLite" ;;
        pg1) name="PostgreSQL, 1 instance" ;;
        pg2) name="PostgreSQL, 2 instances" ;;
    esac
    hello="$(rps "$label-hello")"
    row "$name: GET /healthz (ceiling)" "$label-hello" "$hello"
    row "$name: POST /initialize" "$label-create" "$hello"
    row "$name: GET /status/{id}" "$label-status" "$hello"
done
echo "transactions stored (durable, after shutdown): SQLite $SQLITE_STORED${PG_URL:+, PostgreSQL ${PG_STORED:-?}}"
