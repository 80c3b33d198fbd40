#!/usr/bin/env python3
"""Writes a native agentreplay trace (traces/FORMAT.md, e.g. the output of
`agentreplay trace synth`) as a folder of Weka JSON files, one per session
tree, that AIPerf's Weka loader accepts:

    python3 native_to_weka.py IN.jsonl OUT_DIR

A root's request list is its calls in order, each subagent entry placed
right after the call it forks after (at the start when it forks at the
parent's start): the order `agentreplay` gives a native trace's positions.
A subagent entry's `t` is its spawn time on the root's clock and its inner
calls carry absolute times, so AIPerf reads the same times the native
trace holds. Nested subagents have no Weka form (AIPerf refuses them): the
converter stops on one.
"""

import json
import os
import sys


def expand(ids):
    out = []
    for x in ids:
        if isinstance(x, list):
            out.extend(range(x[0], x[0] + x[1]))
        else:
            out.append(x)
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, out_dir = sys.argv[1], sys.argv[2]
    sessions, calls = [], []  # calls: (session index, call dict)
    with open(src) as f:
        header = json.loads(f.readline())
        if header.get("format") != "agentreplay-trace":
            sys.exit(f"{src}: not a native trace")
        for line in f:
            if not line.strip():
                continue
            o = json.loads(line)
            if "session" in o:
                if "file" not in o and sessions:
                    o["file"] = sessions[-1].get("file")
                o["calls"] = []
                sessions.append(o)
            else:
                s = sessions[-1]
                blocks = []
                if "base" in o:
                    blocks = calls[o["base"]]["blocks"][: o["shared"]]
                o["blocks"] = blocks + expand(o.get("ids", []))
                calls.append(o)
                s["calls"].append(o)
    kids = {}
    for i, s in enumerate(sessions):
        if "parent" in s:
            if "parent" in sessions[s["parent"]]:
                sys.exit(f"{src}: session {i} nests subagents, which Weka traces cannot hold")
            kids.setdefault(s["parent"], []).append(i)
    os.makedirs(out_dir, exist_ok=True)

    def call_json(c, t_ns):
        d = {"t": t_ns / 1e9, "type": c.get("type", "n"), "model": c.get("model", "model"),
             "in": c["in"], "out": c["out"], "hash_ids": c["blocks"],
             "input_types": c["input_types"].split(",") if c.get("input_types") else [],
             "output_types": c["output_types"].split(",") if c.get("output_types") else [],
             "stop": c.get("stop", ""),
             "api_time": c["api"] / 1e9 if "api" in c else None,
             "think_time": c["think"] / 1e9 if "think" in c else None}
        return d

    for ri, root in enumerate(sessions):
        if "parent" in root:
            continue
        name = root.get("name") or f"trace_{ri}"
        entries = []
        subs = kids.get(ri, [])
        models = []
        for slot in range(len(root["calls"]) + 1):
            for k in subs:
                s = sessions[k]
                fa = s.get("fork_after")
                if (0 if fa is None else fa + 1) != slot:
                    continue
                spawn_ns = s.get("fork_t", 0)
                inner = [call_json(c, spawn_ns + c["t"]) for c in s["calls"]]
                e = {"t": spawn_ns / 1e9, "type": "subagent",
                     "agent_id": s.get("name") or f"agent_{k}",
                     "subagent_type": s.get("kind") or "Explore",
                     "status": s.get("status") or "completed",
                     "requests": inner,
                     "models": sorted({c["model"] for c in inner})}
                if "duration" in s:
                    e["duration_ms"] = round(s["duration"] / 1e6)
                entries.append(e)
            if slot < len(root["calls"]):
                c = root["calls"][slot]
                entries.append(call_json(c, c["t"]))
        for e in entries:
            for m in [e["model"]] if "model" in e else e["models"]:
                if m not in models:
                    models.append(m)
        doc = {"id": name, "models": models, "block_size": root["block_size"],
               "hash_id_scope": "local", "tool_tokens": 0, "system_tokens": 0,
               "requests": entries}
        with open(os.path.join(out_dir, name + ".json"), "w") as f:
            json.dump(doc, f)


if __name__ == "__main__":
    main()
