#!/bin/sh
# Runs each libFuzzer harness for FUZZ_SECONDS with its seed corpus
# (tests/fuzz/seeds/<name>, plus the cuts of the real traces that
# tests/fuzz/seeds.sh writes) and a working corpus under build/fuzz/corpus/.
# Adds each run's executions to tests/fuzz/EXECUTIONS (the running total
# kept in the repository, one "harness executions" line each; every run
# is also a line of tests/fuzz/RUNS), under a lock
# so that several runs at once (one per harness, or make fuzz beside a long
# background run) never lose a count.
#
# Environment: FUZZ_SECONDS (default 60), FUZZ_MAX_LEN (default 65536),
# FUZZ_NICE (default 0; e.g. 19 on a shared machine), SHARED.
# Crash, leak and timeout inputs go to build/fuzz/artifacts/; a harness that
# fails makes the script exit 1 after the others have run.
set -u
secs=${FUZZ_SECONDS:-60}
maxlen=${FUZZ_MAX_LEN:-65536}
nicel=${FUZZ_NICE:-0}
status=0
f=tests/fuzz/EXECUTIONS
mkdir -p build/fuzz/artifacts tests/fuzz

# add_execs NAME N: EXECUTIONS[NAME] += N, atomically with respect to other
# runs of this script.
add_execs() {
    (
        command -v flock >/dev/null 2>&1 && flock -x 9
        touch "$f"
        old=$(awk -v n="$1" '$1==n {print $2}' "$f"); old=${old:-0}
        awk -v n="$1" '$1!=n' "$f" >"$f.tmp.$$"
        echo "$1 $((old + $2))" >>"$f.tmp.$$"
        sort -o "$f.tmp.$$" "$f.tmp.$$"
        mv "$f.tmp.$$" "$f"
        # The ledger the totals can be rebuilt from, one line per run.
        echo "$1 $2 ${secs}s max_len=$maxlen exit=$3" >>tests/fuzz/RUNS
    ) 9>>build/fuzz/EXECUTIONS.lock
}

for h in "$@"; do
    name=$(basename "$h")
    corpus=build/fuzz/corpus/$name; mkdir -p "$corpus"
    seeds=tests/fuzz/seeds/$name
    [ -f tests/fuzz/seeds.sh ] && sh tests/fuzz/seeds.sh "$name" "$corpus"
    log=build/fuzz/$name.log
    nice -n "$nicel" "$h" -max_total_time="$secs" -max_len="$maxlen" -timeout=10 \
        -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="build/fuzz/artifacts/$name-" \
        "$corpus" $( [ -d "$seeds" ] && echo "$seeds" ) >"$log" 2>&1
    rc=$?
    # libFuzzer's final statistics: "stat::number_of_executed_units: N"
    # (printed on a clean end and on a crash; a run killed from outside
    # prints none and adds nothing).
    execs=$(awk '/^stat::number_of_executed_units:/ {n += $NF} END {if (NR && n) print n}' "$log")
    echo "$name: exit $rc, ${execs:-0} executions in ${secs}s"
    if [ "$rc" -ne 0 ]; then tail -n 40 "$log"; status=1; fi
    case "${execs:-}" in
    ''|*[!0-9]*) ;;
    *) add_execs "$name" "$execs" "$rc" ;;
    esac
done
exit $status
