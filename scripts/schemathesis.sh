#!/usr/bin/env bash
# Schemathesis 4 against a real sandbox server: builds checkout-server, starts it on a fresh
# SQLite database with one provider credential, and runs every check in the examples, coverage,
# fuzzing and stateful phases against the server's own /openapi.json with HTTP Basic auth, a
# fixed seed and a bounded number of examples. schemathesis.toml (at the root) names, per
# operation, the refusals that come from rules no JSON Schema can state, and
# scripts/schemathesis_checks.py holds those refusals to their messages. Exits non-zero on any
# failure or tool error; always stops the server. The tool, pinned, lives in a virtual
# environment under target/, created from PyPI on first use.
#
#   bash scripts/schemathesis.sh              # seed 12, 30 examples per operation
#   SCHEMATHESIS_SEED=7 SCHEMATHESIS_MAX_EXAMPLES=100 bash scripts/schemathesis.sh
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
version="4.32.5"
venv="$root/target/schemathesis-venv"
seed="${SCHEMATHESIS_SEED:-12}"
max_examples="${SCHEMATHESIS_MAX_EXAMPLES:-30}"
report="$root/target/schemathesis-report"

if [[ "$("$venv/bin/schemathesis" --version 2>/dev/null)" != *" $version" ]]; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$version"
fi
"$venv/bin/schemathesis" --version

cargo build --quiet --locked -p host-http --bin checkout-server
bin="${CARGO_TARGET_DIR:-$root/target}/debug/checkout-server"

work="$(mktemp -d)"
server_pid=""
stop() {
    if [[ -n "$server_pid" ]]; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap stop EXIT

db="$work/checkout.db"
credential="$("$bin" provider create --db "$db" --name schemathesis 2>/dev/null)"
auth="$(python3 -c 'import json,sys; c=json.loads(sys.argv[1]); print(c["widgetId"]+":"+c["backendSecret"])' "$credential")"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
base="http://127.0.0.1:$port"

RUST_LOG=warn "$bin" serve --sandbox --db "$db" --listen "127.0.0.1:$port" 2>"$work/server.log" &
server_pid=$!
for _ in $(seq 1 100); do
    if python3 -c 'import sys,urllib.request; urllib.request.urlopen(sys.argv[1], timeout=1)' "$base/healthz" 2>/dev/null; then
        break
    fi
    sleep 0.1
done

started=$(date +%s)
status=0
# Every check runs: all are on by default (max_response_time needs a limit and
# object_level_authorization a second credential, so neither applies). `--checks all` would say
# the same but also override the per-operation settings of schemathesis.toml.
# One worker: with two, Hypothesis in both threads parses source for its strategy reprs at
# once, and CPython 3.11 (Debian 12's python3) keeps the AST constructor's recursion depth per
# interpreter, not per thread, so the two can corrupt it ("SystemError: AST constructor
# recursion depth mismatch", python/cpython#106905); one worker also makes a seed's coverage
# and fuzzing cases the same in every run. No example database: a run never depends on an
# earlier one.
"$venv/bin/schemathesis" --config-file "$root/schemathesis.toml" run "$base/openapi.json" \
    --auth "$auth" \
    --phases examples,coverage,fuzzing,stateful \
    --seed "$seed" \
    --max-examples "$max_examples" \
    --workers 1 \
    --generation-database none \
    --request-timeout 10 \
    --report junit --report-dir "$report" \
    --no-color || status=$?
echo "schemathesis: exit $status after $(( $(date +%s) - started )) s (seed $seed, $max_examples examples)"
if grep -q -i "panicked" "$work/server.log"; then
    echo "the server panicked:" >&2
    cat "$work/server.log" >&2
    status=1
fi
exit "$status"
