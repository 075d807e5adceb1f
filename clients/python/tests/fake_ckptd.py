#!/usr/bin/env python3
"""A tiny stand-in for ckptd used by tests/test_unit.py to exercise the client's transport
without the Go daemon: it speaks the framing and answers a few methods. FAKE_MODE selects a
misbehaviour:

  echo        answer every request with {"method", "params", "attachmentLength"}; the attachment is
              echoed back; responses to a batch of pipelined requests are sent in reverse order
  die         write "fatal: disk on fire" to stderr and exit 3 on the first checkpoint/save
  nullid      answer checkpoint/save with a -32004 error whose id is null
  garbage     write a malformed frame on the first checkpoint/save
  hang        never answer checkpoint/save (but exit on stdin EOF)
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from ckptd.framing import encode_message, read_message  # noqa: E402

MODE = os.environ.get("FAKE_MODE", "echo")
out = sys.stdout.buffer


def send(msg, att=None):
    out.write(encode_message(msg, att))
    out.flush()


def main():
    inp = sys.stdin.buffer
    sys.stderr.write("fake ckptd starting, mode %s\n" % MODE)
    sys.stderr.flush()
    held = []
    while True:
        m = read_message(inp)
        if m is None:
            return 0
        msg, att = m
        method, rid = msg.get("method"), msg.get("id")
        params = msg.get("params")
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": rid, "result": {"serverName": "fake", "serverVersion": "0",
                  "protocolVersion": int(os.environ.get("FAKE_PROTOCOL", "1")),
                  "capabilities": {"attachments": True, "maxStateBytes": 1000,
                  "drift": os.environ.get("FAKE_DRIFT") == "1"}}})
            continue
        if method == "shutdown":
            send({"jsonrpc": "2.0", "id": rid, "result": None})
            return 0
        if method == "checkpoint/save":
            if MODE == "die":
                sys.stderr.write("fatal: disk on fire\n")
                sys.stderr.flush()
                os._exit(3)
            if MODE == "nullid":
                send({"jsonrpc": "2.0", "id": None, "error": {"code": -32004, "message": "too large", "data": {"limit": 1, "size": 2}}})
                continue
            if MODE == "garbage":
                out.write(b"Content-Length: banana\r\n\r\n{}")
                out.flush()
                continue
            if MODE == "hang":
                continue
        if method == "notify-me":
            send({"jsonrpc": "2.0", "method": "checkpoint/saved", "params": {"seq": 1}})
            send({"jsonrpc": "2.0", "method": "drift/changed", "params": {"watchId": "w1", "drifted": True, "changes": []}})
        if method == "drift/watch":
            send({"jsonrpc": "2.0", "id": rid, "result": {"watchId": "w1"}})
            send({"jsonrpc": "2.0", "method": "drift/changed", "params": {"watchId": "w1", "drifted": True, "changes": [{"path": "a.py", "kind": "modified"}]}})
            continue
        if method == "boom":
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": params["code"], "message": "boom", "data": params.get("data")}})
            continue
        result = {"method": method, "params": params, "attachmentLength": None if att is None else len(att)}
        if isinstance(params, dict) and params.get("hold"):
            held.append((rid, result, att))
            if len(held) < params["hold"]:
                continue
            for h in reversed(held):
                send({"jsonrpc": "2.0", "id": h[0], "result": h[1]}, h[2])
            held.clear()
            continue
        send({"jsonrpc": "2.0", "id": rid, "result": result}, att)


if __name__ == "__main__":
    sys.exit(main())
