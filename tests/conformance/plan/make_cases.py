#!/usr/bin/env python3
"""Writes the hand-made Weka traces of tests/conformance/plan/cases/: small
traces, each aimed at rules the public traces do not reach (see the table
in tests/conformance/README.md). They are committed; rerun this only to
change them:

    python3 tests/conformance/plan/make_cases.py tests/conformance/plan/cases
"""

import json
import os
import sys


def rng(a, b):
    """Block ids a .. b inclusive."""
    return list(range(a, b + 1))


def req(t, h, in_=None, out=50, api=1.0, model="m", typ="n", bs=64, **kw):
    d = {"t": t, "type": typ, "model": model,
         "in": in_ if in_ is not None else len(h) * bs + 10, "out": out, "hash_ids": h,
         "input_types": kw.pop("input_types", []), "output_types": [],
         "stop": kw.pop("stop", "tool_use"), "api_time": api, "think_time": None}
    d.update(kw)
    return d


def sub(t, agent, reqs, dur=None, models=("m",), **kw):
    d = {"t": t, "type": "subagent", "agent_id": agent, "subagent_type": "Explore",
         "status": "completed", "requests": reqs, "models": list(models)}
    if dur is not None:
        d["duration_ms"] = dur
    d.update(kw)
    return d


def trace(tid, requests, bs=64, tool=0, system=0):
    models = []
    for r in requests:
        for m in [r["model"]] if "model" in r else r["models"]:
            if m not in models:
                models.append(m)
    return {"id": tid, "models": models, "block_size": bs, "hash_id_scope": "local",
            "tool_tokens": tool, "system_tokens": system, "requests": requests}


CASES = {}

# Flat chains: a compaction continues its chain (seam splice), and a
# second compaction is left a separate agent because the longer state is
# pulled back later (weka_agent_chains.py:660-740).
CASES["c01_flat_seams"] = trace("c01_flat_seams", [
    req(0, rng(1, 10)), req(2, rng(1, 12)),
    req(4, rng(1, 5) + rng(100, 106)), req(6, rng(1, 5) + rng(100, 108)),
    req(8, rng(1, 5) + rng(100, 110)),
    req(20, rng(1, 3) + rng(300, 305)), req(22, rng(1, 3) + rng(300, 306)),
])
CASES["c02_flat_pullback"] = trace("c02_flat_pullback", [
    req(0, rng(1, 10)), req(2, rng(1, 12)),
    req(4, rng(1, 5) + rng(100, 106), api=3.0), req(6, rng(1, 5) + rng(100, 108)),
    req(5, rng(1, 12) + rng(200, 203), api=0.5), req(7.5, rng(1, 12) + rng(200, 206)),
    req(9, rng(1, 12) + rng(200, 208)),
])
# Aux sidecars (small fresh context; another model) and a reduction
# (large in, short out) beside a main chain that keeps growing
# (weka_agent_chains.py:128-208).
CASES["c03_aux_reduction"] = trace("c03_aux_reduction", [
    req(0, rng(1, 300), in_=300 * 64 + 5, out=400, api=2.0),
    req(3, rng(1, 400), in_=400 * 64 + 7, out=300, api=2.0),
    req(4, rng(5000, 5005), in_=6 * 64 + 3, out=30, api=0.5),
    req(5.5, rng(1, 350) + rng(6000, 6002), in_=353 * 64, out=90, api=1.0, model="small"),
    req(6, rng(1, 380) + rng(7000, 7010), in_=391 * 64 + 11, out=500, api=1.5),
    req(9, rng(1, 500), in_=500 * 64 + 1, out=200, api=2.0),
    req(12, rng(1, 600), in_=600 * 64 + 9, out=100, api=2.0),
])
# A parallel fan-out: three workers forked from one main request, running
# together (a worker group), two more from another point (solo agents).
CASES["c04_worker_group"] = trace("c04_worker_group", [
    req(0, rng(1, 50), api=1.0), req(1.5, rng(1, 60), api=0.4),
    req(2, rng(1, 55) + [2001, 2002], api=5.0), req(2.5, rng(1, 55) + [3001, 3002], api=5.0),
    req(3, rng(1, 55) + [4001, 4002], api=5.0),
    req(8, rng(1, 55) + [2001, 2002, 2003], api=1.0),
    req(8.2, rng(1, 55) + [3001, 3002, 3003], api=1.0),
    req(10, rng(1, 70), api=1.0),
    req(11.5, rng(1, 65) + [5001], api=0.5), req(12.5, rng(1, 65) + [6001], api=0.5),
    req(14, rng(1, 80), api=1.0),
])
# Subagents: duration missing (end from the calls), negative (end at the
# spawn), absolute and relative inner times, none at all, a background one
# and two sharing a join (weka_trace.py:99-111, 169-189, 1956-2088).
CASES["c05_subagents"] = trace("c05_subagents", [
    req(0, rng(1, 20), api=2.0),
    sub(2.5, "agent_a", [req(0.0, rng(500, 510), api=1.0), req(1.5, rng(500, 515), api=1.0)]),
    sub(2.5, "agent_b", [req(0.2, rng(600, 610), api=0.1)], dur=-5000),
    sub(3.0, "agent_c", [req(3.1, rng(700, 710), api=0.5), req(4.0, rng(700, 712), api=0.5)],
        dur=1500),
    req(3.0, rng(1, 30), api=1.0),
    sub(4.5, "agent_e", [], dur=200),
    req(10, rng(1, 40), api=1.0),
    sub(11, "agent_d", [req(0.5, rng(800, 805), api=1.0)], dur=100000),
    sub(11, "agent_f", [req(12.5, rng(900, 905), api=1.0)], dur=50),
    req(11.2, rng(1, 45), api=0.5),
])
# A subagent before any root request is dropped, and a dropped one may
# repeat a kept one's agent_id (weka_trace.py:703-720, 1318-1339).
CASES["c06_dropped"] = trace("c06_dropped", [
    sub(0, "agent_x", [req(0.1, rng(50, 55))], dur=1000),
    sub(0, "agent_y", [req(0.2, rng(60, 65))], dur=1000),
    req(1, rng(1, 10)),
    sub(2.5, "agent_y", [req(0.1, rng(70, 75))], dur=3000),
    req(6, rng(1, 12)),
])
# Empty block-id lists: leading rows ride the main chain, the first
# hash-bearing request joins them; a subagent with some too.
CASES["c07_empty_hash"] = trace("c07_empty_hash", [
    req(0, [], in_=500), req(1, [], in_=700),
    req(2, rng(1, 10)), req(3, [], in_=900), req(4, rng(1, 14)),
    sub(5.5, "agent_z", [req(0.0, [], in_=300), req(1.0, rng(40, 44)), req(2.0, [], in_=400)],
        dur=4000),
    req(10, rng(1, 18)),
])
# A title-generation preamble: a small disjoint first call set aside, then
# re-attached to the main chain (weka_trace.py:654-700).
CASES["c08_preamble"] = trace("c08_preamble", [
    req(0, rng(9000, 9003), out=20, api=0.3),
    req(0.5, rng(1, 30)), req(2, rng(1, 35)), req(4, rng(1, 40)),
])
# Branches that began while their spawning turn was in flight start when
# it is sent (branch_orchestrator.py:434-474).
CASES["c09_dispatch_issue"] = trace("c09_dispatch_issue", [
    req(0, rng(1, 20), api=10.0),
    sub(2, "agent_p", [req(0.0, rng(300, 305), api=1.0), req(2.0, rng(300, 307), api=1.0)],
        dur=4000),
    sub(3, "agent_q", [req(0.5, rng(400, 405), api=1.0)], dur=2000),
    req(12, rng(1, 25), api=1.0),
    sub(12.5, "agent_r", [req(0.0, rng(450, 452), api=1.0)], dur=900),
    req(14, rng(1, 30), api=1.0),
])
# A declared tool + system prefix: turn 0's system segment, a flat worker
# that keeps it and one that does not; truncated block lists, partial
# tails and a block-aligned pull-back (assistant caps;
# weka_synth_buf.py:124-248, 557-629).
CASES["c10_prefix_msgs"] = trace("c10_prefix_msgs", [
    req(0, rng(1, 10), in_=160, out=100, bs=16, api=1.0),
    req(2, rng(1, 20), in_=320, out=40, bs=16, api=1.0),
    req(4, rng(1, 15), in_=240, out=10, bs=16, api=1.0),
    req(6, rng(1, 15) + rng(40, 45), in_=21 * 16 + 5, out=70, bs=16, api=1.0),
    req(6.5, rng(1, 12) + rng(60, 64), in_=30 * 16, out=30, bs=16, api=1.0),
    req(7.5, rng(1, 12) + rng(60, 66), in_=40 * 16 + 3, out=30, bs=16, api=1.0),
    req(7.0, rng(80, 90), in_=11 * 16, out=20, bs=16, api=0.2),
    req(9, rng(1, 15) + rng(40, 50), in_=26 * 16, out=33, bs=16, api=1.0),
], bs=16, tool=100, system=50)
# Recorded times at their edges: no api_time, a negative one (a longer
# delay), zero, equal starts, streaming calls with ttft.
CASES["c11_api_edges"] = trace("c11_api_edges", [
    req(0, rng(1, 10), api=None), req(1, rng(1, 12), api=-0.5),
    req(2, rng(1, 14), api=0.0, typ="s", ttft=0.1), req(2, rng(1, 16), api=0.25),
    req(2.75, rng(1, 18), api=0.001, input_types=["text"], stop="end_turn"),
    req(3.0005, rng(1, 20), api=0.0005, stop=""),
])
# A subagent whose own calls split into chains (its main chain and a
# worker), with its own declared prefix.
CASES["c12_subagent_chains"] = trace("c12_subagent_chains", [
    req(0, rng(1, 20), api=1.0),
    sub(1.5, "agent_s", [
        req(0.0, rng(100, 140), api=1.0), req(1.5, rng(100, 150), api=1.0),
        req(2.0, rng(100, 130) + rng(170, 175), api=2.0),
        req(3.0, rng(100, 160), api=1.0),
        req(4.5, rng(100, 130) + rng(170, 178), api=1.0),
        req(5.0, rng(600, 602), in_=3 * 64, out=10, model="small", api=0.2),
    ], dur=8000, tool_tokens=1000, system_tokens=300),
    req(10, rng(1, 30), api=1.0),
])
# Ids outside ASCII (written \\uXXXX) and a streaming root.
CASES["c13_unicode"] = trace("c13_unic\u00f8de \u2603", [
    req(0, rng(1, 5), typ="s", ttft=0.2),
    sub(1.5, "ag\u00e9nt_\U0001f600", [req(0.0, rng(20, 24))], dur=2000),
    req(4, rng(1, 8)),
])
# A genuine worker group: three two-call workers forked from one request
# and running together.
CASES["c14_worker_group3"] = trace("c14_worker_group3", [
    req(0, rng(1, 300), in_=300 * 64, api=1.0), req(1.5, rng(1, 320), in_=320 * 64, api=0.4),
    req(2, rng(1, 310) + [2001, 2002], in_=312 * 64, api=5.0),
    req(2.5, rng(1, 310) + [3001, 3002], in_=312 * 64, api=5.0),
    req(3, rng(1, 310) + [4001, 4002], in_=312 * 64, api=5.0),
    req(8, rng(1, 310) + [2001, 2002, 2003], in_=313 * 64, api=1.0),
    req(8.2, rng(1, 310) + [3001, 3002, 3003], in_=313 * 64, api=1.0),
    req(8.4, rng(1, 310) + [4001, 4002, 4003], in_=313 * 64, api=1.0),
    req(10, rng(1, 330), in_=330 * 64, api=1.0),
])
# No root calls: every subagent is dropped and the root has no turns.
CASES["c15_no_root_calls"] = trace("c15_no_root_calls", [
    sub(0, "agent_1", [req(0.5, rng(1, 5))], dur=1000),
])


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "cases")
    os.makedirs(out, exist_ok=True)
    for name, doc in CASES.items():
        with open(os.path.join(out, name + ".json"), "w") as f:
            json.dump(doc, f, indent=1, ensure_ascii=False)
            f.write("\n")


if __name__ == "__main__":
    main()
