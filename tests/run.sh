#!/bin/sh
# Runs each test program given, shows its output, and sums the closing
# "N passed, N failed[, N skipped]" lines into one. Exits non-zero if any
# test failed or any program did not finish with such a line.
total_p=0; total_f=0; total_s=0; bad=0
tmp=$(mktemp); trap 'rm -f "$tmp"' EXIT
for t in "$@"; do
    name=$(basename "$t")
    start=$(date +%s)
    "$t" >"$tmp" 2>&1; rc=$?
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$tmp" | tail -n 1)
    if [ -z "$line" ]; then
        cat "$tmp"; echo "$name: exit $rc without a result line"; bad=$((bad + 1)); continue
    fi
    p=$(echo "$line" | sed -E 's/^([0-9]+) passed.*/\1/')
    f=$(echo "$line" | sed -E 's/^[0-9]+ passed, ([0-9]+) failed.*/\1/')
    s=$(echo "$line" | sed -nE 's/.*, ([0-9]+) skipped.*/\1/p'); s=${s:-0}
    total_p=$((total_p + p)); total_f=$((total_f + f)); total_s=$((total_s + s))
    if [ "$f" -ne 0 ] || [ "$rc" -ne 0 ]; then
        cat "$tmp"; bad=$((bad + 1))
        [ "$f" -eq 0 ] && total_f=$((total_f + 1))
    else
        grep -E '^(SKIP|NOTE)' "$tmp"
    fi
    printf '%-28s %s  (%ss)\n' "$name" "$line" $(( $(date +%s) - start ))
done
if [ "$total_s" -ne 0 ]; then
    echo "$total_p passed, $total_f failed, $total_s skipped"
else
    echo "$total_p passed, $total_f failed"
fi
[ "$bad" -eq 0 ] && [ "$total_f" -eq 0 ]
