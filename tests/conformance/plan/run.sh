#!/bin/sh
# run.sh: plan conformance. For each folder of Weka traces, AIPerf 0.13.0's
# own plan (aiperf_plan.py, run in AIPerf's venv) against
# `agentreplay trace plan --json`, compared byte for byte; per trace
# "identical" or the first difference (first_diff.py).
#
#   sh tests/conformance/plan/run.sh BIN OUTDIR DIR|synth:SESSIONS:SEED ...
#
# AIPERF_VENV (default build/aiperf): the venv; made on first use with
# `python3 -m venv` and `pip install aiperf==0.13.0`. A synth:N:S operand is
# `BIN trace synth --sessions N --seed S` written as Weka files
# (native_to_weka.py). Each folder is compared three times, with the
# initial lanes of 24 at the t* ratio 0.5, 7 at 0.9, and 8 over the range
# 0 to 1 (AIPerf's default, t* drawn as AIPerf draws it).
# Exit status 0 when every file is byte-identical.
set -u
BIN=$(readlink -f "$1")
OUT=$2
shift 2
HERE=$(cd "$(dirname "$0")" && pwd)
VENV=${AIPERF_VENV:-build/aiperf}
PY=$VENV/bin/python
if [ ! -x "$PY" ] || ! "$PY" -c "import aiperf" 2>/dev/null; then
    echo "conformance-plan: installing aiperf==0.13.0 into $VENV"
    python3 -m venv "$VENV" && "$VENV/bin/pip" install -q aiperf==0.13.0 ||
        { echo "conformance-plan: cannot install AIPerf into $VENV"; exit 2; }
fi
mkdir -p "$OUT"
ulimit -f 4000000
fail=0
for dir in "$@"; do
    case $dir in
    synth:*)
        n=$(echo "$dir" | cut -d: -f2)
        seed=$(echo "$dir" | cut -d: -f3)
        name=synth-$n-$seed
        rm -rf "$OUT/$name"
        timeout -s KILL 300 "$BIN" trace synth --sessions "$n" --seed "$seed" \
            -o "$OUT/$name.jsonl" 2>/dev/null &&
            python3 "$HERE/native_to_weka.py" "$OUT/$name.jsonl" "$OUT/$name" ||
            { echo "$name: could not make the folder"; fail=1; continue; }
        dir=$OUT/$name
        ;;
    *) name=$(basename "$dir") ;;
    esac
    echo "== $dir"
    # Synthetic tails are cut to AIPerf's prompt corpus; its size depends on
    # the seed's corpus (and the tokenizer aiperf_plan.py builds).
    corpus=$(timeout -s KILL 600 "$PY" "$HERE/aiperf_plan.py" "$dir" --seed 1 \
        --tokenizer-dir "$OUT/tokenizer" --corpus-size 2>"$OUT/$name.corpus.err") ||
        { echo "$name: AIPerf refused the folder (see $OUT/$name.corpus.err)"; fail=1; continue; }
    for run in "24 0.5 0.5" "7 0.9 0.9" "8 0 1"; do
        set -- $run
        a=$OUT/$name.c$1.aiperf.json
        b=$OUT/$name.c$1.ours.json
        timeout -s KILL 1800 "$PY" "$HERE/aiperf_plan.py" "$dir" --seed 1 --concurrency "$1" \
            --ratio "$2" "$3" --tokenizer-dir "$OUT/tokenizer" -o "$a" 2>"$a.err" ||
            { echo "$name: aiperf_plan.py failed (see $a.err)"; fail=1; continue; }
        timeout -s KILL 600 "$BIN" trace plan "$dir" --json --seed 1 --concurrency "$1" \
            --ratio "$2,$3" --corpus-tokens "$corpus" >"$b" 2>"$b.err" ||
            { echo "$name: trace plan failed (see $b.err)"; fail=1; continue; }
        if [ "$1" = 24 ]; then
            python3 "$HERE/first_diff.py" "$a" "$b" || fail=1
        elif cmp -s "$a" "$b"; then
            echo "(lanes: $1 at $2..$3) identical"
        else
            python3 "$HERE/first_diff.py" "$a" "$b" | grep -v ': identical$'
            fail=1
        fi
    done
done
if [ $fail = 0 ]; then
    echo "conformance-plan: every plan byte-identical to AIPerf's"
else
    echo "conformance-plan: DIFFERENCES (outputs in $OUT)"
fi
exit $fail
