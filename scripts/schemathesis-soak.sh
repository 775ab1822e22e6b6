#!/usr/bin/env bash
# Schemathesis with random seeds: runs scripts/schemathesis.sh (same server setup, checks,
# phases and schemathesis.toml; the same pinned tool in target/schemathesis-venv) once per seed,
# N times, each with a fresh random seed, and keeps going after a failing seed. At the end it
# lists every seed with its exit status, so a failure can be replayed with
# `SCHEMATHESIS_SEED=<seed> bash scripts/schemathesis.sh`. CI keeps the fixed seed of
# scripts/schemathesis.sh; this is for finding what that seed does not reach.
#
#   bash scripts/schemathesis-soak.sh            # 10 random seeds, 30 examples per operation
#   bash scripts/schemathesis-soak.sh 3          # 3 seeds
#   SCHEMATHESIS_MAX_EXAMPLES=100 bash scripts/schemathesis-soak.sh 5
#
# Each run's log is kept in target/schemathesis-soak/seed-<seed>.log. Exits non-zero when any
# seed failed.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
runs="${1:-10}"
if ! [[ "$runs" =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: $0 [number of seeds, default 10]" >&2
    exit 2
fi
logs="$root/target/schemathesis-soak"
mkdir -p "$logs"

failed=()
summary=()
started=$(date +%s)
for run in $(seq 1 "$runs"); do
    # 31 random bits: Hypothesis takes any integer seed.
    seed=$(( (RANDOM << 16 | RANDOM) & 0x7fffffff ))
    log="$logs/seed-$seed.log"
    echo "== run $run of $runs: seed $seed (log: $log)"
    status=0
    SCHEMATHESIS_SEED="$seed" bash "$root/scripts/schemathesis.sh" >"$log" 2>&1 || status=$?
    tail -n 3 "$log"
    summary+=("seed $seed: exit $status")
    if [[ "$status" -ne 0 ]]; then
        failed+=("$seed")
    fi
done

echo "== $runs seeds in $(( $(date +%s) - started )) s"
printf '%s\n' "${summary[@]}"
if [[ "${#failed[@]}" -gt 0 ]]; then
    echo "failing seeds: ${failed[*]} (replay: SCHEMATHESIS_SEED=<seed> bash scripts/schemathesis.sh)" >&2
    exit 1
fi
