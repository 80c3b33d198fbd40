#!/bin/sh
# Seeds a trace fuzz harness's working corpus ($2) with small cuts of the
# real traces in the shared folder ($SHARED, default ../shared) and of the
# built-in sample; committed seeds live in tests/fuzz/seeds/<harness>/.
name=$1; corpus=$2
S=${SHARED:-../shared}/traces
mkdir -p "$corpus"
cut_lines() { # file lines out
    [ -f "$1" ] && head -n "$2" "$1" | head -c 60000 >"$3"
}
case "$name" in
fuzz_trace_agentx)
    for f in trace_0026 trace_0022 trace_0021; do
        [ -f "$S/agentic-cc/$f.json" ] && head -c 60000 "$S/agentic-cc/$f.json" >"$corpus/$f.json"
    done ;;
fuzz_trace_mooncake)
    cut_lines "$S/mooncake/conversation_trace.jsonl" 20 "$corpus/conversation.jsonl"
    cut_lines "$S/mooncake/synthetic_trace.jsonl" 20 "$corpus/synthetic.jsonl" ;;
fuzz_trace_azure)
    cut_lines "$S/azure/AzureLLMInferenceTrace_code.csv" 200 "$corpus/code.csv"
    cut_lines "$S/azure/AzureLLMInferenceTrace_conv.csv" 200 "$corpus/conv.csv" ;;
fuzz_trace_native)
    cut_lines traces/samples/agentic-synth.jsonl 40 "$corpus/synth.jsonl" ;;
esac
exit 0
