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
# With --memory N, then N requests of every route of the service (the API, the payment page,
# the files, the dashboard's pages; memory_run lists them and what the Stripe and sign-in
# routes get instead) against a fresh server, in 5 rounds (--rounds), printing each route's
# answers by status and time and the server's resident memory (VmRSS, VmHWM) after every round,
# with its anonymous memory split between the Rust allocator's arenas and the rest (SQLite's).
#
# Each route and its ceiling are measured in --slices alternating slices (DURATION / SLICES
# seconds each, at least 1): hello, GET /status/{id} and GET /status one after the other, the
# creates of this build and of --baseline (two servers side by side), and hello with the log
# off, as text and as JSON (three servers); on PostgreSQL, the reads with pgbench -S and the
# creates with pgbench -N. A rate is the requests of all its slices over their seconds (a
# pgbench TPS the mean of its slices'), a p99 the highest of its slices'. The machine's speed
# swings by a fifth from one minute to the next, and a ratio of two rates measured one after
# the other swung with it; measured in turns, both rates see the same swings. --slices 1
# measures each once, in a row.
# Each server gets one uncounted second of each of its routes before the slices.
#
# Usage: scripts/load.sh [--db sqlite|postgres://...] [--duration S=10] [--connections N=64]
#                        [--threads T=2] [--pool N=16] [--memory N] [--rounds R=5]
#                        [--baseline BIN] [--slices N=5]
# The request log stays at the service's default level (RUST_LOG=info) unless RUST_LOG is set.
# At info, SQLite runs also measure hello with the request log off (RUST_LOG=warn), at info,
# and at info as JSON (--log-format json), in turns (target: >= 0.90 of log off).
# Needs: wrk, curl, python3; psql and pgbench for PostgreSQL.
set -euo pipefail

DB="sqlite"
DURATION=10
CONNECTIONS=64
THREADS=2
POOL=16
MEMORY=0
ROUNDS=5
BASELINE=""
SLICES=5
while [[ $# -gt 0 ]]; do
    case "$1" in
        --db) DB="$2"; shift 2 ;;
        --duration) DURATION="$2"; shift 2 ;;
        --connections) CONNECTIONS="$2"; shift 2 ;;
        --threads) THREADS="$2"; shift 2 ;;
        --pool) POOL="$2"; shift 2 ;;
        --memory) MEMORY="$2"; shift 2 ;;
        --rounds) ROUNDS="$2"; shift 2 ;;
        --baseline) BASELINE="$2"; shift 2 ;;
        --slices) SLICES="$2"; shift 2 ;;
        -h|--help) sed -n '2,44p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done

[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || { echo "--rounds wants a positive number, not $ROUNDS" >&2; exit 2; }
[[ "$SLICES" =~ ^[1-9][0-9]*$ ]] || { echo "--slices wants a positive number, not $SLICES" >&2; exit 2; }
[[ "$DURATION" =~ ^[1-9][0-9]*$ ]] || { echo "--duration wants a positive number of seconds, not $DURATION" >&2; exit 2; }
# Seconds of one slice.
SLICE=$((DURATION / SLICES > 0 ? DURATION / SLICES : 1))

PORT="${LOAD_PORT:-18089}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="$(mktemp -d)"
SERVER_PID=""
# Servers kept running side by side (keep_server): name -> pid, name -> port.
declare -A KEPT_PIDS=() KEPT_PORTS=()
CREATED_DBS=()
LOG_LEVEL="${RUST_LOG:-info}"

cleanup() {
    stop_server
    stop_kept
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
BODY="$(python3 "$ROOT/scripts/load-body.py")"

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
        >"$WORK/out-$PORT.txt" 2>"$WORK/server-$PORT.log" &
    SERVER_PID=$!
    for _ in $(seq 1 300); do
        curl -fsS "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && break
        sleep 0.1
    done
    curl -fsS "http://127.0.0.1:$PORT/healthz" >/dev/null || {
        echo "the server did not start:" >&2
        cat "$WORK/server-$PORT.log" >&2
        exit 1
    }
    local widget secret
    widget="$(awk '/widgetId:/ {print $2}' "$WORK/out-$PORT.txt")"
    secret="$(awk '/backendSecret:/ {print $2}' "$WORK/out-$PORT.txt")"
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

keep_server() { # name: the running server keeps running under name (its port and post.lua kept)
    KEPT_PIDS[$1]="$SERVER_PID"
    KEPT_PORTS[$1]="$PORT"
    cp "$WORK/post.lua" "$WORK/post-$1.lua"
    SERVER_PID=""
}

start_kept() { # name, port, db, extra flags...: starts a server on port and keeps it as name
    local name="$1" port="$2" base="$PORT"
    shift 2
    PORT="$port"
    start_server "$@"
    keep_server "$name"
    PORT="$base"
}

stop_kept() { # stops every kept server
    local name
    for name in "${!KEPT_PIDS[@]}"; do
        kill -TERM "${KEPT_PIDS[$name]}" 2>/dev/null || true
        wait "${KEPT_PIDS[$name]}" 2>/dev/null || true
    done
    KEPT_PIDS=()
    KEPT_PORTS=()
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
wrk_slice() { # name, slice, port, path, wrk args...: one slice of a measurement
    local name="$1" slice="$2" port="$3" path="$4"
    shift 4
    wrk -t"$THREADS" -c"$CONNECTIONS" -d"${SLICE}s" --latency "$@" \
        "http://127.0.0.1:$port$path" >"$WORK/$name.slice$slice.txt"
    cat "$WORK/$name.slice$slice.txt" >&2
}

warm_up() { # name, port, path, wrk args...: one second of a route before its slices, not
    # counted in its rate (a fresh server's first requests open its pool's connections and
    # prepare its statements; in a slice of 2 s they made its p99); wrk's report in name.txt
    local name="$1" port="$2" path="$3"
    shift 3
    wrk -t"$THREADS" -c"$CONNECTIONS" -d1s "$@" "http://127.0.0.1:$port$path" >"$WORK/$name.txt"
}

combine() { # name: one report of its slices, read as wrk's by rate, p99, non2xx and total
    awk '
        function ms(v) { n = v + 0; return v ~ /us$/ ? n / 1000 : (v ~ /ms$/ ? n : (v ~ /m$/ ? n * 60000 : n * 1000)) }
        /requests in/ { requests += $1; t = $4; sub(/,$/, "", t); seconds += ms(t) / 1000 }
        $1 == "99%" { if (ms($2) > worst) worst = ms($2) }
        /Non-2xx/ { failed += $NF }
        END {
            printf "%d requests in %.2fs\n", requests, seconds
            printf "Requests/sec: %.2f\n", (seconds > 0 ? requests / seconds : 0)
            printf "     99%%    %.2fms\n", worst
            if (failed > 0) printf "Non-2xx or 3xx responses: %d\n", failed
        }' "$WORK/$1".slice*.txt >"$WORK/$1.txt"
}

rate() { # the 2xx answers a second: a refusal (a 503 of the in-flight limit) is no create
    awk '
        function s(v) { n = v + 0; return v ~ /ms$/ ? n / 1000 : (v ~ /us$/ ? n / 1000000 : (v ~ /m$/ ? n * 60 : n)) }
        /requests in/ { requests = $1; t = $4; sub(/,$/, "", t); seconds = s(t) }
        /Non-2xx/ { failed = $NF }
        END { printf "%.0f", (seconds > 0 ? (requests - failed) / seconds : 0) }' "$WORK/$1.txt"
}
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

measure_routes() { # the reads on the running server in alternating slices, then its creates
    local id slice
    id="$(create_one)"
    warm_up warm-hello "$PORT" /healthz
    warm_up warm-status "$PORT" "/status/$id" -H "Authorization: $AUTH"
    warm_up warm-health "$PORT" /status -H "Authorization: $AUTH"
    for slice in $(seq 1 "$SLICES"); do
        wrk_slice hello "$slice" "$PORT" /healthz
        wrk_slice status "$slice" "$PORT" "/status/$id" -H "Authorization: $AUTH"
        wrk_slice health "$slice" "$PORT" /status -H "Authorization: $AUTH"
        if [[ "$DB" != sqlite ]]; then pgbench_slice select "$slice" -S; fi
    done
    combine hello
    combine status
    combine health
    if [[ "$DB" != sqlite ]]; then
        # The creates in turns with pgbench -N, as the reads with pgbench -S above.
        warm_up warm-create "$PORT" /initialize -s "$WORK/post.lua"
        # pgbench first: the warm-up's last creates are answered meanwhile. A slice begun at once
        # may find them still in flight, and the provider's limit (64) answers 503 at once.
        for slice in $(seq 1 "$SLICES"); do
            pgbench_slice write "$slice" -N
            wrk_slice create "$slice" "$PORT" /initialize -s "$WORK/post.lua"
        done
        combine create
    elif [[ -z "$BASELINE" ]]; then
        wrk_run create /initialize -s "$WORK/post.lua"
    fi
}

pgbench_slice() { # name, slice, pgbench args...: one slice of pgbench on the bench database,
    # one second longer: its first second is not counted (pgbench_tps), as the server's
    # warm-up is not. 64 new backends start with cold caches: the first second ran at 60-70 %
    # of the next ones, and slices of 2 s without it made the ceiling a quarter lower.
    local name="$1" slice="$2"
    shift 2
    pgbench "$@" -c "$CONNECTIONS" -j "$THREADS" -T $((SLICE + 1)) -P 1 "$bench_url" \
        >"$WORK/pgbench-$name.slice$slice.txt" 2>&1
}

pgbench_tps() { # name: the mean TPS of its slices' seconds, each slice's first left out
    awk 'FNR == 1 {first = 1} /^progress:/ { if (first) first = 0; else { sum += $4; n++ } }
        END {printf "%.0f", (n > 0 ? sum / n : 0)}' "$WORK/pgbench-$1".slice*.txt
}

measure_creates_beside_baseline() { # the running server's creates and BASELINE's, in turns
    local slice
    keep_server current
    BIN="$BASELINE" start_kept baseline $((PORT + 1)) "$WORK/baseline.db"
    warm_up warm-create "${KEPT_PORTS[current]}" /initialize -s "$WORK/post-current.lua"
    warm_up warm-baseline-create "${KEPT_PORTS[baseline]}" /initialize -s "$WORK/post-baseline.lua"
    for slice in $(seq 1 "$SLICES"); do
        wrk_slice create "$slice" "${KEPT_PORTS[current]}" /initialize -s "$WORK/post-current.lua"
        wrk_slice baseline-create "$slice" "${KEPT_PORTS[baseline]}" /initialize \
            -s "$WORK/post-baseline.lua"
    done
    combine create
    combine baseline-create
    stop_kept
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
def reference():  # as the service makes them (R-3.2): 15 bits of the millisecond, 25 random
    bits = ((int(time.time() * 1000) % (1 << 15)) << 25) | (int.from_bytes(os.urandom(4), "big") >> 7)
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

log_cost() { # db: hello with the request log off, at info, and at info as JSON, in turns
    local slice kind
    LOG_LEVEL=warn start_kept off $((PORT + 2)) "$1.off"
    start_kept text $((PORT + 3)) "$1.text"
    start_kept json $((PORT + 4)) "$1.json" --log-format json
    for kind in off text json; do warm_up "warm-log-$kind" "${KEPT_PORTS[$kind]}" /healthz; done
    for slice in $(seq 1 "$SLICES"); do
        for kind in off text json; do
            wrk_slice "hello-log-$kind" "$slice" "${KEPT_PORTS[$kind]}" /healthz
        done
    done
    for kind in off text json; do combine "hello-log-$kind"; done
    stop_kept
    local off
    off="$(rate hello-log-off)"
    result "GET /healthz, log off" "$off" "$(p99 hello-log-off)" "$(non2xx hello-log-off)" "itself" "$off" "-"
    result "GET /healthz, log text" "$(rate hello-log-text)" "$(p99 hello-log-text)" "$(non2xx hello-log-text)" "hello, log off" "$off" 0.90
    result "GET /healthz, log json" "$(rate hello-log-json)" "$(p99 hello-log-json)" "$(non2xx hello-log-json)" "hello, log off" "$off" 0.90
}

sample_memory() { # prints "rss_kib hwm_kib" of the server
    awk '/^VmRSS/ {r = $2} /^VmHWM/ {h = $2} END {print r, h}' "/proc/$SERVER_PID/status"
}

# Prints "rust_kib c_kib": the server's resident anonymous memory in mimalloc's arenas (the
# Rust allocator; it maps them from 0x20000000000 up, 11 hex digits starting with 2) and in the
# rest (glibc's heap and per-thread arenas, which SQLite's C code allocates from, and the
# threads' stacks), from /proc/<pid>/smaps. File mappings (the binary, SQLite's -shm) are left
# out.
sample_arenas() {
    awk '/^[0-9a-f]+-[0-9a-f]+ / {
            split($1, range, "-")
            if ($6 != "" && $6 != "[heap]") kind = "file"
            else if (length(range[1]) == 11 && substr(range[1], 1, 1) == "2") kind = "rust"
            else kind = "c"
            next
        }
        /^Rss:/ {kib[kind] += $2}
        END {printf "%d %d\n", kib["rust"], kib["c"]}' "/proc/$SERVER_PID/smaps"
}

# --memory: every route of the service, N requests each (MEMORY), in ROUNDS rounds; the
# resident memory after each round. Routes that change a transaction take one transaction
# each from the creates of their round: two creates per round's share (one set paid by the
# sandbox API, then cancelled by JSON and by the invoice form; one paid on the payment page,
# then cancelled by the form without id). Not sent: the Stripe routes (they need a Stripe
# account; localstripe answers a few hundred requests a second) and the dashboard's forms that
# change settings (credentials, users, webhooks, policies, second factor); sign-ins get a
# thousandth of N (see below).
route_run() { # name, method, path, count, [list], [body file], [capture prefix], [pattern]
    local name="$1" method="$2" path="$3" count="$4" list="${5:-}" body="${6:-}"
    local capture="${7:-}" pattern="${8:-}" headers="${ROUTE_HEADERS_EXTRA:-}"
    local out="$WORK/mem-${name//[^A-Za-z0-9]/_}.txt"
    rm -f "$out".done.*
    ROUTE_METHOD="$method" ROUTE_PATH="$path" ROUTE_COUNT="$count" ROUTE_LIST="$list" \
        ROUTE_BODY="$body" ROUTE_CAPTURE="$capture" ROUTE_PATTERN="$pattern" \
        ROUTE_HEADERS="$headers" THREADS_IN_RUN="$THREADS" ROUTE_DONE="$out.done" \
        wrk -t"$THREADS" -c"$CONNECTIONS" -d1800s -s "$ROOT/scripts/load-routes.lua" \
        "http://127.0.0.1:$PORT/" >"$out" 2>&1 &
    local wrk_pid=$!
    # wrk runs for its whole -d even when every thread has stopped: end it (it reports on
    # SIGINT) once each thread has left its marker.
    # (wrk ignores SIGINT until its threads run: sent again until it ends.)
    while kill -0 "$wrk_pid" 2>/dev/null; do
        if (( $(find "$WORK" -maxdepth 1 -name "${out##*/}.done.*" | wc -l) >= THREADS )); then
            kill -INT "$wrk_pid" 2>/dev/null || true
        fi
        sleep 0.1
    done
    wait "$wrk_pid" || { echo "wrk failed on $name:" >&2; cat "$out" >&2; exit 1; }
    local statuses seconds
    statuses="$(awk '/^statuses:/ {$1 = ""; print substr($0, 2)}' "$out")"
    seconds="$(awk '/requests in/ {print $4}' "$out")"
    printf '  %-34s %8s in %-8s %s\n' "$name" "$count" "$seconds" "$statuses"
}

multipart() { # file, then name=value fields; a field "file" becomes a small text file part
    python3 - "$@" <<'PY'
import sys
path, fields = sys.argv[1], sys.argv[2:]
parts = []
for field in fields:
    name, value = field.split("=", 1)
    if name == "file":
        parts.append('--loadboundary\r\nContent-Disposition: form-data; name="file"; '
                     'filename="invoice.txt"\r\nContent-Type: text/plain\r\n\r\n' + value + '\r\n')
    else:
        parts.append('--loadboundary\r\nContent-Disposition: form-data; name="%s"\r\n\r\n%s\r\n'
                     % (name, value))
with open(path, "w", newline="") as f:
    f.write("".join(parts) + "--loadboundary--\r\n")
PY
}

memory_run() { # db: every route MEMORY times, resident memory after each round
    local db="$1" json='Content-Type: application/json' form='Content-Type: multipart/form-data; boundary=loadboundary'
    local origin="Origin: http://127.0.0.1:$PORT"
    start_server "$db" --public-url "http://127.0.0.1:$PORT"
    local api="Authorization: $AUTH"
    # What the fixed requests read: a pending transaction, a paid one with an item left,
    # a receipt, a stored file, a dashboard session.
    local pending paid receipt upload file_id file_token provider invitation cookie
    pending="$(create_one)"
    paid="$(create_one)"
    curl -fsS -X POST -H "$api" -H "$json" -d '{}' \
        "http://127.0.0.1:$PORT/sandbox/transactions/$paid/pay" >/dev/null
    receipt="$(curl -fsS -X PATCH -H "$api" -H "$json" -d '{"itemsOrder":[1]}' \
        "http://127.0.0.1:$PORT/cancel/$paid" |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["receiptNumber"])')"
    upload="$(curl -fsS -H "$api" -F 'file=@-;filename=terms.txt;type=text/plain' \
        "http://127.0.0.1:$PORT/files" <<<'The terms of the trip.')"
    file_id="$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["fileId"])' "$upload")"
    file_token="$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["token"])' "$upload")"
    provider="$(curl -fsS -H "$api" "http://127.0.0.1:$PORT/status" |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["provider"])')"
    invitation="$("$BIN" provider invite-user --db "$db" --provider "$provider" \
        --email load@example.com --role admin --public-url "http://127.0.0.1:$PORT" |
        python3 -c 'import json,sys,urllib.parse as u; print(u.urlsplit(json.load(sys.stdin)["url"]).path)')"
    cookie="$(curl -sS -o /dev/null -D - -H "$origin" \
        --data-urlencode 'password=correct horse battery staple' \
        --data-urlencode 'password_repeat=correct horse battery staple' \
        "http://127.0.0.1:$PORT$invitation" |
        awk -F'[=;]' 'tolower($0) ~ /^set-cookie: checkout_session=/ {print $2; exit}')"
    [[ -n "$cookie" ]] || { echo "no dashboard session" >&2; exit 1; }
    local session="Cookie: checkout_session=$cookie"

    printf '%s' "$BODY" >"$WORK/create.json"
    printf '%s' '{"title":"Load trip, renamed","note":"Changed by the memory run."}' >"$WORK/update.json"
    printf '%s' '{}' >"$WORK/empty.json"
    printf '%s' '{"itemsOrder":[1]}' >"$WORK/cancel.json"
    printf '%s' '{"itemsOrder":[2]}' >"$WORK/quote-cancel.json"
    multipart "$WORK/invoice.form" itemsOrder=2 invoiceTitle=Invoice invoiceNumber=INV-1 file=invoice
    multipart "$WORK/cancel.form" 'transactionId={1}' itemsOrder=1 file=invoice
    multipart "$WORK/upload.form" 'file=The terms of the trip.'
    printf '%s' 'name_on_card=Load+Test&card_number=4242424242424242&expiry=12%2F30&cvc=123&first_name=Load&last_name=Test&email=load%40example.com&billing_name=Load+Test&form_token={2}' >"$WORK/pay.form"

    local share=$(( (MEMORY + ROUNDS - 1) / ROUNDS )) round
    echo
    echo "memory: every route, $share requests each per round, $ROUNDS rounds (server pid $SERVER_PID)"
    for round in $(seq 1 "$ROUNDS"); do
        local r="$WORK/round$round"
        echo "round $round:"
        ROUTE_HEADERS_EXTRA="$api"$'\n'"$json" route_run "POST /initialize" POST /initialize "$share" "" \
            "$WORK/create.json" "$r.a" '"transactionId":"([^"]+)"'$'\n''/pay/([^"]+)"'
        ROUTE_HEADERS_EXTRA="$api"$'\n'"$json" route_run "POST /transactions" POST /transactions "$share" "" \
            "$WORK/create.json" "$r.b" '"transactionId":"([^"]+)"'$'\n''/pay/([^"]+)"'
        cat "$r".a.* >"$r.a"
        cat "$r".b.* >"$r.b"
        ROUTE_HEADERS_EXTRA="Accept-Language: en" route_run "GET /pay/{token}" GET '/pay/{2}' "$share" "$r.b" \
            "" "$r.p" 'action="/pay/([^"/]+)"'$'\n''name="form_token" value="([^"]+)"'
        cat "$r".p.* >"$r.p"
        ROUTE_HEADERS_EXTRA="$origin"$'\n''Content-Type: application/x-www-form-urlencoded' \
            route_run "POST /pay/{token}" POST '/pay/{1}' "$share" "$r.p" "$WORK/pay.form"
        ROUTE_HEADERS_EXTRA="$api"$'\n'"$json" route_run "POST /sandbox/…/pay" POST \
            '/sandbox/transactions/{1}/pay' "$share" "$r.a" "$WORK/empty.json"
        ROUTE_HEADERS_EXTRA="$api"$'\n'"$json" route_run "PATCH /cancel/{id}" PATCH '/cancel/{1}' \
            "$share" "$r.a" "$WORK/cancel.json"
        ROUTE_HEADERS_EXTRA="$api"$'\n'"$form" route_run "PATCH /cancel/{id}/invoice" PATCH \
            '/cancel/{1}/invoice' "$share" "$r.a" "$WORK/invoice.form"
        ROUTE_HEADERS_EXTRA="$api"$'\n'"$form" route_run "PATCH /cancel" PATCH /cancel \
            "$share" "$r.b" "$WORK/cancel.form"
        ROUTE_HEADERS_EXTRA="$api"$'\n'"$form" route_run "POST /files" POST /files "$share" "" \
            "$WORK/upload.form" "$r.f" '"fileId":"([^"]+)"'
        cat "$r".f.* >"$r.f"
        ROUTE_HEADERS_EXTRA="$api" route_run "DELETE /files/{id}" DELETE '/files/{1}' "$share" "$r.f"
        ROUTE_HEADERS_EXTRA="" route_run "GET /healthz" GET /healthz "$share"
        ROUTE_HEADERS_EXTRA="$api" route_run "GET /status" GET /status "$share"
        ROUTE_HEADERS_EXTRA="$api" route_run "GET /status/{id}" GET "/status/$pending" "$share"
        ROUTE_HEADERS_EXTRA="$api"$'\n'"$json" route_run "PUT /{id}" PUT "/$pending" "$share" "" \
            "$WORK/update.json"
        ROUTE_HEADERS_EXTRA="$api"$'\n'"$json" route_run "POST /quote" POST /quote "$share" "" \
            "$WORK/create.json"
        ROUTE_HEADERS_EXTRA="$api"$'\n'"$json" route_run "POST /cancel/{id}/quote" POST \
            "/cancel/$paid/quote" "$share" "" "$WORK/quote-cancel.json"
        ROUTE_HEADERS_EXTRA="$api" route_run "GET /receipts/{number}" GET "/receipts/$receipt" "$share"
        ROUTE_HEADERS_EXTRA="$api" route_run "GET /files/{id}" GET "/files/$file_id" "$share"
        ROUTE_HEADERS_EXTRA="$api" route_run "POST /files/{id}/renew" POST "/files/$file_id/renew" "$share"
        ROUTE_HEADERS_EXTRA="" route_run "GET /files/shared/{token}" GET "/files/shared/$file_token" "$share"
        ROUTE_HEADERS_EXTRA="$api" route_run "GET /events" GET '/events?limit=100' "$share"
        ROUTE_HEADERS_EXTRA="" route_run "GET /openapi.json" GET /openapi.json "$share"
        ROUTE_HEADERS_EXTRA="" route_run "GET /assets/checkout.css" GET /assets/checkout.css "$share"
        ROUTE_HEADERS_EXTRA="" route_run "GET /assets/stripe-checkout.js" GET /assets/stripe-checkout.js "$share"
        # Each sign-in hashes the password (Argon2id, tens of milliseconds by design): a
        # thousandth of the others' count.
        printf 'email=load%%40example.com&password=correct+horse+battery+staple' >"$WORK/sign-in.form"
        ROUTE_HEADERS_EXTRA="$origin"$'\n''Content-Type: application/x-www-form-urlencoded' \
            route_run "POST /dashboard/sign-in" POST /dashboard/sign-in $(( share / 1000 + 1 )) "" \
            "$WORK/sign-in.form"
        # The overview reads its sums per quarter hour, whatever was paid (migration 23).
        ROUTE_HEADERS_EXTRA="$session"$'\n''Accept-Language: en' \
            route_run "GET /dashboard/overview" GET /dashboard/overview "$share"
        local page
        for page in sign-in transactions "transactions/{id}=transactions/$pending" \
            "transactions/{id}/cancel=transactions/$paid/cancel?item=2" audit users api security \
            policies "policies/{scope}=policies/FLIGHT" webhooks assets/dashboard.css \
            assets/dashboard.js; do
            ROUTE_HEADERS_EXTRA="$session"$'\n''Accept-Language: en' \
                route_run "GET /dashboard/${page%%=*}" GET "/dashboard/${page#*=}" "$share"
        done
        printf 'after round %s: VmRSS, VmHWM (KiB): %s; anonymous, Rust allocator / C allocator and stacks (KiB): %s\n' \
            "$round" "$(sample_memory)" "$(sample_arenas)"
    done
    stop_server
}

echo "store: $DB; wrk: $CONNECTIONS connections, $THREADS threads, ${DURATION}s per route; cores: $(nproc); RUST_LOG=$LOG_LEVEL" >&2
if [[ "$DB" == sqlite ]]; then
    start_server "$WORK/load.db"
    measure_routes
    if [[ -n "$BASELINE" ]]; then measure_creates_beside_baseline; else stop_server; fi
    stored="$(python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('select count(*) from transactions').fetchone()[0])" "$WORK/load.db")"
    echo "one-commit ceiling (python3 sqlite3, one thread, synchronous=FULL)..." >&2
    ceiling="$(one_commit_ceiling "$WORK/load.db")"
    hello="$(rate hello)"
    result "GET /healthz (hello)" "$hello" "$(p99 hello)" "$(non2xx hello)" "itself" "$hello" "-"
    result "GET /status/{id}" "$(rate status)" "$(p99 status)" "$(non2xx status)" "hello" "$hello" 0.75
    result "GET /status (auth only)" "$(rate health)" "$(p99 health)" "$(non2xx health)" "hello" "$hello" 0.90
    result "POST /initialize (durable)" "$(rate create)" "$(p99 create)" "$(non2xx create)" "one-commit inserts" "$ceiling" "-"
    if [[ -n "$BASELINE" ]]; then
        result "POST /initialize, baseline" "$(rate baseline-create)" "$(p99 baseline-create)" "$(non2xx baseline-create)" "itself" "$(rate baseline-create)" "-"
        result "POST /initialize (durable)" "$(rate create)" "$(p99 create)" "$(non2xx create)" "baseline creates" "$(rate baseline-create)" 2
    fi
    latency_checks="status p99 $(p99 status) (target <= 5 ms: $(under_ms "$(p99 status)" 5)); creates p99 $(p99 create) (target <= 15 ms: $(under_ms "$(p99 create)" 15))"
    if [[ "$LOG_LEVEL" == info ]]; then log_cost "$WORK/log.db"; fi
    # The creates measured, their warm-up's (with a baseline) and the one of create_one.
    acked=$(( $(total create) - $(non2xx create) + 1 ))
    if [[ -f "$WORK/warm-create.txt" ]]; then
        acked=$(( acked + $(total warm-create) - $(non2xx warm-create) ))
    fi
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
    start_server "$target" --db-pool-size "$POOL"
    measure_routes
    stop_server
    select_tps="$(pgbench_tps select)"
    write_tps="$(pgbench_tps write)"
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
echo "store=$DB connections=$CONNECTIONS threads=$THREADS duration=${DURATION}s slices=$SLICES cores=$(nproc) RUST_LOG=$LOG_LEVEL $(date -u +%FT%TZ)"
printf '%-28s %11s %9s %7s   %-22s %11s %6s  %5s\n' route rate p99 non-2xx ceiling "ceiling rate" ratio target
for line in "${RESULTS[@]}"; do echo "$line"; done
echo "$latency_checks"
echo "$summary"
