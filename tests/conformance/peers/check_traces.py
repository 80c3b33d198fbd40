#!/usr/bin/env python3
"""check_traces.py: traces written by `agentreplay trace convert` read by the
peers' own loaders, with the prompts those loaders build counted as the
server counts them (one token per whitespace-separated word).

    AIPERF_PYTHON check_traces.py aiperf WEKA_DIR MOONCAKE.jsonl NATIVE.jsonl
    GUIDELLM_PYTHON check_traces.py guidellm MOONCAKE.jsonl WEKA.jsonl NATIVE.jsonl

with HF_HOME pointing at make_tokenizer.py's hf_home and HF_HUB_OFFLINE=1.
NATIVE.jsonl is the trace both were converted from (its call count and
token totals are what the loaders must find).

aiperf: AIPerf 0.13.0's WekaTraceLoader (aiperf/dataset/loader/
weka_trace.py: its strict schema, subagents, chains, prompt synthesis) and
MooncakeTraceDatasetLoader (mooncake_trace.py), called as AIPerf calls them
(load_dataset, convert_to_conversations). Checked: every call is a turn;
AIPerf's theoretical prefix-cache blocks add up; every Mooncake prompt has
exactly input_length words.
guidellm: GuideLLM 0.8.1's trace deserializer (guidellm/data/deserializers/
trace_common.py TraceDatasetDeserializer) with its mooncake and weka
formats: every row is accepted (a row it refuses is skipped: the counts
would differ) and every Mooncake prompt has input_length words.
Prints one line per check; exits 1 on any failure.
"""
import json
import sys

fails = 0


def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    fails += not ok


def native_calls(path):
    calls, tokens = 0, 0
    with open(path) as f:
        f.readline()
        for line in f:
            o = json.loads(line)
            if "session" not in o:
                calls += 1
                tokens += o["in"]
    return calls, tokens


def aiperf(weka_dir, mooncake, native):
    from aiperf.common import random_generator as rng
    from aiperf.common.tokenizer import Tokenizer
    from aiperf.dataset.generator.prompt import PromptGenerator
    from aiperf.dataset.loader.base_loader import _default_test_run
    from aiperf.dataset.loader.mooncake_trace import MooncakeTraceDatasetLoader
    from aiperf.dataset.loader.weka_trace import WekaTraceLoader

    n_calls, _ = native_calls(native)
    rng.init(1)
    tok = Tokenizer.from_pretrained("local/agentreplay-words")
    pg = PromptGenerator(prompts=None, prefix_prompts=None, tokenizer=tok)
    run = _default_test_run()

    loader = WekaTraceLoader(filename=weka_dir, run=run, prompt_generator=pg)
    data = loader.load_dataset()
    convs = loader.convert_to_conversations(data)
    turns = sum(len(c.turns) for c in convs)
    check(turns == n_calls, f"AIPerf weka_trace: {len(data)} traces, {len(convs)} conversations, "
                            f"{turns} turns for {n_calls} calls")
    hit = sum(t.theoretical_prefix_cache_hit_blocks or 0 for c in convs for t in c.turns)
    tot = sum(t.theoretical_prefix_cache_total_blocks or 0 for c in convs for t in c.turns)
    print(f"     AIPerf's theoretical prefix-cache hit rate (blocks): {hit / max(tot, 1):.4f}")

    loader = MooncakeTraceDatasetLoader(filename=mooncake, run=run, prompt_generator=pg)
    convs = loader.convert_to_conversations(loader.load_dataset())
    lines = [json.loads(x) for x in open(mooncake)]
    words = [len(c.turns[0].texts[0].contents[0].split()) for c in convs]
    exact = sum(w == ln["input_length"] for w, ln in zip(words, lines))
    check(len(convs) == len(lines) == n_calls and exact == len(lines),
          f"AIPerf mooncake_trace: {len(convs)} requests, {exact} of {len(lines)} prompts of exactly "
          f"input_length words")


def guidellm(mooncake, weka_jsonl, native):
    from guidellm.data.deserializers.trace_common import TraceDatasetDeserializer
    from guidellm.schemas.data.deserializers.trace_mooncake import MooncakeTraceFormatArgs
    from guidellm.schemas.data.deserializers.trace_weka import WEKATraceFormatArgs
    from transformers import AutoTokenizer

    n_calls, _ = native_calls(native)
    tok = AutoTokenizer.from_pretrained("local/agentreplay-words")
    cfg = MooncakeTraceFormatArgs.model_validate(
        {"kind": "mooncake", "time_scale": 0.001, "source": {"kind": "json_file", "path": mooncake}})
    rows = list(TraceDatasetDeserializer()(config=cfg, processor_factory=lambda: tok, random_seed=1))
    lines = [json.loads(x) for x in open(mooncake)]

    def turns(row):
        """The turns of a row: GuideLLM serialises them as a JSON string."""
        conv = row["conversation_turns"]
        return (json.loads(conv) if isinstance(conv, str) else conv)["turns"]

    def text(turn):
        col = turn["columns"].get("text_column")
        return col[0] if isinstance(col, list) and col else ""

    check(len(rows) == len(lines) == n_calls, f"GuideLLM mooncake: {len(rows)} rows of {len(lines)} lines")
    exact = sum(len(text(turns(r)[0]).split()) == ln["input_length"] for r, ln in zip(rows, lines))
    check(exact == len(lines), f"GuideLLM mooncake: {exact} of {len(lines)} prompts of exactly input_length words")

    cfg = WEKATraceFormatArgs.model_validate(
        {"kind": "weka", "max_wait": 1.0, "max_session_wait": 1.0, "duration_column": "api_time",
         "source": {"kind": "json_file", "path": weka_jsonl}})
    rows = list(TraceDatasetDeserializer()(config=cfg, processor_factory=lambda: tok, random_seed=1))
    n = sum(len(turns(r)) for r in rows)
    check(n == n_calls, f"GuideLLM weka: {len(rows)} conversations, {n} turns for {n_calls} calls")


def main():
    if len(sys.argv) != 5 or sys.argv[1] not in ("aiperf", "guidellm"):
        sys.exit(__doc__)
    (aiperf if sys.argv[1] == "aiperf" else guidellm)(*sys.argv[2:])
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
