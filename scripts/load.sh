#!/usr/bin/env bash
# Load test of checkout-server, run by hand (not in CI; figures go to docs/PERFORMANCE.md).
# One invocation measures, on the store chosen by --db, each route against its ceiling:
#
#   SQLite (--db sqlite, the default):
#     GET /healthz          the hello ceiling: no authentication, no storage
#     GET /status/{id}      status reads                        target >= 0.75 of hello,
#                                                                 p99 <= 5 ms
#     GET /status           authentication alone (health check) target >= 0.90 of hello
#     POST /initialize      durable creates (reply after commit) target p99 <= 15 ms and, with
#                           --baseline BIN, >= 2x the creates of BIN (another build of the
#                           service, e.g. the previous commit's) measured in the same run
#     one-commit ceiling    the same rows (a transaction, its items, its event) inserted one
#                           commit each on the same disk, synchronous=FULL, WAL (for reference)
#   PostgreSQL (--db postgres://user@host:port/db, a server where the script may create
#   databases):
#     pgbench -S / -N       -c CONNECTIONS -j THREADS, scale 10, on a database of their own
#     GET /healthz, GET /status, GET /status/{id} (target >= 0.90 of pgbench -S, p99 <= 20 ms),
#     POST /initialize (target >= 0.80 of pgbench -N)
#
# With --memory N, then at least N requests of each route (creates, status reads,
# authentications, hellos, in chunks) against a fresh server, printing its resident memory after
# every chunk and the peak (VmHWM).
#
# Usage: scripts/load.sh [--db sqlite|postgres://...] [--duration S=10] [--connections N=64]
#                        [--threads T=2] [--pool N=16] [--memory N] [--baseline BIN]
# The request log stays at the service's default level (RUST_LOG=info) unless RUST_LOG is set.
# At info, SQLite runs also measure hello with the request log off (RUST_LOG=warn), at info,
# and at info as JSON (--log-format json), back to back (target: >= 0.90 of log off).
# Needs: wrk, curl, python3; psql and pgbench for PostgreSQL.
set -euo pipefail

DB="sqlite"
DURATION=10
CONNECTIONS=64
THREADS=2
POOL=16
MEMORY=0
BASELINE=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --db) DB="$2"; shift 2 ;;
        --duration) DURATION="$2"; shift 2 ;;
        --connections) CONNECTIONS="$2"; shift 2 ;;
        --threads) THREADS="$2"; shift 2 ;;
        --pool) POOL="$2"; shift 2 ;;
        --memory) MEMORY="$2"; shift 2 ;;
        --baseline) BASELINE="$2"; shift 2 ;;
        -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done

PORT="${LOAD_PORT:-18089}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="$(mktemp -d)"
SERVER_PID=""
CREATED_DBS=()
LOG_LEVEL="${RUST_LOG:-info}"

cleanup() {
    stop_server
    if [[ "$DB" != sqlite ]]; then
        for name in "${CREATED_DBS[@]}"; do
            psql "$DB" -qc "DROP DATABASE IF EXISTS $name WITH (FORCE)" >/dev/null 2>&1 || true
        done
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

for tool in wrk curl python3; do
    command -v "$tool" >/dev/null || { echo "$tool not found (apt-get install $tool)" >&2; exit 1; }
done
if [[ "$DB" != sqlite ]]; then
    for tool in psql pgbench; do
        command -v "$tool" >/dev/null || { echo "$tool not found" >&2; exit 1; }
    done
fi

echo "building the release binary..." >&2
cargo build --release --locked -p host-http --manifest-path "$ROOT/Cargo.toml" >&2
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/checkout-server"
# A two-item creation body of about 2.8 KB (the size the targets name).
BODY="$(python3 - <<'PY'
import json
item = lambda name, category, price, extra: {
    "name": name, "category": category, "price": price,
    "taxes": [{"value": 19, "unit": "PERCENT"}],
    "period": {"start": "2027-03-01T10:00:00", "end": "2027-03-04T09:00:00", "startTimeZone": "Europe/Berlin"},
    "cancellationPolicy": {"reference": "START_PERIOD", "penalties": [
        {"type": "OFFSET_PENALTY", "value": {"amount": 0, "unit": "PERCENTAGE"}, "offset": {"amount": 30, "unit": "DAYS"}},
        {"type": "OFFSET_PENALTY", "value": {"amount": 50, "unit": "PERCENTAGE"}, "offset": {"amount": 7, "unit": "DAYS"}},
        {"type": "OFFSET_PENALTY", "value": {"amount": 100, "unit": "PERCENTAGE"}, "offset": {"amount": 0, "unit": "DAYS"}}]},
    **extra}
body = {
    "title": "Load trip to Berlin: flight and three nights",
    "currency": "EUR",
    "refIDs": {"bookingId": "BK-2027-000123", "costCenter": "CC-4711", "traveller": "T-0042"},
    "note": "Internal note for the travel desk; never shown to the customer. " * 3,
    "attachments": [{"type": "TERMS_CONDITIONS", "url": "https://provider.example/terms.pdf"},
                    {"type": "PICTURES", "url": "https://provider.example/hotel.jpg"}],
    "items": [
        item("Flight FRA-BER LH 172, economy, one checked bag", "FLIGHT", 180.50, {}),
        item("Hotel Unter den Linden, double room, breakfast included", "ACCOMMODATION", 120,
             {"quantity": {"amount": 3, "unit": "PER_NIGHT"}}),
    ],
}
text = json.dumps(body, separators=(",", ":"))
# Pad the note so the body is close to 2.8 KB whatever the fields above add up to.
body["note"] += "." * max(0, 2800 - len(text))
print(json.dumps(body, separators=(",", ":")))
PY
)"

stop_server() {
    if [[ -n "$SERVER_PID" ]]; then
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
        SERVER_PID=""
    fi
}

start_server() { # db, extra flags...: starts a server, waits until it answers, sets AUTH
    local db="$1"
    shift
    RUST_LOG="$LOG_LEVEL" "$BIN" serve --db "$db" --listen "127.0.0.1:$PORT" --demo "$@" \
        >"$WORK/out.txt" 2>"$WORK/server.log" &
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
    local widget secret
    widget="$(awk '/widgetId:/ {print $2}' "$WORK/out.txt")"
    secret="$(awk '/backendSecret:/ {print $2}' "$WORK/out.txt")"
    AUTH="Basic $(printf '%s:%s' "$widget" "$secret" | base64 -w0)"
    python3 - "$WORK/post.lua" "$AUTH" "$BODY" <<'PY'
import json, sys
path, auth, body = sys.argv[1:]
with open(path, "w") as f:
    f.write('wrk.method = "POST"\n')
    f.write("wrk.body = %s\n" % json.dumps(body))
    f.write('wrk.headers["Content-Type"] = "application/json"\n')
    f.write('wrk.headers["Authorization"] = %s\n' % json.dumps(auth))
PY
}

create_one() { # prints the id of a new transaction
    curl -fsS -H "Authorization: $AUTH" -H 'Content-Type: application/json' -d "$BODY" \
        "http://127.0.0.1:$PORT/initialize" |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["transactionId"])'
}

wrk_run() { # name, path, wrk args...
    local name="$1" path="$2"
    shift 2
    wrk -t"$THREADS" -c"$CONNECTIONS" -d"${DURATION}s" --latency "$@" \
        "http://127.0.0.1:$PORT$path" >"$WORK/$name.txt"
    cat "$WORK/$name.txt" >&2
}
rate() { awk '/^Requests\/sec/ {printf "%.0f", $2}' "$WORK/$1.txt"; }
p99() { awk '$1 == "99%" {print $2}' "$WORK/$1.txt"; }
non2xx() { awk '/Non-2xx/ {n = $NF} END {print n + 0}' "$WORK/$1.txt"; }
total() { awk '/requests in/ {print $1}' "$WORK/$1.txt"; }

under_ms() { # wrk latency (e.g. 812.00us, 2.31ms, 1.20s), limit in ms: "met" or "NOT met"
    awk -v v="$1" -v limit="$2" 'BEGIN {
        n = v + 0; ms = v ~ /us$/ ? n / 1000 : (v ~ /ms$/ ? n : n * 1000)
        print (ms <= limit ? "met" : "NOT met") }'
}

# One line of the result table: label, measured rate, p99, non-2xx, ceiling label, ceiling
# rate, target ratio.
RESULTS=()
result() {
    local ratio met
    ratio="$(awk -v a="$2" -v b="$6" 'BEGIN {printf "%.2f", (b > 0 ? a / b : 0)}')"
    met="$(awk -v r="$ratio" -v t="$7" 'BEGIN {print (t == "-" ? "" : (r >= t ? "met" : "NOT met"))}')"
    RESULTS+=("$(printf '%-28s %9s/s %9s %7s   %-22s %9s/s %6s  %5s %s' \
        "$1" "$2" "$3" "$4" "$5" "$6" "$ratio" "$7" "$met")")
}

measure_routes() { # the four HTTP measurements on the running server
    local id
    id="$(create_one)"
    wrk_run hello /healthz
    wrk_run status "/status/$id" -H "Authorization: $AUTH"
    wrk_run health /status -H "Authorization: $AUTH"
    wrk_run create /initialize -s "$WORK/post.lua"
}

one_commit_ceiling() { # server db file: inserts copies of a stored transaction one commit each
    python3 - "$1" "$WORK/ceiling.db" "$DURATION" <<'PY'
import os, sqlite3, sys, time, uuid
source, target, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
src = sqlite3.connect(source)
schema = [row[0] for row in src.execute(
    "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%'"
    " ORDER BY type = 'table' DESC, rowid")]
tx_id = src.execute("SELECT id FROM transactions ORDER BY created_at LIMIT 1").fetchone()[0]
def rows(table, column):
    cur = src.execute(f"SELECT * FROM {table} WHERE {column} = ?", (tx_id,))
    names = [d[0] for d in cur.description]
    return names, cur.fetchall()
tables = {t: rows(t, c) for t, c in
          [("transactions", "id"), ("items", "transaction_id"), ("events", "transaction_id")]}
dst = sqlite3.connect(target, isolation_level=None)
dst.execute("PRAGMA journal_mode=WAL")
dst.execute("PRAGMA synchronous=FULL")
dst.execute("PRAGMA foreign_keys=OFF")
# Not the triggers (the ceiling inserts the rows themselves), nor the search index (a virtual
# table the writer fills on its own, which python's SQLite may not know) and its shadow tables.
virtual = [sql.split()[3] for sql in schema if sql.startswith("CREATE VIRTUAL TABLE")]
skipped = ["CREATE VIRTUAL TABLE"] + [f"CREATE TABLE '{name}_" for name in virtual]
for sql in schema:
    if "CREATE TRIGGER" not in sql and not any(sql.startswith(s) for s in skipped):
        dst.execute(sql)
statements = {t: f"INSERT INTO {t} ({','.join(n for n in names if n != 'seq')}) VALUES "
                 f"({','.join('?' for n in names if n != 'seq')})"
              for t, (names, _) in tables.items()}
ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
def uuid7():  # as the service makes ids: time-ordered (UUID v7)
    ms = int(time.time() * 1000)
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms << 80) | (0x7 << 76) | ((rand >> 64) & 0xFFF) << 64 | (0b10 << 62) | (rand & ((1 << 62) - 1))
    return str(uuid.UUID(int=value))
def reference():  # as the service makes them (R-3.2): 15 bits of the second, 25 random
    bits = ((int(time.time()) % (1 << 15)) << 25) | (int.from_bytes(os.urandom(4), "big") >> 7)
    return "CHK-" + "".join(ALPHABET[(bits >> (5 * shift)) & 31] for shift in range(7, -1, -1))
count, started = 0, time.monotonic()
while time.monotonic() - started < seconds:
    new_id = uuid7()
    dst.execute("BEGIN IMMEDIATE")
    for table, (names, values) in tables.items():
        for row in values:
            record = dict(zip(names, row))
            record.pop("seq", None)
            for key in ("id", "transaction_id"):
                if key in record and record[key] == tx_id:
                    record[key] = new_id
            if table == "transactions":
                record["reference"] = reference()
                # As the service does: a reference taken already is drawn again.
                while dst.execute("SELECT 1 FROM transactions WHERE reference = ?",
                                  (record["reference"],)).fetchone():
                    record["reference"] = reference()
                record["pay_token_hash"] = None
            if table == "events":
                record["id"] = "evt_" + uuid.UUID(uuid7()).hex
            dst.execute(statements[table], list(record.values()))
    dst.execute("COMMIT")
    count += 1
print(f"{count / (time.monotonic() - started):.0f}")
PY
}

log_cost() { # db: hello with the request log off, at info, and at info as JSON, back to back
    LOG_LEVEL=warn start_server "$1"
    wrk_run hello-log-off /healthz
    stop_server
    start_server "$1"
    wrk_run hello-log-text /healthz
    stop_server
    start_server "$1" --log-format json
    wrk_run hello-log-json /healthz
    stop_server
    local off
    off="$(rate hello-log-off)"
    result "GET /healthz, log off" "$off" "$(p99 hello-log-off)" "$(non2xx hello-log-off)" "itself" "$off" "-"
    result "GET /healthz, log text" "$(rate hello-log-text)" "$(p99 hello-log-text)" "$(non2xx hello-log-text)" "hello, log off" "$off" 0.90
    result "GET /healthz, log json" "$(rate hello-log-json)" "$(p99 hello-log-json)" "$(non2xx hello-log-json)" "hello, log off" "$off" 0.90
}

sample_memory() { # prints "rss_kib hwm_kib" of the server
    awk '/^VmRSS/ {r = $2} /^VmHWM/ {h = $2} END {print r, h}' "/proc/$SERVER_PID/status"
}

memory_run() { # db: N requests of each route, resident memory after each chunk
    local db="$1" done_creates=0 id
    start_server "$db"
    id="$(create_one)"
    echo
    echo "memory: creates, status reads, authentications, hellos, VmRSS KiB, VmHWM KiB (server pid $SERVER_PID)"
    printf '%10s %10s %10s %10s %10s %10s\n' creates reads auths hellos rss hwm
    local reads=0 auths=0 hellos=0
    while ((done_creates < MEMORY || reads < MEMORY || auths < MEMORY || hellos < MEMORY)); do
        if ((done_creates < MEMORY)); then
            DURATION=15 wrk_run "mem-create" /initialize -s "$WORK/post.lua" 2>/dev/null
            done_creates=$((done_creates + $(total mem-create)))
        fi
        DURATION=5 wrk_run "mem-read" "/status/$id" -H "Authorization: $AUTH" 2>/dev/null
        reads=$((reads + $(total mem-read)))
        DURATION=3 wrk_run "mem-auth" /status -H "Authorization: $AUTH" 2>/dev/null
        auths=$((auths + $(total mem-auth)))
        DURATION=3 wrk_run "mem-hello" /healthz 2>/dev/null
        hellos=$((hellos + $(total mem-hello)))
        printf '%10s %10s %10s %10s %10s %10s\n' "$done_creates" "$reads" "$auths" "$hellos" $(sample_memory)
    done
    stop_server
}

echo "store: $DB; wrk: $CONNECTIONS connections, $THREADS threads, ${DURATION}s per route; cores: $(nproc); RUST_LOG=$LOG_LEVEL" >&2
if [[ "$DB" == sqlite ]]; then
    start_server "$WORK/load.db"
    measure_routes
    stop_server
    stored="$(python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('select count(*) from transactions').fetchone()[0])" "$WORK/load.db")"
    echo "one-commit ceiling (python3 sqlite3, one thread, synchronous=FULL)..." >&2
    ceiling="$(one_commit_ceiling "$WORK/load.db")"
    hello="$(rate hello)"
    result "GET /healthz (hello)" "$hello" "$(p99 hello)" "$(non2xx hello)" "itself" "$hello" "-"
    result "GET /status/{id}" "$(rate status)" "$(p99 status)" "$(non2xx status)" "hello" "$hello" 0.75
    result "GET /status (auth only)" "$(rate health)" "$(p99 health)" "$(non2xx health)" "hello" "$hello" 0.90
    result "POST /initialize (durable)" "$(rate create)" "$(p99 create)" "$(non2xx create)" "one-commit inserts" "$ceiling" "-"
    if [[ -n "$BASELINE" ]]; then
        # The same creates against the other build, on a database of its own, right after.
        current_bin="$BIN"
        BIN="$BASELINE"
        start_server "$WORK/baseline.db"
        wrk_run baseline-create /initialize -s "$WORK/post.lua"
        stop_server
        BIN="$current_bin"
        result "POST /initialize, baseline" "$(rate baseline-create)" "$(p99 baseline-create)" "$(non2xx baseline-create)" "itself" "$(rate baseline-create)" "-"
        result "POST /initialize (durable)" "$(rate create)" "$(p99 create)" "$(non2xx create)" "baseline creates" "$(rate baseline-create)" 2
    fi
    latency_checks="status p99 $(p99 status) (target <= 5 ms: $(under_ms "$(p99 status)" 5)); creates p99 $(p99 create) (target <= 15 ms: $(under_ms "$(p99 create)" 15))"
    if [[ "$LOG_LEVEL" == info ]]; then log_cost "$WORK/log.db"; fi
    acked=$(( $(total create) - $(non2xx create) + 1 ))
    summary="transactions stored after shutdown: $stored, acknowledged: $acked ($( ((stored >= acked)) && echo "every acknowledged create is on disk; the rest were answered after wrk stopped counting" || echo "ACKNOWLEDGED CREATES MISSING"))"
    if ((MEMORY > 0)); then memory_run "$WORK/memory.db"; fi
else
    name="checkout_load_$$"
    bench="checkout_pgbench_$$"
    psql "$DB" -qc "CREATE DATABASE $name" >/dev/null
    CREATED_DBS+=("$name")
    psql "$DB" -qc "CREATE DATABASE $bench" >/dev/null
    CREATED_DBS+=("$bench")
    with_db() { python3 -c 'import sys,urllib.parse as u; p=u.urlsplit(sys.argv[1]); print(u.urlunsplit(p._replace(path="/"+sys.argv[2])))' "$DB" "$1"; }
    target="$(with_db "$name")"
    bench_url="$(with_db "$bench")"
    echo "pgbench -i -s 10..." >&2
    pgbench -q -i -s 10 "$bench_url" >/dev/null 2>&1
    pgbench_tps() { pgbench "$@" -c "$CONNECTIONS" -j "$THREADS" -T "$DURATION" "$bench_url" 2>/dev/null | awk '/^tps/ {printf "%.0f", $3}'; }
    select_tps="$(pgbench_tps -S)"
    write_tps="$(pgbench_tps -N)"
    start_server "$target" --db-pool-size "$POOL"
    measure_routes
    stop_server
    stored="$(psql "$target" -Atc 'SELECT count(*) FROM transactions')"
    hello="$(rate hello)"
    result "GET /healthz (hello)" "$hello" "$(p99 hello)" "$(non2xx hello)" "itself" "$hello" "-"
    result "GET /status/{id}" "$(rate status)" "$(p99 status)" "$(non2xx status)" "pgbench -S" "$select_tps" 0.90
    result "GET /status (auth only)" "$(rate health)" "$(p99 health)" "$(non2xx health)" "pgbench -S" "$select_tps" "-"
    result "POST /initialize (durable)" "$(rate create)" "$(p99 create)" "$(non2xx create)" "pgbench -N" "$write_tps" 0.80
    latency_checks="status p99 $(p99 status) (target <= 20 ms: $(under_ms "$(p99 status)" 20))"
    acked=$(( $(total create) - $(non2xx create) + 1 ))
    summary="transactions stored after shutdown: $stored, acknowledged: $acked ($( ((stored >= acked)) && echo "every acknowledged create is stored" || echo "ACKNOWLEDGED CREATES MISSING")); pool $POOL"
    if ((MEMORY > 0)); then memory_run "$target"; fi
fi

echo
echo "store=$DB connections=$CONNECTIONS threads=$THREADS duration=${DURATION}s cores=$(nproc) RUST_LOG=$LOG_LEVEL $(date -u +%FT%TZ)"
printf '%-28s %11s %9s %7s   %-22s %11s %6s  %5s\n' route rate p99 non-2xx ceiling "ceiling rate" ratio target
for line in "${RESULTS[@]}"; do echo "$line"; done
echo "$latency_checks"
echo "$summary"
