#!/usr/bin/env bash
# Instruction profile of one route: starts the release server under valgrind's callgrind on a
# fresh SQLite database, sends N requests of the route over one keep-alive connection, stops
# the server and prints callgrind's inclusive top entries. Instruction counts do not depend on
# what else the machine is doing, so before/after comparisons hold on a busy machine.
#
# Usage: scripts/profile.sh hello|health|status|create [N=2000] [OUT=target/callgrind.<route>.out]
# Needs: valgrind (apt-get install valgrind), curl, python3.
set -euo pipefail
ROUTE="${1:?route: hello, health, status or create}"
N="${2:-2000}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${3:-$ROOT/target/callgrind.$ROUTE.out}"
PORT="${PROFILE_PORT:-18600}"
cargo build --release --locked -p host-http --manifest-path "$ROOT/Cargo.toml" >&2
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/checkout-server"
WORK="$(mktemp -d)"
PID=""
trap '[[ -n "$PID" ]] && kill "$PID" 2>/dev/null; rm -rf "$WORK"' EXIT

RUST_LOG=info valgrind --tool=callgrind --callgrind-out-file="$OUT" \
    "$BIN" serve --db "$WORK/p.db" --listen "127.0.0.1:$PORT" --demo >"$WORK/out" 2>"$WORK/log" &
PID=$!
for _ in $(seq 1 600); do
    curl -fsS "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && break
    sleep 0.2
done
widget="$(awk '/widgetId:/ {print $2}' "$WORK/out")"
secret="$(awk '/backendSecret:/ {print $2}' "$WORK/out")"
python3 - "$PORT" "$widget" "$secret" "$ROUTE" "$N" <<'PY'
import base64, http.client, json, sys
port, widget, secret, route, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
auth = "Basic " + base64.b64encode(f"{widget}:{secret}".encode()).decode()
conn = http.client.HTTPConnection("127.0.0.1", int(port))
body = json.dumps({"title": "P", "currency": "EUR", "items": [
    {"name": "Flight", "category": "FLIGHT", "price": 100.5, "taxes": [{"value": 19, "unit": "PERCENT"}]},
    {"name": "Hotel", "category": "ACCOMMODATION", "price": 80, "quantity": {"amount": 2, "unit": "PER_NIGHT"}}]})
json_headers = {"Authorization": auth, "Content-Type": "application/json"}
conn.request("POST", "/initialize", body, json_headers)
answer = conn.getresponse()
tid = json.loads(answer.read())["transactionId"]
for _ in range(n):
    if route == "status":
        conn.request("GET", f"/status/{tid}", headers={"Authorization": auth})
    elif route == "health":
        conn.request("GET", "/status", headers={"Authorization": auth})
    elif route == "hello":
        conn.request("GET", "/healthz")
    elif route == "create":
        conn.request("POST", "/initialize", body, json_headers)
    else:
        sys.exit(f"unknown route {route}")
    answer = conn.getresponse()
    answer.read()
    assert answer.status in (200, 201), answer.status
PY
kill -INT "$PID"
wait "$PID" 2>/dev/null || true
PID=""
echo "profile: $OUT ($N requests of $ROUTE, plus start-up and one create)"
callgrind_annotate --inclusive=yes "$OUT" 2>/dev/null | sed -n '1,60p'
