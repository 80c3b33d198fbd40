#!/usr/bin/env python3
"""bodies.py: the requests `agentreplay load` sends have AIPerf's structure.

    bodies.py BIN TRACES AIPERF_RAW_EXPORT OUT

Runs `agentreplay load` for a few seconds against a local sink that records
every request body (its messages' roles and whitespace-word counts) and
answers each with max_tokens one-word chunks at once, replaying the traces
from their first turns with no waits (--no-warm-start, tiny caps). Then
every request of AIPerf's raw export (profile_export_raw.jsonl: the
payloads it sent) must have a twin among the recorded bodies: the same
roles in the same order with the same word counts (the cache-bust marker
included, one word at the start of the first user message). Exit 1 if one
has none.
"""
import json
import os
import re
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

WORD = re.compile(r"[ \n\t\r]+")


def words(text):
    return len([w for w in WORD.split(text) if w])


def shape(messages):
    return tuple((m["role"], words(m["content"])) for m in messages)


class Sink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    shapes = []
    markers = []

    def log_message(self, *a):
        pass

    def do_GET(self):
        self.reply("application/json", json.dumps({"data": [{"id": "m", "object": "model"}]}))

    def do_POST(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                n = int(self.rfile.readline().strip(), 16)
                if not n:
                    self.rfile.readline()
                    break
                data += self.rfile.read(n)
                self.rfile.readline()
        else:
            data = self.rfile.read(int(self.headers["Content-Length"]))
        req = json.loads(data)
        Sink.shapes.append(shape(req["messages"]))
        user = next((m["content"] for m in req["messages"] if m["role"] == "user"), "")
        Sink.markers.append(WORD.split(user.strip())[0] if user.strip() else "")
        n = max(int(req.get("max_tokens") or 1), 1)
        chunk = {"id": "x", "object": "chat.completion.chunk",
                 "choices": [{"index": 0, "delta": {"content": " w"}, "finish_reason": None}]}
        usage = {"id": "x", "object": "chat.completion.chunk", "choices": [],
                 "usage": {"prompt_tokens": sum(c for _, c in Sink.shapes[-1]),
                           "completion_tokens": n, "total_tokens": 0}}
        body = "".join("data: %s\n\n" % json.dumps(chunk) for _ in range(n))
        body += "data: %s\n\ndata: [DONE]\n\n" % json.dumps(usage)
        self.reply("text/event-stream", body)

    def reply(self, ctype, text):
        b = text.encode()
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)


def main():
    bin_, traces, raw, out = sys.argv[1:5]
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    port = srv.server_address[1]
    r = subprocess.run([bin_, "load", "--url", "http://127.0.0.1:%d" % port, "--model", "m",
                        "--trace", traces, "--format", "agentx", "--concurrency", "4",
                        "--no-warm-start", "--think-cap", "0.001", "--idle-cap", "0.001",
                        "--duration", "30", "-o", out, "--force", "--quiet"], timeout=300)
    srv.shutdown()
    ours = set(Sink.shapes)
    want, missing = 0, []
    with open(raw) as f:
        for line in f:
            x = json.loads(line)
            m = x["metadata"]
            want += 1
            if shape(x["payload"]["messages"]) not in ours:
                missing.append((m["conversation_id"], m["turn_index"]))
    marked = sum(bool(re.match(r"^\[rid:[0-9a-f]{12}\]$", w)) for w in Sink.markers)
    print("%s bodies: %d of %d AIPerf payloads have a twin (roles and word counts); %d of %d "
          "first user messages start with the marker" % ("pass" if not missing and r.returncode == 0 else "FAIL",
                                                          want - len(missing), want, marked, len(Sink.markers)))
    if missing:
        print("  without a twin:", missing[:10])
    sys.exit(1 if missing or r.returncode else 0)


if __name__ == "__main__":
    main()
