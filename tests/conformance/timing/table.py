#!/usr/bin/env python3
"""table.py OUT: the conformance table (markdown) from OUT/c*/compare.json."""
import glob
import json
import os
import sys

rows = []
def key(path):
    name = os.path.basename(os.path.dirname(path))[1:]
    digits = "".join(ch for ch in name if ch.isdigit()) if name[:1].isdigit() else "0"
    head = name.split("-")[0]
    return (int(head) if head.isdigit() else 0, name)


for f in sorted(glob.glob(os.path.join(sys.argv[1], "c*", "compare.json")), key=key):
    r = json.load(open(f))
    c = os.path.basename(os.path.dirname(f))[1:]
    for tool in ("aiperf", "load", "sim"):
        if tool not in r:
            continue
        x = r[tool]
        rows.append(f"| {c} | {tool} | {x['warmup']} | {x['requests']} | {x['measured']} | "
                    f"{x['p90_interactivity']:.1f} | {x['p90_ttft_ms']:.0f} | {x['tok_s_gpu']:.1f} |")
    o = r.get("offsets", {})
    ok = "pass" if r["ok"] else "FAIL: " + ", ".join(k for k, v in r["checks"].items() if not v["ok"])
    rows.append(f"| {c} | checks | | | | | | median offset diff {o.get('median_ms', float('nan')):.1f} ms; {ok} |")
print("| conc | client | warm-up | requests | measured | P90 interactivity tok/s/user | P90 TTFT ms | tok/s/GPU |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
print("\n".join(rows))
