#!/usr/bin/env bash
# Load test of checkout-server, run by hand (not in CI). Builds the release binary, starts
# `serve --demo` on a loopback port with a temporary database, and drives with wrk:
#   1. GET /healthz          the hello-world ceiling (no auth, no storage)
#   2. POST /initialize      durable creates (synchronous=FULL, group commit)
#   3. GET /status/{id}      authenticated status reads
# Usage: scripts/load.sh [DURATION_SECONDS=10] [CONNECTIONS=64] [THREADS=2]
# Needs: wrk (apt-get install wrk), curl. Set RUST_LOG=warn to measure without request logs.
set -euo pipefail

DURATION="${1:-10}"
CONNECTIONS="${2:-64}"
THREADS="${3:-2}"
PORT="${LOAD_PORT:-18089}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="$(mktemp -d)"
SERVER_PID=""

cleanup() {
    if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID"
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

command -v wrk >/dev/null || { echo "wrk not found (apt-get install wrk)" >&2; exit 1; }

cargo build --release -p host-http --manifest-path "$ROOT/Cargo.toml" >&2
BIN="$ROOT/target/release/checkout-server"

RUST_LOG="${RUST_LOG:-info}" "$BIN" serve --demo --db "$WORK/load.db" \
    --listen "127.0.0.1:$PORT" >"$WORK/demo.txt" 2>"$WORK/server.log" &
SERVER_PID=$!

for _ in $(seq 1 100); do
    curl -fsS "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && break
    sleep 0.1
done
WIDGET="$(awk '/widgetId:/ {print $2}' "$WORK/demo.txt")"
SECRET="$(awk '/backendSecret:/ {print $2}' "$WORK/demo.txt")"
AUTH="Basic $(printf '%s:%s' "$WIDGET" "$SECRET" | base64 -w0)"
BODY='{"title":"Load trip","currency":"EUR","items":[{"name":"Flight","category":"FLIGHT","price":100.50,"taxes":[{"value":19}]},{"name":"Hotel","category":"ACCOMMODATION","price":80,"quantity":{"amount":2,"unit":"PER_NIGHT"}}]}'

cat >"$WORK/post.lua" <<LUA
wrk.method = "POST"
wrk.body = '$BODY'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "$AUTH"
LUA

ID="$(curl -fsS -H "Authorization: $AUTH" -H 'Content-Type: application/json' -d "$BODY" \
    "http://127.0.0.1:$PORT/initialize" | sed -E 's/.*"transactionId":"([^"]+)".*/\1/')"

run() { # name, wrk args...
    local name="$1"
    shift
    wrk -t"$THREADS" -c"$CONNECTIONS" -d"${DURATION}s" --latency "$@" >"$WORK/$name.txt"
    cat "$WORK/$name.txt" >&2
}
rps() { awk '/^Requests\/sec/ {print $2}' "$WORK/$1.txt"; }
p99() { awk '$1 == "99%" {print $2}' "$WORK/$1.txt"; }
errors() { awk '/Non-2xx/ {print $NF; found=1} END {if (!found) print 0}' "$WORK/$1.txt"; }

run hello "http://127.0.0.1:$PORT/healthz"
run create -s "$WORK/post.lua" "http://127.0.0.1:$PORT/initialize"
run status -H "Authorization: $AUTH" "http://127.0.0.1:$PORT/status/$ID"

kill -TERM "$SERVER_PID"
wait "$SERVER_PID" 2>/dev/null || true
SERVER_PID=""
STORED="$(python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('select count(*) from transactions').fetchone()[0])" "$WORK/load.db" 2>/dev/null || echo "?")"

HELLO="$(rps hello)"
CREATE="$(rps create)"
STATUS="$(rps status)"
echo
echo "connections=$CONNECTIONS threads=$THREADS duration=${DURATION}s cores=$(nproc) RUST_LOG=${RUST_LOG:-info}"
printf '%-22s %12s %10s %10s %8s\n' route req/s p99 non-2xx ratio
printf '%-22s %12s %10s %10s %8s\n' "GET /healthz (ceiling)" "$HELLO" "$(p99 hello)" "$(errors hello)" 1.00
printf '%-22s %12s %10s %10s %8s\n' "POST /initialize" "$CREATE" "$(p99 create)" "$(errors create)" \
    "$(awk -v a="$CREATE" -v b="$HELLO" 'BEGIN {printf "%.2f", a / b}')"
printf '%-22s %12s %10s %10s %8s\n' "GET /status/{id}" "$STATUS" "$(p99 status)" "$(errors status)" \
    "$(awk -v a="$STATUS" -v b="$HELLO" 'BEGIN {printf "%.2f", a / b}')"
echo "transactions stored (durable, after shutdown): $STORED"
