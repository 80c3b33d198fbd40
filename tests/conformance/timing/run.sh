#!/bin/sh
# run.sh: the timing conformance (README.md): for each concurrency, AIPerf
# 0.13.0's AgentX scenario and `agentreplay load`, each against its own
# `agentreplay serve` on loopback, then `agentreplay sim` on the same
# settings, then compare.py. Real time: AIPerf and load never run at once.
#
#   run.sh TRACES OUT
# Environment: BIN (./agentreplay), AIPERF_VENV (build/aiperf: made on
# first use with pip install aiperf==0.13.0), CONCS ("1 8"), DURATION (s,
# 120), RATIO (the t* ratio: a single point, 0.5, or LO:HI, a range; both
# tools draw the same t*), SEED (1), GPUS
# (16, the server's default deployment), OUT_TAG (the folders' suffix),
# BODIES_AT (1: the concurrency whose AIPerf payloads are exported whole
# and checked against the bodies agentreplay sends, bodies.py).
set -u
TRACES=$(readlink -f "${1:?usage: run.sh TRACES OUT}")
OUT=$(readlink -f "${2:?usage: run.sh TRACES OUT}")
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=$(readlink -f "${BIN:-./agentreplay}")
VENV=${AIPERF_VENV:-build/aiperf}
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import aiperf" 2>/dev/null; then
    echo "conformance-timing: installing aiperf==0.13.0 into $VENV"
    python3 -m venv "$VENV" && "$VENV/bin/pip" install -q aiperf==0.13.0 ||
        { echo "conformance-timing: cannot install AIPerf into $VENV" >&2; exit 2; }
fi
# Absolute, without resolving the venv's symlink to the system Python.
AIPERF_BIN=$(cd "$VENV/bin" && pwd)
AIPERF_PY=$AIPERF_BIN/python
AIPERF=$AIPERF_BIN/aiperf
CONCS=${CONCS:-"1 8"}
DURATION=${DURATION:-120}
RATIO=${RATIO:-0.5}
case $RATIO in
*:*) RLO=${RATIO%%:*} RHI=${RATIO#*:} ;;
*) RLO=$RATIO RHI=$RATIO ;;
esac
TAG=${OUT_TAG:-}
BODIES_AT=${BODIES_AT:-1}
SEED=${SEED:-1}
GPUS=${GPUS:-16}
TOK=$OUT/tokenizer
mkdir -p "$OUT"
ulimit -f 20000000 2>/dev/null

if [ ! -f "$TOK-hf-home/hub/models--agentreplay--wordlevel/refs/main" ]; then
    timeout -s KILL 900 "$AIPERF_PY" "$HERE/make_tokenizer.py" --repo "$HERE/../../.." --seed "$SEED" \
        --out "$TOK" || { echo "run.sh: the tokenizer could not be built" >&2; exit 2; }
fi

# serve DIR: starts `agentreplay serve` on a free loopback port (the
# default engine, real time) under a time limit; sets PORT and SRV.
serve() {
    rm -f "$1/srv.port"
    timeout -s KILL $((DURATION * 4 + 1200)) "$BIN" serve --listen 127.0.0.1:0 \
        --port-file "$1/srv.port" >"$1/srv.log" 2>&1 &
    SRV=$!
    i=0
    while [ ! -s "$1/srv.port" ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i + 1)); done
    PORT=$(cat "$1/srv.port" 2>/dev/null)
    [ -n "$PORT" ] || { echo "run.sh: serve did not start (see $1/srv.log)" >&2; kill "$SRV"; exit 2; }
}
unserve() { kill "$SRV" 2>/dev/null; wait "$SRV" 2>/dev/null; }

status=0
for C in $CONCS; do
    D=$OUT/c$C$TAG
    rm -rf "$D"
    mkdir -p "$D/aiperf"
    echo "== concurrency $C: AIPerf"
    LEVEL=records
    [ "$C" = "$BODIES_AT" ] && LEVEL=raw
    serve "$D/aiperf"
    ( cd "$D/aiperf" && HF_HOME=$TOK-hf-home HF_HUB_OFFLINE=1 timeout -s KILL $((DURATION * 3 + 900)) \
        "$AIPERF" profile --scenario inferencex-agentx-mvp --unsafe-override \
        --model kimi-k3 --url "http://127.0.0.1:$PORT" --endpoint-type chat --streaming \
        --input-file "$TRACES" --custom-dataset-type weka_trace \
        --tokenizer agentreplay/wordlevel --random-seed "$SEED" \
        --concurrency "$C" --benchmark-duration "$DURATION" \
        --trajectory-start-min-ratio "$RLO" --trajectory-start-max-ratio "$RHI" \
        --export-level "$LEVEL" --artifact-dir "$D/aiperf" --ui none \
        --no-server-metrics --no-gpu-telemetry >aiperf.log 2>&1 )
    echo "aiperf exit $?" >>"$D/aiperf/aiperf.log"
    unserve
    echo "== concurrency $C: agentreplay load"
    mkdir -p "$D/load-srv"
    serve "$D/load-srv"
    timeout -s KILL $((DURATION * 3 + 900)) "$BIN" load --url "http://127.0.0.1:$PORT" \
        --trace "$TRACES" --format agentx --concurrency "$C" --duration "$DURATION" \
        --start-min-ratio "$RLO" --start-max-ratio "$RHI" --seed "$SEED" --gpus "$GPUS" \
        -o "$D/load" --quiet >"$D/load.log" 2>&1
    echo "load exit $?" >>"$D/load.log"
    unserve
    echo "== concurrency $C: agentreplay sim"
    timeout -s KILL 1800 "$BIN" sim --trace "$TRACES" --format agentx --concurrency "$C" \
        --duration "$DURATION" --start-min-ratio "$RLO" --start-max-ratio "$RHI" \
        --seed "$SEED" -o "$D/sim" --quiet >"$D/sim.log" 2>&1
    echo "sim exit $?" >>"$D/sim.log"
    python3 "$HERE/compare.py" "$D" --gpus "$GPUS" --json "$D/compare.json" || status=1
    if [ "$LEVEL" = raw ]; then
        timeout -s KILL 600 python3 "$HERE/bodies.py" "$BIN" "$TRACES" \
            "$D/aiperf/profile_export_raw.jsonl" "$D/bodies" >"$D/bodies.txt" 2>&1 || status=1
        cat "$D/bodies.txt"
    fi
done
python3 "$HERE/table.py" "$OUT" >"$OUT/TABLE.md" && cat "$OUT/TABLE.md"
exit $status
