#!/usr/bin/env bash
# Where one route's CPU goes, by thread: starts each given build of checkout-server on a fresh
# SQLite file, loads one route with wrk (after an uncounted warm-up), and prints, from
# /proc/<pid>/task/*/stat, the CPU time each kind of thread (tokio-rt-worker, sqlite-writer,
# sqlite-search, sqlite-checkpoint, log-writer) spent per answered request, with the machine's
# idle and system shares (/proc/stat) and the server's bytes written per request
# (/proc/<pid>/io). The builds are measured in turns, --rounds times, so that each sees the
# machine's swings. Run by hand (not in CI); the figures go to docs/PERFORMANCE.md.
#
# Usage: scripts/cpu-by-thread.sh [--route create|hello|status] [--seconds S=4] [--warm-up S=3]
#                                 [--rounds N=2] [--connections N=64] BIN [BIN ...]
#   e.g. scripts/cpu-by-thread.sh target/release/checkout-server /tmp/baseline/checkout-server
# Requests answered other than 2xx (503 past the per-provider in-flight limit, 64 by default:
# CHECKOUT_MAX_IN_FLIGHT_PER_PROVIDER) are cheap and are not counted: the column non-2xx says
# how many there were.
# Needs: wrk, curl, python3.
set -euo pipefail

ROUTE=create
SECONDS_MEASURED=4
WARM_UP=3
ROUNDS=2
CONNECTIONS=64
BINS=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --route) ROUTE="$2"; shift 2 ;;
        --seconds) SECONDS_MEASURED="$2"; shift 2 ;;
        --warm-up) WARM_UP="$2"; shift 2 ;;
        --rounds) ROUNDS="$2"; shift 2 ;;
        --connections) CONNECTIONS="$2"; shift 2 ;;
        -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
        -*) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
        *) BINS+=("$1"); shift ;;
    esac
done
[[ ${#BINS[@]} -gt 0 ]] || { echo "name at least one checkout-server binary (see --help)" >&2; exit 2; }
for number in "$SECONDS_MEASURED" "$WARM_UP" "$ROUNDS" "$CONNECTIONS"; do
    [[ "$number" =~ ^[1-9][0-9]*$ ]] || { echo "not a positive number: $number" >&2; exit 2; }
done
case "$ROUTE" in create|hello|status) ;; *) echo "--route: create, hello or status" >&2; exit 2 ;; esac
for bin in "${BINS[@]}"; do
    [[ -x "$bin" ]] || { echo "not an executable: $bin" >&2; exit 2; }
done
for tool in wrk curl python3; do
    command -v "$tool" >/dev/null || { echo "$tool not found (apt-get install $tool)" >&2; exit 1; }
done

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PORT="${CPU_PORT:-18790}"
TICK="$(getconf CLK_TCK)"
WORK="$(mktemp -d)"
PID=""
trap '[[ -n "$PID" ]] && kill "$PID" 2>/dev/null; rm -rf "$WORK"' EXIT
python3 "$ROOT/scripts/load-body.py" >"$WORK/body.json"

# CPU ticks by kind of thread (the names the server gives its threads; Linux keeps 15 bytes).
threads() {
    local task
    for task in /proc/"$PID"/task/*; do
        printf '%s %s\n' "$(tr ' ' _ <"$task/comm")" "$(awk '{print $14 + $15}' "$task/stat")"
    done | awk '{ticks[$1] += $2} END {for (name in ticks) print name, ticks[name]}' | sort
}
machine() { head -1 /proc/stat; }
written() { awk '/^write_bytes/ {print $2}' /proc/"$PID"/io; }

measure() { # bin: one measurement of one build
    local bin="$1" db="$WORK/db" target auth widget secret
    rm -rf "$db"; mkdir "$db"
    RUST_LOG=info "$bin" serve --db "$db/c.db" --listen "127.0.0.1:$PORT" --demo \
        >"$WORK/out" 2>"$WORK/log" &
    PID=$!
    for _ in $(seq 1 300); do
        curl -fsS "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && break
        sleep 0.1
    done
    curl -fsS "http://127.0.0.1:$PORT/healthz" >/dev/null || { cat "$WORK/log" >&2; exit 1; }
    widget="$(awk '/widgetId:/ {print $2}' "$WORK/out")"
    secret="$(awk '/backendSecret:/ {print $2}' "$WORK/out")"
    auth="Basic $(printf '%s:%s' "$widget" "$secret" | base64 -w0)"
    python3 - "$WORK/route.lua" "$auth" "$WORK/body.json" "$ROUTE" <<'PY'
import json, sys
path, auth, body, route = sys.argv[1:]
with open(path, "w") as f:
    if route == "create":
        f.write('wrk.method = "POST"\n')
        f.write("wrk.body = %s\n" % json.dumps(open(body).read()))
        f.write('wrk.headers["Content-Type"] = "application/json"\n')
    if route != "hello":
        f.write('wrk.headers["Authorization"] = %s\n' % json.dumps(auth))
PY
    case "$ROUTE" in
        create) target=/initialize ;;
        hello) target=/healthz ;;
        status)
            target="/status/$(curl -fsS -H "Authorization: $auth" -H 'Content-Type: application/json' \
                --data-binary @"$WORK/body.json" "http://127.0.0.1:$PORT/initialize" |
                python3 -c 'import json, sys; print(json.load(sys.stdin)["transactionId"])')"
            ;;
    esac
    wrk -t2 -c"$CONNECTIONS" -d"${WARM_UP}s" -s "$WORK/route.lua" "http://127.0.0.1:$PORT$target" >/dev/null
    threads >"$WORK/threads-before"; machine >"$WORK/machine-before"; written >"$WORK/written-before"
    wrk -t2 -c"$CONNECTIONS" -d"${SECONDS_MEASURED}s" -s "$WORK/route.lua" \
        "http://127.0.0.1:$PORT$target" >"$WORK/wrk"
    threads >"$WORK/threads-after"; machine >"$WORK/machine-after"; written >"$WORK/written-after"
    kill -TERM "$PID"; wait "$PID" 2>/dev/null || true; PID=""

    local requests failed answered
    requests="$(awk '/requests in/ {print $1}' "$WORK/wrk")"
    failed="$(awk '/Non-2xx or 3xx responses:/ {print $5}' "$WORK/wrk")"
    failed="${failed:-0}"
    answered=$((requests - failed))
    [[ "$answered" -gt 0 ]] || { echo "no request answered 2xx:" >&2; cat "$WORK/wrk" >&2; exit 1; }
    printf '%s  %s: %d/s answered 2xx, non-2xx %d\n' "$round" "$bin" \
        $((answered / SECONDS_MEASURED)) "$failed"
    join -a 2 -e 0 -o 0,1.2,2.2 "$WORK/threads-before" "$WORK/threads-after" |
        awk -v n="$answered" -v tick="$TICK" '{
            us = ($3 - $2) * 1e6 / tick / n
            if (us > 0) printf "    %-16s %7.1f us a request\n", $1, us
        }'
    paste -d' ' "$WORK/machine-before" "$WORK/machine-after" | awk '{
        for (i = 2; i <= 9; i++) { a += $i; b += $(i + 11) }
        printf "    machine: %.1f %% idle, %.1f %% system\n", ($(16) - $5) * 100 / (b - a), ($(15) - $4) * 100 / (b - a)
    }'
    awk -v b="$(cat "$WORK/written-before")" -v a="$(cat "$WORK/written-after")" -v n="$answered" \
        'BEGIN {printf "    written by the server: %.1f KiB a request\n", (a - b) / 1024 / n}'
}

echo "route $ROUTE, $CONNECTIONS connections, ${SECONDS_MEASURED} s after ${WARM_UP} s, $(nproc) cores, $(date -u +%FT%TZ)"
for round in $(seq 1 "$ROUNDS"); do
    for bin in "${BINS[@]}"; do
        measure "$bin"
    done
done
