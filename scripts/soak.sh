#!/usr/bin/env bash
# Kill -9 soak of checkout-server, run by hand (not in CI). Each cycle drives creates, sandbox
# payments and cancellations (creates and cancellations with Idempotency-Keys) from a few client
# threads for a random 2-4 s, kills the server with SIGKILL at that instant, restarts it on the
# same database, retries every request whose outcome was unknown with the same key until it
# settles exactly once, and checks: every acknowledged create readable, every acknowledged
# payment PAID or later, every SUCCESS cancellation visible with its items CANCELLED, nothing
# unacknowledged applied, Σ refunded ≤ paid per transaction (R-4.5), replays identical (R-9.1),
# and the database's own integrity (SQLite integrity_check and foreign_key_check; PostgreSQL
# amcheck) with consistency rules over every row. The client and checker are
# scripts/soak.py (Python 3 standard library only).
#
# Usage: scripts/soak.sh [--db sqlite|postgres://user@host:port/db] [--cycles N=200]
#                        [--min-load S=2] [--max-load S=4] [--threads N=4] [--seed N]
#                        [--bin PATH] [--keep]
#   --db sqlite           a fresh SQLite file in a scratch directory (the default)
#   --db postgres://…     a PostgreSQL server where the script may create a database: it creates
#                         a fresh one, and drops it afterwards
#   --bin PATH            the binary to test (default target/release/checkout-server, built with
#                         `cargo build --release --locked -p host-http` when missing)
#   --keep                keep the scratch directory (and the PostgreSQL database); they are
#                         always kept when an anomaly is found
#   --replays, --create-share, --lease-ms, --settle-s, --final-settle-s: passed on to
#                         scripts/soak.py (python3 scripts/soak.py --help)
# Writes a summary (cycles, acknowledged operations per kind, unknown outcomes, retried,
# anomalies) to stdout and to summary.json in the scratch directory; exits 1 on any anomaly.
# Needs python3; psql for PostgreSQL. RUST_LOG sets the server's log level (default warn).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DB="sqlite"
BIN=""
KEEP=0
PASS=()
while (($#)); do
    case "$1" in
        --db) DB="$2"; shift 2 ;;
        --bin) BIN="$2"; shift 2 ;;
        --keep) KEEP=1; shift ;;
        --cycles | --min-load | --max-load | --threads | --seed | --replays | --create-share | \
        --lease-ms | --settle-s | --final-settle-s)
            PASS+=("$1" "$2"); shift 2 ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "unknown option: $1 (see --help)" >&2; exit 2 ;;
    esac
done

if [[ -z "$BIN" ]]; then
    BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/checkout-server"
    if [[ ! -x "$BIN" ]]; then
        cargo build --release --locked -p host-http --manifest-path "$ROOT/Cargo.toml" >&2
    fi
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/checkout-soak.XXXXXX")"
PG_ADMIN=""
PG_DB=""
STATUS=1
cleanup() {
    if [[ -n "$PG_DB" ]]; then
        if ((STATUS == 0 && KEEP == 0)); then
            psql "$PG_ADMIN" -X -qc "DROP DATABASE IF EXISTS $PG_DB WITH (FORCE)" >/dev/null 2>&1 || true
        else
            echo "PostgreSQL database kept: $PG_DB" >&2
        fi
    fi
    if ((STATUS == 0 && KEEP == 0)); then
        rm -rf "$WORK"
    else
        echo "scratch directory kept: $WORK (server.log, summary.json)" >&2
    fi
}
trap cleanup EXIT

# A copy, so that a rebuild during the run does not change the binary between two restarts.
cp "$BIN" "$WORK/checkout-server"
BIN="$WORK/checkout-server"
"$BIN" --version

case "$DB" in
    sqlite)
        TARGET="$WORK/soak.db"
        ;;
    postgres://* | postgresql://*)
        PG_ADMIN="$DB"
        PG_DB="checkout_soak_$$_$RANDOM"
        psql "$PG_ADMIN" -X -qc "CREATE DATABASE $PG_DB" >/dev/null
        TARGET="$(python3 -c 'import sys, urllib.parse as u; p = u.urlsplit(sys.argv[1]); print(u.urlunsplit(p._replace(path="/" + sys.argv[2])))' "$PG_ADMIN" "$PG_DB")"
        ;;
    *) echo "--db takes sqlite or a postgres:// URL" >&2; exit 2 ;;
esac

set +e
python3 "$ROOT/scripts/soak.py" --bin "$BIN" --db "$TARGET" --work "$WORK" "${PASS[@]}"
STATUS=$?
set -e
exit "$STATUS"
