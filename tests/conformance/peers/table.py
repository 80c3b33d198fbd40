#!/usr/bin/env python3
"""table.py OUT N1 N2: checks the runs of run.sh and prints, as Markdown,
each tool's TTFT, ITL and output throughput beside `agentreplay load`'s on
the same server and load, and its client CPU per request (user + system
time of the whole process tree from /usr/bin/time -v, per request, and the
marginal cost between the N1 and N2 runs, which removes start-up).

Checks (exit 1 when one fails): every run exits 0 with no failed request;
AIPerf logs "Server metrics enabled" and writes server_metrics_export.json;
vLLM's client never warns that /tokenize is unavailable or that its
tokenizer disagrees with the server's; no tool's warning names the server
(the patterns below); the trace checks of check_traces.py passed.
"""
import glob
import json
import os
import re
import sys

OUT, N1, N2 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
fails = []

# Warnings that would be about the server (its routes, bodies, metrics).
SERVER_WARNINGS = [
    r"Server metrics disabled", r"not reachable.*:(?!940[01])\d+/metrics", r"/tokenize unavailable",
    r"tokenizer mismatch", r"Bad status line", r"Expected tool call", r"usage.*(missing|not reported)",
    r"unreachable", r"Failed to (fetch|connect)", r"KeyError", r"Traceback",
]


def log(name):
    p = os.path.join(OUT, name + ".log")
    return open(p, errors="replace").read() if os.path.exists(p) else ""


def cpu_wall(name):
    t = open(os.path.join(OUT, name + ".time")).read()
    g = lambda k: float(re.search(k + r".*?: ([0-9.]+)", t).group(1))
    w = re.search(r"Elapsed \(wall clock\) time.*?: (?:(\d+):)?(\d+):([0-9.]+)", t)
    return g("User time") + g("System time"), int(w.group(1) or 0) * 3600 + int(w.group(2)) * 60 + float(w.group(3))


def figures(tool, d):
    """(completed, failed, TTFT mean ms, TTFT p99 ms, ITL mean ms, output tok/s)."""
    if tool == "agentreplay":
        m = json.load(open(f"{d}/run.json"))["metrics"]
        r = m["requests"]
        return (r["completed"], r["errors"], m["ttft_ms"]["mean"], m["ttft_ms"]["p99"], m["itl_ms"]["mean"],
                m["throughput_tok_s_per_gpu"]["output"])
    if tool == "aiperf":
        a = json.load(open(f"{d}/profile_export_aiperf.json"))
        n = a["request_count"]["avg"]
        return (n, len(a.get("error_summary") or []), a["time_to_first_token"]["avg"],
                a["time_to_first_token"]["p99"], a["inter_token_latency"]["avg"], a["output_token_throughput"]["avg"])
    if tool == "vllm":
        v = json.load(open(f"{d}/result.json"))
        return (v["completed"], v.get("failed", 0), v["mean_ttft_ms"], v["p99_ttft_ms"], v["mean_itl_ms"],
                v["output_throughput"])
    if tool == "guidellm":
        b = json.load(open(f"{d}/benchmarks.json"))["benchmarks"][0]
        m = b["metrics"]
        s = lambda name: m[name]["successful"]
        t = m["request_totals"]
        return (t["successful"], t["errored"] + t["incomplete"], s("time_to_first_token_ms")["mean"],
                s("time_to_first_token_ms")["percentiles"]["p99"], s("inter_token_latency_ms")["mean"],
                s("output_tokens_per_second")["mean"])


def check_run(name, tool):
    rcf = os.path.join(OUT, name + ".rc")
    rc = open(rcf).read().strip() if os.path.exists(rcf) else "missing"
    if rc != "0":
        fails.append(f"{name}: exit {rc}")
    text = log(name)
    for pat in SERVER_WARNINGS:
        for m in re.finditer(pat, text):
            line = text[text.rfind("\n", 0, m.start()) + 1:text.find("\n", m.end())]
            fails.append(f"{name}: {line.strip()[:200]}")
    if tool == "aiperf":
        if "Server metrics enabled" not in text:
            fails.append(f"{name}: AIPerf did not enable server metrics")
        if not os.path.exists(os.path.join(OUT, name, "server_metrics_export.json")):
            fails.append(f"{name}: no server_metrics_export.json")
    try:
        f = figures(tool, os.path.join(OUT, name))
        if f[1]:
            fails.append(f"{name}: {f[1]} failed requests")
        return f
    except Exception as e:  # noqa: BLE001 - any missing figure is a failure
        fails.append(f"{name}: no figures ({e!r})")
        return None


for chk in glob.glob(os.path.join(OUT, "traces", "check-*.log")):
    for line in open(chk):
        if line.startswith("FAIL") or "Traceback" in line:
            fails.append(f"{os.path.basename(chk)}: {line.strip()}")
    if "ok   " not in open(chk).read():
        fails.append(f"{os.path.basename(chk)}: no check passed")

tools = ["agentreplay", "aiperf", "guidellm", "vllm"]
names = {"agentreplay": "agentreplay load", "aiperf": "AIPerf 0.13.0", "guidellm": "GuideLLM 0.8.1",
         "vllm": "vllm bench serve 0.33.0"}
rows = {}
for tool in tools:
    for n in (N1, N2):
        name = f"{tool}-{n}"
        f = check_run(name, tool)
        if f:
            cpu, wall = cpu_wall(name)
            rows[(tool, n)] = (f, cpu, wall)

replays = []
for name, tool in (("replay-aiperf-weka", "aiperf"), ("replay-guidellm-mooncake", "guidellm"),
                   ("replay-vllm-mooncake", "vllm")):
    f = check_run(name, tool)
    replays.append((name, f))
rcf = os.path.join(OUT, "vllm-nomodel.rc")
nomodel = open(rcf).read().strip() if os.path.exists(rcf) else "missing"
if nomodel != "0":
    fails.append(f"vllm-nomodel: exit {nomodel}")
for pat in SERVER_WARNINGS:
    if re.search(pat, log("vllm-nomodel")):
        fails.append(f"vllm-nomodel: {pat}")

fmt = lambda x, d=2: "-" if x is None else f"{x:.{d}f}"
print(f"Streaming chat, 256-word prompts, 64 output tokens, {4} concurrent requests, against one "
      f"`agentreplay serve --fake` (20 ms to the first token, 10 ms a token: ideal TTFT 20 ms, ITL 10 ms, "
      f"400 tok/s).\n")
print("| tool | requests | TTFT mean ms | TTFT p99 ms | ITL mean ms | output tok/s | client CPU s | wall s | "
      "CPU ms/request | marginal CPU ms/request |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for tool in tools:
    for n in (N1, N2):
        r = rows.get((tool, n))
        if not r:
            print(f"| {names[tool]} | {n} | (failed) | | | | | | | |")
            continue
        f, cpu, wall = r
        marg = "-"
        if n == N2 and (tool, N1) in rows:
            f1, cpu1, _ = rows[(tool, N1)]
            marg = fmt(1000 * (cpu - cpu1) / max(f[0] - f1[0], 1), 1)
        print(f"| {names[tool]} | {f[0]:.0f} | {fmt(f[2])} | {fmt(f[3])} | {fmt(f[4])} | {fmt(f[5], 1)} | "
              f"{cpu:.2f} | {wall:.1f} | {1000 * cpu / max(f[0], 1):.1f} | {marg} |")
print("\nTrace replays (converted by `trace convert`):\n")
print("| run | requests | failed | TTFT mean ms | ITL mean ms |")
print("| --- | --- | --- | --- | --- |")
for name, f in replays:
    if f:
        print(f"| {name} | {f[0]:.0f} | {f[1]} | {fmt(f[2])} | {fmt(f[4])} |")
    else:
        print(f"| {name} | (failed) | | | |")
print()
if fails:
    print("Checks failed:\n")
    for x in fails:
        print(f"- {x}")
    sys.exit(1)
print("Checks: every run exited 0 with no failed request; AIPerf collected the server's metrics; "
      "vLLM's client did not warn about /tokenize; no warning named the server; the converted traces "
      "were read by AIPerf's and GuideLLM's loaders.")
