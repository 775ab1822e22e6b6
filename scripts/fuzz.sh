#!/usr/bin/env bash
# Fuzzes the parsers that read untrusted input with cargo-fuzz (libFuzzer, AddressSanitizer
# with leak detection), one target after the other, each for SECONDS (default 600):
#
#   create_body   creation bodies through checkout_engine::validate::checkout, then the quote
#   cancel_form   multipart cancellation forms through the streaming parser, boundary varied
#   basic_auth    Basic Authorization headers through host_http::auth::parse_basic
#   preview_line  JSON-Lines `preview` and `quote` lines through checkout_engine::jsonl
#
# The committed corpus, fuzz/corpus/<target> (seeds from fixtures/ and hand-written samples,
# plus a minimal cover of what earlier runs found), is only read; what a run finds goes into
# fuzz/target/corpus/<target> (ignored). FUZZ_MERGE=1 then adds to fuzz/corpus/<target> only
# the found inputs that reach code the corpus does not (libFuzzer -set_cover_merge=1 over
# edges, -use_counters=0), which keeps the committed corpus small.
#
# Writes one result line per target (also to fuzz/target/fuzz-results.txt) and exits
# non-zero on any crash, timeout, leak or out-of-memory; crashing inputs are written to
# fuzz/artifacts/<target>/, each run's full log to fuzz/target/logs/<target>.log.
#
#   bash scripts/fuzz.sh                  # 4 x 600 s
#   bash scripts/fuzz.sh 60               # 4 x 60 s
#   FUZZ_TARGETS="basic_auth" bash scripts/fuzz.sh 30
#
# Needs `cargo install cargo-fuzz --locked`. AddressSanitizer needs an unstable rustc flag
# (-Zsanitizer), so on a stable toolchain RUSTC_BOOTSTRAP=1 is set for this build only; it
# has its own target directory (fuzz/target) and never touches the main build.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds="${1:-600}"
read -r -a targets <<< "${FUZZ_TARGETS:-create_body cancel_form basic_auth preview_line}"
flags=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=8192
       -detect_leaks=1 -print_final_stats=1)

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "cargo-fuzz is not installed: cargo install cargo-fuzz --locked" >&2
    exit 2
fi
if ! rustc --version | grep -q nightly; then
    export RUSTC_BOOTSTRAP=1
fi

cd "$root/fuzz" || exit 2
mkdir -p target/logs
results="target/fuzz-results.txt"
: > "$results"

echo "building ${targets[*]} (release, debug assertions, AddressSanitizer)"
# One build of every target, so that all of them test the same sources, then the binaries run
# directly with the options `cargo fuzz run` would give them.
if ! cargo fuzz build --sanitizer address; then
    echo "cargo fuzz build failed" >&2
    exit 2
fi
bin="target/$(rustc -vV | sed -n 's/^host: //p')/release"
# detect_odr_violation=0 as `cargo fuzz run` sets it: the bundled SQLite amalgamation, built by
# gcc, has two function-local statics of one name, which AddressSanitizer's ODR check
# misreports. Leak detection stays on.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_odr_violation=0:detect_leaks=1"

failed=0
for target in "${targets[@]}"; do
    work="target/corpus/$target"
    log="target/logs/$target.log"
    mkdir -p "$work" "artifacts/$target" "corpus/$target"
    echo "fuzzing $target for $seconds s (log: fuzz/$log)"
    "$bin/$target" "${flags[@]}" -artifact_prefix="artifacts/$target/" \
        "$work" "corpus/$target" > "$log" 2>&1
    status=$?

    done_line="$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -n 1)"
    runs="$(grep -oE 'stat::number_of_executed_units: +[0-9]+' "$log" | grep -oE '[0-9]+$')"
    speed="$(grep -oE 'stat::average_exec_per_sec: +[0-9]+' "$log" | grep -oE '[0-9]+$')"
    rss="$(grep -oE 'stat::peak_rss_mb: +[0-9]+' "$log" | grep -oE '[0-9]+$')"
    slowest="$(grep -oE 'stat::slowest_unit_time_sec: +[0-9]+' "$log" | grep -oE '[0-9]+$')"
    cov="$(grep -oE 'cov: [0-9]+' <<< "$done_line" | grep -oE '[0-9]+')"
    ft="$(grep -oE 'ft: [0-9]+' <<< "$done_line" | grep -oE '[0-9]+')"
    corp="$(grep -oE 'corp: [0-9]+/[0-9]+[a-zA-Z]*' <<< "$done_line" | cut -d' ' -f2)"

    if [[ $status -eq 0 && -n "$done_line" ]]; then
        line="$target: ok, ${runs:-?} runs in $seconds s (${speed:-?} exec/s)"
        line+=", cov ${cov:-?} ft ${ft:-?}, corpus ${corp:-?}, peak RSS ${rss:-?} MB"
        line+=", slowest input ${slowest:-?} s, 0 crashes, timeouts, leaks"
        if [[ "${FUZZ_MERGE:-0}" == 1 ]]; then
            before="$(find "corpus/$target" -type f | wc -l)"
            "$bin/$target" -set_cover_merge=1 -use_counters=0 \
                -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
                "corpus/$target" "$work" > "target/logs/$target.merge.log" 2>&1 || failed=1
            after="$(find "corpus/$target" -type f | wc -l)"
            line="$line; merged $((after - before)) inputs into fuzz/corpus/$target"
        fi
    else
        failed=1
        kind="failure (exit $status)"
        if grep -q 'ERROR: LeakSanitizer' "$log"; then kind="LEAK"
        elif grep -q 'ERROR: libFuzzer: timeout' "$log"; then kind="TIMEOUT"
        elif grep -q 'ERROR: libFuzzer: out-of-memory' "$log"; then kind="OUT-OF-MEMORY"
        elif grep -qE 'ERROR: AddressSanitizer|deadly signal|panicked' "$log"; then kind="CRASH"
        fi
        artifact="$(grep -oE 'Test unit written to [^ ]+' "$log" | tail -n 1 | cut -d' ' -f5)"
        line="$target: $kind after ${runs:-?} runs"
        line+="; input: fuzz/${artifact:-artifacts/$target/}; log: fuzz/$log"
    fi
    echo "$line" | tee -a "$results"
done

echo "results: fuzz/$results; crashing inputs (if any): fuzz/artifacts/<target>/"
echo "reproduce one: cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run <target> artifacts/<target>/<file>"
exit "$failed"
