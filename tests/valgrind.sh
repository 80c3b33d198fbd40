#!/bin/sh
# Runs a reduced main job under Valgrind (memcheck): the built-in comparison
# (`agentreplay demo`, one worker process, VALGRIND_DURATION seconds of
# traffic per point, default 10), one `sim` of the main configuration, and
# `load` against `serve` (the engine, with injected faults) on loopback,
# both under Valgrind;
# fails on any memory error or any definite, indirect or possible leak.
# Usage: tests/valgrind.sh [BINARY]   (default build/release/agentreplay)
# The logs go to build/valgrind/.
set -u
bin=${1:-build/release/agentreplay}
dur=${VALGRIND_DURATION:-10}
out=build/valgrind
mkdir -p "$out"
command -v valgrind >/dev/null 2>&1 || { echo "valgrind: not installed (make deps)"; exit 1; }
vg="valgrind --leak-check=full --show-leak-kinds=definite,indirect,possible \
 --errors-for-leak-kinds=definite,indirect,possible --error-exitcode=1 --track-origins=yes"
status=0
run() { # name args...
    name=$1; shift
    start=$(date +%s)
    $vg --log-file="$out/$name.log" "$bin" "$@" >"$out/$name.out" 2>&1
    rc=$?
    summary=$(grep -E "ERROR SUMMARY" "$out/$name.log" | tail -n 1 | sed 's/^==[0-9]*== //')
    leaks=$(grep -E "definitely lost|indirectly lost|possibly lost" "$out/$name.log" | sed 's/^==[0-9]*== *//' | tr '\n' ';')
    echo "valgrind $name: exit $rc, $summary ($leaks) $(( $(date +%s) - start ))s"
    [ "$rc" -eq 0 ] || { status=1; grep -E "^==[0-9]+== (Invalid|Conditional|.*lost in)" "$out/$name.log" | head -20; }
}
rm -rf "$out/demo"
run demo demo -o "$out/demo" --duration "$dur" -j 1
run sim sim --concurrency 16 --duration "$((dur * 6))" -o "$out/sim" --force --quiet
# The live path: serve (real engine, faults) and load, both under Valgrind.
rm -f "$out/port"
$vg --log-file="$out/serve.log" "$bin" serve --listen 127.0.0.1:0 --port-file "$out/port" \
    --time-scale 20 --fault-error-rate 0.1 --fault-disconnect-rate 0.1 --fault-stall-ms 100 \
    --fault-stall-rate 0.1 >"$out/serve.out" 2>&1 &
spid=$!
i=0; while [ ! -s "$out/port" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
if [ -s "$out/port" ]; then
    run load load --url "http://127.0.0.1:$(cat "$out/port")" --model kimi-k3 \
        --trace traces/samples/agentic-synth.jsonl -o "$out/load" --force --quiet \
        --duration "$dur" --concurrency 4 --idle-cap 0.2 --think-cap 0.2 --grace 20 --min-duration 1
else
    echo "valgrind serve: did not start"; status=1
fi
kill -TERM $spid 2>/dev/null; wait $spid; rc=$?
summary=$(grep -E "ERROR SUMMARY" "$out/serve.log" | tail -n 1 | sed 's/^==[0-9]*== //')
echo "valgrind serve: exit $rc, $summary"
[ "$rc" -eq 0 ] || { status=1; grep -E "^==[0-9]+== (Invalid|Conditional|.*lost in)" "$out/serve.log" | head -20; }
exit $status
