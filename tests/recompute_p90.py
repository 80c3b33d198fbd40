#!/usr/bin/env python3
"""Independent recomputation of a run's headline metrics from its
requests.jsonl, following replay/SCHEMA.md only (Python standard library).

    recompute_p90.py DIR            prints the recomputed metrics as JSON
    recompute_p90.py --check DIR    also compares them with DIR/run.json to
                                    4 significant digits; exit 1 on mismatch

Definitions (../shared/reference/metrics.md):
  measured request: warmup false, cancelled false, error null
  TPOT = (end_ns - first_token_ns) / (output_tokens - 1), output_tokens > 1
  P90 by linear interpolation between closest ranks, k = (n - 1) * 0.9
  interactivity_p90 = 1 / P90(TPOT)  (tokens/s per user)
  TTFT = first_token_ns - start_ns
  duration = max(end_ns) - min(start_ns) over measured requests
  total tok/s per GPU = (prompt + output tokens) / duration / gpus
  the theoretical hit rate over the measured requests (the agentx rules,
  whose records carry hit_blocks and blocks) = sum of min(hit_blocks,
  blocks) / sum of blocks
"""
import json
import math
import sys


def percentile(values, p):
    v = sorted(values)
    if not v:
        return float("nan")
    k = (len(v) - 1) * p
    lo = int(math.floor(k))
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def recompute(folder):
    tpot, ttft = [], []
    start, end = None, None
    tokens = out_tokens = 0
    hit_blocks = blocks = 0
    theoretical = False
    with open(folder + "/requests.jsonl") as f:
        for line in f:
            r = json.loads(line)
            if r["warmup"] or r["cancelled"] or r["error"] is not None:
                continue
            first = r["first_token_ns"] if r["first_token_ns"] is not None else r["end_ns"]
            ttft.append((first - r["start_ns"]) / 1e6)
            if r["output_tokens"] > 1:
                tpot.append((r["end_ns"] - first) / (r["output_tokens"] - 1) / 1e6)
            start = r["start_ns"] if start is None else min(start, r["start_ns"])
            end = r["end_ns"] if end is None else max(end, r["end_ns"])
            tokens += r["prompt_tokens"] + r["output_tokens"]
            out_tokens += r["output_tokens"]
            if "blocks" in r:
                theoretical = True
                hit_blocks += min(max(r["hit_blocks"], 0), r["blocks"])
                blocks += r["blocks"]
    with open(folder + "/run.json") as f:
        gpus = json.load(f)["gpus"]
    dur = (end - start) / 1e9 if start is not None else float("nan")
    got = {
        "interactivity_p90": 1000.0 / percentile(tpot, 0.9),
        "interactivity_p50": 1000.0 / percentile(tpot, 0.5),
        "ttft_p90_ms": percentile(ttft, 0.9),
        "tpot_p90_ms": percentile(tpot, 0.9),
        "total_tok_s_per_gpu": tokens / dur / gpus,
        "output_tok_s_per_gpu": out_tokens / dur / gpus,
        "completed": len(ttft),
    }
    if theoretical:
        got["hit_theoretical_measured"] = hit_blocks / blocks if blocks else float("nan")
    return got


def same4(a, b):
    if a == b:
        return True
    return float("%.4g" % a) == float("%.4g" % b)


def main(argv):
    check = "--check" in argv
    args = [a for a in argv[1:] if a != "--check"]
    if len(args) != 1:
        sys.stderr.write(__doc__)
        return 2
    got = recompute(args[0])
    print(json.dumps(got, indent=2))
    if not check:
        return 0
    with open(args[0] + "/run.json") as f:
        m = json.load(f)["metrics"]
    want = {
        "interactivity_p90": m["interactivity_tok_s"]["p90"],
        "interactivity_p50": m["interactivity_tok_s"]["p50"],
        "ttft_p90_ms": m["ttft_ms"]["p90"],
        "tpot_p90_ms": m["tpot_ms"]["p90"],
        "total_tok_s_per_gpu": m["throughput_tok_s_per_gpu"]["total"],
        "output_tok_s_per_gpu": m["throughput_tok_s_per_gpu"]["output"],
        "completed": m["requests"]["completed"],
    }
    if "hit_theoretical_measured" in got:
        want["hit_theoretical_measured"] = m["prefix_hit_rate_theoretical_measured"]
    bad = [k for k in want if not same4(got[k], want[k])]
    for k in bad:
        print("MISMATCH %s: recomputed %.6g, run.json %.6g" % (k, got[k], want[k]))
    if not bad:
        print("match: P90 interactivity %.4g tok/s/user (4 significant digits)" % got["interactivity_p90"])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
