#!/usr/bin/env python3
"""compare.py: one timing-conformance point (README.md): AIPerf's AgentX run
and `agentreplay load` (and `agentreplay sim`) of the same traces, settings
and server, from their per-request files.

    compare.py DIR [--gpus 16] [--tol 0.05] [--offset-ms 100] [--json OUT]

DIR holds aiperf/ (AIPerf's --artifact-dir: profile_export.jsonl), load/
and sim/ (agentreplay result folders: requests.jsonl, run.json). Every
figure is recomputed here from the records with one definition for all
three (../../../../shared/reference/metrics.md): over the measured requests
(the profiling phase, completed, not cancelled, no error):
  P90 TTFT (ms), P90 interactivity = 1000 / P90 TPOT (ms), TPOT =
  (end - first token) / (output - 1) for output > 1; tok/s/GPU = (input +
  output tokens) / (last end - first start) / GPUs; percentiles linear
  (k = (n - 1) p).
Checks (exit 1 when one fails):
  tokens   AIPerf's input length equals the server's usage.prompt_tokens on
           every request, and so does agentreplay's prompt (load);
  requests the warm-up requests are the same (stream, turn) sets; in the
           measured phase every stream's turns come in the same order (the
           shorter run's sequence a prefix of the other's) and the counts
           differ by at most 2 %;
  offsets  over the requests both made (paired by stream, turn and
           occurrence), the median |difference| of their dispatch offsets is
           within --offset-ms; a turn's dispatch offset is the time from the
           return of the previous turn of its stream instance to its
           dispatch (the executed delay: the recorded one, shortened by the
           system idle cap; a join or a gate), a stream's first turn's from
           the end of the warm-up. Offsets from the end of the warm-up of
           every request, which also carry the drift of the service times
           before them, are reported beside it;
  metrics  P90 interactivity, P90 TTFT and tok/s/GPU within --tol (load
           against AIPerf, and sim against load);
  hit      the theoretical prefix-cache hit rate over the measured
           requests: AIPerf's (its aggregate's theoretical_prefix_cache_hit)
           and load's run.json within 0.01.
"""
import argparse
import json
import os
import statistics
import sys


def pct(v, p):
    v = sorted(v)
    if not v:
        return float("nan")
    k = (len(v) - 1) * p
    i = int(k)
    return v[i] if i + 1 >= len(v) else v[i] + (v[i + 1] - v[i]) * (k - i)


def jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def req(stream, turn, inst, phase, issued, start, first, end, isl, osl, ok, usage_in=None):
    return dict(stream=stream, turn=turn, inst=inst, phase=phase, issued=issued, start=start,
                first=first, end=end, isl=isl, osl=osl, ok=ok, usage_in=usage_in)


def read_aiperf(d):
    """AIPerf's records in one clock: credit_issued_ns is stamped in the
    controller's perf-counter frame, request_start/end_ns in a frame anchored
    on the wall clock (aiperf/common/monotonic_clock.py,
    records/record_processor_service.py), which a wall-clock step (a paused
    VM resuming) moves away from it. Each request is placed in the issue
    frame: sent its own lag after its issue when that lag is under 1 s,
    else the run's median lag (the step, not the client); its TTFT and
    latency (perf-counter durations) from there."""
    raw = []
    for r in jsonl(os.path.join(d, "profile_export.jsonl")):
        m, x = r["metadata"], r.get("metrics", {})

        def val(k):
            v = x.get(k)
            return v["value"] if isinstance(v, dict) else None
        raw.append((m, x, val))
    lags = sorted(m["request_start_ns"] - m["credit_issued_ns"] for m, _, _ in raw)
    small = [v for v in lags if abs(v) < 1e9]
    base = small[len(small) // 2] if small else 0
    out = []
    for m, x, val in raw:
        ok = (not m.get("was_cancelled") and not m.get("context_overflow_skip")
              and val("request_latency") is not None and not x.get("error"))
        lag = m["request_start_ns"] - m["credit_issued_ns"]
        start = m["credit_issued_ns"] + (lag if abs(lag) < 1e9 else base)
        ttft, lat = val("time_to_first_token"), val("request_latency")
        end = start + lat * 1e6 if lat is not None else start + (m["request_end_ns"] - m["request_start_ns"])
        out.append(req(m["conversation_id"], m["turn_index"], m.get("root_correlation_id"),
                       "warmup" if m["benchmark_phase"] == "warmup" else "measured",
                       m["credit_issued_ns"], start, start + ttft * 1e6 if ttft is not None else None, end,
                       val("input_sequence_length"), val("output_sequence_length"), ok,
                       val("usage_prompt_tokens")))
        out[-1]["wall_lag"] = lag
    return out


def read_ours(d):
    run = json.load(open(os.path.join(d, "run.json")))
    out = []
    for r in jsonl(os.path.join(d, "requests.jsonl")):
        stream, inst = r["session"].rsplit("@", 1)
        ok = not r["warmup"] and not r["cancelled"] and r["error"] is None
        out.append(req(stream, r["call"], inst, "warmup" if r["warmup"] else "measured",
                       r["intended_start_ns"], r["start_ns"], r["first_token_ns"], r["end_ns"],
                       r["prompt_tokens"], r["output_tokens"], ok, r.get("server_prompt_tokens")))
    return out, run


def figures(rs, gpus):
    m = [r for r in rs if r["phase"] == "measured" and r["ok"]]
    ttft = [(r["first"] - r["start"]) / 1e6 for r in m if r["first"] is not None]
    tpot = [(r["end"] - r["first"]) / 1e6 / (r["osl"] - 1) for r in m if r["osl"] and r["osl"] > 1]
    span = (max(r["end"] for r in m) - min(r["start"] for r in m)) / 1e9 if m else 0
    p90_tpot = pct(tpot, 0.9)
    return {
        "measured": len(m),
        "p90_interactivity": 1000.0 / p90_tpot if tpot else float("nan"),
        "p90_ttft_ms": pct(ttft, 0.9),
        "tok_s_gpu": sum(r["isl"] + r["osl"] for r in m) / span / gpus if span > 0 else float("nan"),
        "requests": sum(r["phase"] == "measured" for r in rs),
        "warmup": sum(r["phase"] == "warmup" for r in rs),
    }


def phase_start(rs):
    """The end of the warm-up (the measured phase starts when its last
    request returns), or the first measured dispatch without one."""
    w = [r["end"] for r in rs if r["phase"] == "warmup"]
    if w:
        return max(w)
    return min(r["issued"] for r in rs if r["phase"] == "measured")


def sequences(rs):
    """Per stream: its measured turns in dispatch order (instances in the
    order of their first request, each instance's turns in order)."""
    seq = {}
    for r in sorted((r for r in rs if r["phase"] == "measured"), key=lambda r: r["issued"]):
        seq.setdefault(r["stream"], []).append(r["turn"])
    return seq


def paired_offsets(a, b):
    """The dispatch offsets of the requests both made, paired by (stream,
    turn, k-th occurrence): (from the previous turn's return, from the end
    of the warm-up) differences in ms."""
    def index(rs):
        t0, seen, idx, prev = phase_start(rs), {}, {}, {}
        for r in sorted((r for r in rs if r["phase"] == "measured"), key=lambda r: r["issued"]):
            key = (r["stream"], r["turn"])
            k = seen.get(key, 0)
            seen[key] = k + 1
            p = prev.get((r["stream"], r["inst"]))
            gap = r["issued"] - (p["end"] if p and p["turn"] == r["turn"] - 1 else t0)
            idx[key + (k,)] = (gap / 1e6, (r["issued"] - t0) / 1e6)
            prev[(r["stream"], r["inst"])] = r
        return idx
    ia, ib = index(a), index(b)
    both = [k for k in ia if k in ib]
    return ([abs(ia[k][0] - ib[k][0]) for k in both], [abs(ia[k][1] - ib[k][1]) for k in both])


def rel(x, ref):
    return abs(x - ref) / abs(ref) if ref else float("inf")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--gpus", type=int, default=16)
    ap.add_argument("--tol", type=float, default=0.05)
    ap.add_argument("--offset-ms", type=float, default=100.0)
    ap.add_argument("--json")
    a = ap.parse_args()
    ax = read_aiperf(os.path.join(a.dir, "aiperf"))
    ld, ld_run = read_ours(os.path.join(a.dir, "load"))
    sim = None
    if os.path.exists(os.path.join(a.dir, "sim", "requests.jsonl")):
        sim, _ = read_ours(os.path.join(a.dir, "sim"))
    res = {"dir": a.dir, "checks": {}}
    fails = []

    def check(name, ok, what, info=False):
        res["checks"][name] = {"ok": bool(ok) or info, "what": what}
        print(("info " if info else "pass " if ok else "FAIL ") + name + ": " + what)
        if not ok and not info:
            fails.append(name)

    # Tokens.
    bad = [r for r in ax if r["usage_in"] is not None and r["isl"] != r["usage_in"]]
    n_usage = sum(r["usage_in"] is not None for r in ax)
    check("tokens_aiperf", not bad and n_usage > 0,
          f"AIPerf input length == server usage on {n_usage - len(bad)} of {n_usage} requests")
    bad = [r for r in ld if r["usage_in"] is not None and r["usage_in"] >= 0 and r["isl"] != r["usage_in"]]
    n_usage = sum(r["usage_in"] is not None and r["usage_in"] >= 0 for r in ld)
    check("tokens_load", not bad and n_usage > 0,
          f"agentreplay prompt == server usage on {n_usage - len(bad)} of {n_usage} requests")
    # Requests.
    wa = sorted((r["stream"], r["turn"]) for r in ax if r["phase"] == "warmup")
    wb = sorted((r["stream"], r["turn"]) for r in ld if r["phase"] == "warmup")
    check("warmup_requests", wa == wb, what= f"warm-up: AIPerf {len(wa)}, load {len(wb)} requests"
          + ("" if wa == wb else f" (AIPerf {wa[:6]}..., load {wb[:6]}...)"))
    sa, sb = sequences(ax), sequences(ld)
    diverge = []
    for s in sorted(set(sa) | set(sb)):
        x, y = sa.get(s, []), sb.get(s, [])
        n = min(len(x), len(y))
        if x[:n] != y[:n]:
            diverge.append(s)
    na, nb = sum(len(v) for v in sa.values()), sum(len(v) for v in sb.values())
    check("request_order", not diverge and rel(nb, na) <= 0.02,
          what=f"measured requests: AIPerf {na}, load {nb}; streams in a different order: {diverge[:5]}")
    # Dispatch offsets.
    d, dabs = paired_offsets(ax, ld)
    med = statistics.median(d) if d else float("inf")
    med_abs = statistics.median(dabs) if dabs else float("inf")
    res["offsets"] = {"paired": len(d), "median_ms": med, "p90_ms": pct(d, 0.9),
                      "from_warmup_end_median_ms": med_abs}
    check("dispatch_offset", med <= a.offset_ms,
          what=f"median |dispatch offset difference| {med:.1f} ms over {len(d)} paired requests "
          f"(from the end of the warm-up: {med_abs:.0f} ms)")
    # How late each client sent after deciding to (its own lag: a stalled
    # client or machine shows here, and its figures are then not the rules').
    for name, rs in (("aiperf", ax), ("load", ld)):
        lag = sorted(r.get("wall_lag", r["start"] - r["issued"]) / 1e6
                     for r in rs if r["phase"] == "measured")
        res.setdefault("send_lag_ms", {})[name] = {"p50": pct(lag, 0.5), "p90": pct(lag, 0.9),
                                                    "max": lag[-1] if lag else float("nan")}
        check("send_lag_" + name, True, info=True,
              what=f"{name} sent {pct(lag, 0.5):.0f} ms (median), {pct(lag, 0.9):.0f} ms (P90), "
                   f"{lag[-1] if lag else float('nan'):.0f} ms (max) after its dispatch decision "
                   "(AIPerf: in its two clock frames; over 1 s, a step of the wall clock)")
    # Metrics.
    fa, fl = figures(ax, a.gpus), figures(ld, a.gpus)
    res["aiperf"], res["load"] = fa, fl
    for k in ("p90_interactivity", "p90_ttft_ms", "tok_s_gpu"):
        check("load_vs_aiperf_" + k, rel(fl[k], fa[k]) <= a.tol,
              f"{k}: AIPerf {fa[k]:.4g}, load {fl[k]:.4g} ({100 * rel(fl[k], fa[k]):.1f} %)")
    if sim is not None:
        fs = figures(sim, a.gpus)
        res["sim"] = fs
        for k in ("p90_interactivity", "p90_ttft_ms", "tok_s_gpu"):
            check("sim_vs_load_" + k, rel(fs[k], fl[k]) <= a.tol,
                  f"{k}: load {fl[k]:.4g}, sim {fs[k]:.4g} ({100 * rel(fs[k], fl[k]):.1f} %)")
    agg = os.path.join(a.dir, "aiperf", "profile_export_aiperf.json")
    if os.path.exists(agg):
        th = json.load(open(agg)).get("theoretical_prefix_cache_hit") or {}
        ha = th.get("avg", float("nan")) / 100.0
        hl = ld_run["metrics"].get("prefix_hit_rate_theoretical_measured", float("nan"))
        res["hit_theoretical"] = {"aiperf": ha, "load": hl}
        check("hit_theoretical", abs(ha - hl) <= 0.01, 
              what=f"theoretical hit over the measured requests: AIPerf {ha:.4f}, load {hl:.4f}")
    res["ok"] = not fails
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
