#!/bin/sh
# run.sh BIN OUT: the peers against `agentreplay serve` (make conformance-peers).
#
#   1. traces: a `trace synth` trace converted with --to weka, weka-jsonl and
#      mooncake is read by AIPerf's weka_trace and mooncake_trace loaders and
#      GuideLLM's weka and mooncake deserializers (check_traces.py), and
#      replayed by AIPerf (weka folder), GuideLLM and `vllm bench serve`
#      (mooncake) against the server;
#   2. the same synthetic load from each tool and from `agentreplay load`:
#      streaming chat, 256-word prompts, 64 output tokens, 4 concurrent
#      requests, N1 then N2 requests, against one `serve --fake` (20 ms to
#      the first token, 10 ms a token); each tool timed with /usr/bin/time
#      (the client CPU of its whole process tree);
#   3. table.py checks every run (exit 0, no failed request, AIPerf's server
#      metrics collected, no warning of vLLM's client about /tokenize, no
#      tool warning that names the server) and writes OUT/table.md: each
#      tool's TTFT, ITL and throughput beside `agentreplay load`'s, and its
#      client CPU per request (total, and marginal between N1 and N2).
#
# Environment: AIPERF_VENV, GUIDELLM_VENV, VLLM_VENV (the peers' venvs;
# venvs.sh makes them), N1 (16), N2 (96). Every run is capped (timeout -s
# KILL, ulimit -f); the server is killed at the end.
set -u
BIN=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
OUT=$2
HERE=$(cd "$(dirname "$0")" && pwd)
AIPERF_VENV=$(cd "${AIPERF_VENV:-build/aiperf}" && pwd)
GUIDELLM_VENV=$(cd "${GUIDELLM_VENV:-build/guidellm}" && pwd)
VLLM_VENV=$(cd "${VLLM_VENV:-build/vllm}" && pwd)
N1=${N1:-16}
N2=${N2:-96}
C=4
rm -rf "$OUT"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
ulimit -f 4000000
status=0
cap() { timeout -s KILL "$@"; }

# The server's own tokenizer for the peers (offline: a hub cache entry).
"$AIPERF_VENV/bin/python" "$HERE/make_tokenizer.py" "$OUT/tok" --prompt-c "$HERE/../../../traces/prompt.c" || exit 1
export HF_HOME="$OUT/tok/hf_home" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
TOK=local/agentreplay-words

# ---- 1. traces ----
T=$OUT/traces
mkdir -p "$T"
"$BIN" trace synth --sessions 8 --seed 5 -o "$T/synth.jsonl" 2>>"$T/convert.log" &&
"$BIN" trace convert "$T/synth.jsonl" -o "$T/weka" --to weka 2>>"$T/convert.log" &&
"$BIN" trace convert "$T/synth.jsonl" -o "$T/weka.jsonl" --to weka-jsonl 2>>"$T/convert.log" &&
"$BIN" trace convert "$T/synth.jsonl" -o "$T/mooncake.jsonl" --to mooncake 2>>"$T/convert.log" || status=1
cap 600 "$AIPERF_VENV/bin/python" "$HERE/check_traces.py" aiperf "$T/weka" "$T/mooncake.jsonl" "$T/synth.jsonl" \
    >"$T/check-aiperf.log" 2>&1 || status=1
cap 600 "$GUIDELLM_VENV/bin/python" "$HERE/check_traces.py" guidellm "$T/mooncake.jsonl" "$T/weka.jsonl" "$T/synth.jsonl" \
    >"$T/check-guidellm.log" 2>&1 || status=1
grep -h "^ok\|^FAIL\|^     " "$T"/check-*.log
# 24 Mooncake rows for the replays, 100 ms apart (the trace's own gaps are
# minutes of think time).
head -n 24 "$T/mooncake.jsonl" | python3 -c '
import json, sys
for i, line in enumerate(sys.stdin):
    o = json.loads(line)
    o["timestamp"] = 100 * i
    print(json.dumps(o))' >"$T/mooncake24.jsonl"

# ---- the server ----
"$BIN" serve --fake --listen 127.0.0.1:0 --port-file "$OUT/port" >"$OUT/serve.log" 2>&1 &
SRV=$!
trap 'kill $SRV 2>/dev/null' EXIT INT TERM
i=0
while [ ! -s "$OUT/port" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
[ -s "$OUT/port" ] || { echo "serve did not start"; exit 1; }
U=http://127.0.0.1:$(cat "$OUT/port")

# timed NAME CMD...: runs CMD capped, its CPU in NAME.time, output in NAME.log.
timed() {
    name=$1; shift
    /usr/bin/time -v -o "$OUT/$name.time" timeout -s KILL 600 "$@" >"$OUT/$name.log" 2>&1
    rc=$?
    echo "$name: exit $rc"
    echo "$rc" >"$OUT/$name.rc"
}

# ---- trace replays ----
timed replay-aiperf-weka "$AIPERF_VENV/bin/aiperf" profile --model fake --url "$U" --endpoint-type chat \
    --streaming --tokenizer $TOK --custom-dataset-type weka_trace --input-file "$T/weka" \
    --ignore-trace-delays --concurrency $C --request-count 24 --random-seed 1 --ui-type none \
    --no-gpu-telemetry --artifact-dir "$OUT/replay-aiperf-weka"
timed replay-guidellm-mooncake env GUIDELLM__DEFAULT_RESULTS_DIR="$OUT/replay-guidellm-mooncake" \
    "$GUIDELLM_VENV/bin/guidellm" run \
    --backend "kind=openai_http,target=$U,request_format=/v1/chat/completions" --profile kind=replay \
    --data "{\"kind\":\"mooncake\",\"time_scale\":0.001,\"source\":{\"kind\":\"json_file\",\"path\":\"$T/mooncake24.jsonl\"}}" \
    --tokenizer "kind=huggingface_auto,model=$TOK" \
    --output "kind=json,path=$OUT/replay-guidellm-mooncake/benchmarks.json" --output kind=console --disable-progress
timed replay-vllm-mooncake "$VLLM_VENV/bin/vllm" bench serve --backend openai --base-url "$U" \
    --endpoint /v1/completions --model fake --tokenizer $TOK --dataset-name timed_trace \
    --dataset-path "$T/mooncake24.jsonl" --timed-trace-chunk-hash-size 512 --timed-trace-sec-multiplier 0.001 \
    --num-prompts 24 --save-result --result-dir "$OUT/replay-vllm-mooncake" --result-filename result.json

# ---- 2. the same load from each tool ----
# agentreplay load: closed loop on a file of identical calls, for about N calls.
awk 'BEGIN { for (i = 0; i < 4096; i++) printf "{\"timestamp\":0,\"input_length\":256,\"output_length\":64,\"hash_ids\":[]}\n" }' \
    >"$OUT/calls_256_64.jsonl"
for N in $N1 $N2; do
    timed "aiperf-$N" "$AIPERF_VENV/bin/aiperf" profile --model fake --url "$U" --endpoint-type chat --streaming \
        --tokenizer $TOK --isl 256 --osl 64 --extra-inputs ignore_eos:true --concurrency $C --request-count "$N" \
        --random-seed 1 --ui-type none --no-gpu-telemetry --artifact-dir "$OUT/aiperf-$N"
    mkdir -p "$OUT/guidellm-$N"
    timed "guidellm-$N" env GUIDELLM__DEFAULT_RESULTS_DIR="$OUT/guidellm-$N" "$GUIDELLM_VENV/bin/guidellm" run \
        --backend "kind=openai_http,target=$U,request_format=/v1/chat/completions" \
        --profile "kind=concurrent,streams=$C" --constraint "kind=max_requests,count=$N" \
        --data kind=synthetic_text,prompt_tokens=256,output_tokens=64 --tokenizer "kind=huggingface_auto,model=$TOK" \
        --output "kind=json,path=$OUT/guidellm-$N/benchmarks.json" --output kind=console --disable-progress
    timed "vllm-$N" "$VLLM_VENV/bin/vllm" bench serve --backend openai-chat --base-url "$U" \
        --endpoint /v1/chat/completions --model fake --tokenizer $TOK --dataset-name random \
        --random-input-len 256 --random-output-len 64 --num-prompts "$N" --max-concurrency $C --seed 1 \
        --save-result --result-dir "$OUT/vllm-$N" --result-filename result.json
    # About 6.1 calls/s at 4 lanes (20 ms + 63 x 10 ms each).
    dur=$(awk -v n="$N" 'BEGIN { printf "%.2f", n / 6.1 }')
    timed "agentreplay-$N" "$BIN" load --url "$U" --model fake --trace "$OUT/calls_256_64.jsonl" --mode closed \
        --concurrency $C --duration "$dur" --min-duration 1 --no-warm-start --no-warmup-call --grace 60 \
        --quiet --force -o "$OUT/agentreplay-$N"
done
# vLLM's client without --model: it reads the model and tokenizer from
# /v1/models (id and root); with root = "fake" the tokenizer is named.
timed vllm-nomodel "$VLLM_VENV/bin/vllm" bench serve --backend openai-chat --base-url "$U" \
    --endpoint /v1/chat/completions --tokenizer $TOK --dataset-name random --random-input-len 32 \
    --random-output-len 8 --num-prompts 8 --max-concurrency 2 --seed 1
kill $SRV 2>/dev/null
wait $SRV 2>/dev/null

python3 "$HERE/table.py" "$OUT" "$N1" "$N2" >"$OUT/table.md" || status=1
cat "$OUT/table.md"
exit $status
