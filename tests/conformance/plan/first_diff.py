#!/usr/bin/env python3
"""Compares two replay plans (canonical JSON) trace by trace:

    python3 first_diff.py AIPERF.json OURS.json

Prints one line per trace, `identical` or `different` with the first
difference as a JSON path and both values, then the same for what lies
outside the traces (root order, settings, lanes). Exit status 0 when the
files are byte-identical, 1 otherwise.
"""

import json
import sys


def canon(x):
    return json.dumps(x, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def first(a, b, path):
    """The first path where a and b differ, with both values, or None."""
    if type(a) is not type(b):
        return path, a, b
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{path}.{k}", a.get(k, "<absent>"), b.get(k, "<absent>")
            d = first(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list):
        for i, (x, y) in enumerate(zip(a, b)):
            d = first(x, y, f"{path}[{i}]")
            if d:
                return d
        if len(a) != len(b):
            return f"{path} (length)", len(a), len(b)
        return None
    return None if a == b else (path, a, b)


def short(v):
    s = json.dumps(v, ensure_ascii=True)
    return s if len(s) <= 160 else s[:157] + "..."


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    raw_a, raw_b = (open(p, "rb").read() for p in sys.argv[1:3])
    a, b = json.loads(raw_a), json.loads(raw_b)
    ta = {t["trace_id"]: t for t in a.get("traces", [])}
    tb = {t["trace_id"]: t for t in b.get("traces", [])}
    for tid in list(ta) + [t for t in tb if t not in ta]:
        if tid not in ta or tid not in tb:
            print(f"{tid}: different: only in {'ours' if tid in tb else 'AIPerf'}")
            continue
        if canon(ta[tid]) == canon(tb[tid]):
            print(f"{tid}: identical")
            continue
        p, x, y = first(ta[tid], tb[tid], "")
        print(f"{tid}: different at {p}: AIPerf {short(x)}, ours {short(y)}")
    ra = {k: v for k, v in a.items() if k != "traces"}
    rb = {k: v for k, v in b.items() if k != "traces"}
    what = "lanes, root order, settings" if "lanes" in ra else "root order, settings"
    d = first(ra, rb, "")
    print(f"({what}): " + ("identical" if not d else
                           f"different at {d[0]}: AIPerf {short(d[1])}, ours {short(d[2])}"))
    same = raw_a == raw_b
    print("files: " + ("byte-identical" if same else "differ"))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
