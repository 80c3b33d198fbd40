#!/bin/sh
# Runs each libFuzzer harness for FUZZ_SECONDS with its seed corpus
# (tests/fuzz/<name>/seeds, built by the harness's own seed rule in
# tests/fuzz/seeds.sh) and a working corpus under build/fuzz/corpus/.
# Adds each run's executions to tests/fuzz/EXECUTIONS (the running total
# kept in the repository).
set -u
secs=${FUZZ_SECONDS:-60}
status=0
for h in "$@"; do
    name=$(basename "$h")
    corpus=build/fuzz/corpus/$name; mkdir -p "$corpus"
    seeds=tests/fuzz/seeds/$name
    [ -x tests/fuzz/seeds.sh ] && sh tests/fuzz/seeds.sh "$name" "$corpus"
    log=build/fuzz/$name.log
    "$h" -max_total_time="$secs" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 "$corpus" $( [ -d "$seeds" ] && echo "$seeds" ) >"$log" 2>&1
    rc=$?
    execs=$(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}')
    echo "$name: exit $rc, ${execs:-0} executions in ${secs}s"
    if [ "$rc" -ne 0 ]; then tail -n 40 "$log"; status=1; fi
    if [ -n "${execs:-}" ]; then
        f=tests/fuzz/EXECUTIONS; touch "$f"
        old=$(awk -v n="$name" '$1==n {print $2}' "$f"); old=${old:-0}
        grep -v "^$name " "$f" >"$f.tmp" 2>/dev/null; mv "$f.tmp" "$f"
        echo "$name $((old + execs))" >>"$f"; sort -o "$f" "$f"
    fi
done
exit $status
