#!/usr/bin/env python3
"""Save + load round trips through the ckptd Python client, next to an in-process baseline.

For each state size (1 KB and 100 KB by default) it measures, interleaved iteration by iteration:

  ckptd      client.save(workflow, state) then client.load(checkpoint_id=...) through the daemon
             (JSON-RPC over pipes, state as a frame attachment, SQLite WAL in the daemon)
  baseline   the same checkpoint written in this process with Python's sqlite3: WAL, the same
             `synchronous` level (FULL, or NORMAL with --durability normal), one transaction per
             save, JSON-encoded state in a table like ckptd's (id, workflow, seq, state blob), then
             read back by id and JSON-decoded

States are checkpoint-like JSON (a message list with words and ids) that changes every
iteration (ckptd deduplicates identical states, which would flatter it). The daemon runs with
--keep-last 0 so that neither side deletes anything. Prints p50/p95/p99 in milliseconds and the
ratio ckptd / baseline; #18's targets are a round-trip p95 ratio <= 1.5 for 1 KB states and
<= 1.25 for 100 KB states (other sizes are reported against 1.25).

With --base-binary OLD, a third contender runs the same save + load through a daemon of the
binary OLD (a baseline build, e.g. main's), interleaved with the others, and a second table gives
the ratios ckptd / OLD, plus a trivial request (workflows() on a database holding one workflow)
through both daemons: an A/B of two builds measured in one run.

usage: bench_roundtrip.py [--binary PATH] [--base-binary OLD] [--n 300] [--sizes 1024,102400] [--durability full|normal]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Sequence

try:
    import ckptd
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
    import ckptd

WORDS = (
    "the agent calls a tool and reads the result then plans the next step summary answer context memory "
    "retrieve function output input error retry node graph state value channel task user assistant system "
    "search document page query token model reply reason check verify update write file list item"
).split()


def make_state(target_bytes: int, rng: random.Random) -> Dict[str, Any]:
    """A checkpoint-like state of about target_bytes once JSON-encoded."""
    messages: List[Dict[str, Any]] = []
    state: Dict[str, Any] = {"step": 0, "thread_id": "thread-%08x" % rng.getrandbits(32), "messages": messages,
                             "scratch": {"plan": [], "visited": []}}
    size = len(json.dumps(state))
    i = 0
    while size < target_bytes:
        n_words = rng.randint(5, 40)
        content = " ".join(rng.choice(WORDS) for _ in range(n_words))
        msg = {"id": "msg-%06d-%04x" % (i, rng.getrandbits(16)), "role": ("user", "assistant", "tool")[i % 3],
               "content": content}
        cost = len(json.dumps(msg)) + 1
        if size + cost > target_bytes and messages:
            msg["content"] = content[: max(1, len(content) - (size + cost - target_bytes))]
            cost = len(json.dumps(msg)) + 1
        messages.append(msg)
        size += cost
        i += 1
    return state


def vary(state: Dict[str, Any], i: int, rng: random.Random) -> Dict[str, Any]:
    """The next iteration's state: same size class, different bytes (a new step, one message edited)."""
    s = dict(state)
    s["step"] = i
    msgs = list(state["messages"])
    k = i % len(msgs)
    m = dict(msgs[k])
    m["id"] = "msg-%06d-%04x" % (i, rng.getrandbits(16))
    msgs[k] = m
    s["messages"] = msgs
    return s


class Baseline:
    def __init__(self, path: str, synchronous: str) -> None:
        self.con = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.con.execute("PRAGMA journal_mode=WAL")
        self.con.execute("PRAGMA synchronous=%s" % synchronous)
        self.con.execute(
            "CREATE TABLE IF NOT EXISTS checkpoints (id TEXT PRIMARY KEY, workflow TEXT NOT NULL, "
            "seq INTEGER NOT NULL, state BLOB)"
        )
        self.seq = 0

    def save(self, workflow: str, state: Any) -> str:
        data = json.dumps(state, separators=(",", ":")).encode()
        self.seq += 1
        cid = "%s-%d" % (workflow, self.seq)
        self.con.execute("BEGIN IMMEDIATE")
        try:
            self.con.execute("INSERT INTO checkpoints (id, workflow, seq, state) VALUES (?, ?, ?, ?)",
                             (cid, workflow, self.seq, data))
            self.con.execute("COMMIT")
        except BaseException:
            self.con.execute("ROLLBACK")
            raise
        return cid

    def load(self, cid: str) -> Any:
        row = self.con.execute("SELECT state FROM checkpoints WHERE id = ?", (cid,)).fetchone()
        return json.loads(row[0])


def pct(values: Sequence[float], p: float) -> float:
    xs = sorted(values)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return (xs[lo] + (xs[hi] - xs[lo]) * (k - lo)) * 1000.0


def human(n: int) -> str:
    return "%d KB" % (n // 1024) if n >= 1024 else "%d B" % n


def main() -> int:
    ap = argparse.ArgumentParser(description="ckptd client round-trip benchmark vs in-process sqlite3")
    ap.add_argument("--binary", help="ckptd executable (default: $CKPTD_PATH, else ckptd on PATH)")
    ap.add_argument("--base-binary", help="a baseline ckptd executable to compare with, interleaved in the same run")
    ap.add_argument("--n", type=int, default=300, help="measured round trips per size (default 300)")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--sizes", default="1024,102400", help="state sizes in bytes (default 1024,102400)")
    ap.add_argument("--durability", choices=["full", "normal"], default="full",
                    help="ckptd --durability and the baseline's synchronous level (FULL / NORMAL)")
    ap.add_argument("--dir", help="where to put the databases (default: a temp dir; same file system for both)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="also write the figures (and every sample, in ms) as JSON here")
    args = ap.parse_args()

    sizes = [int(s) for s in args.sizes.split(",") if s]
    work = tempfile.mkdtemp(prefix="ckptd-bench-", dir=args.dir)
    rng = random.Random(args.seed)
    synchronous = args.durability.upper()
    rows = []
    ab_rows = []
    samples: Dict[str, Any] = {}
    try:
        daemon_args = ["--durability", args.durability, "--keep-last", "0", "--log-level", "warn"]
        client = ckptd.Client(db=os.path.join(work, "ckptd.db"), binary=args.binary, args=daemon_args)
        old = None
        if args.base_binary:
            old = ckptd.Client(db=os.path.join(work, "ckptd-base.db"), binary=args.base_binary, args=daemon_args)
            print("A/B baseline: ckptd %s (%s)" % (old.server_info.get("serverVersion"), old.binary))
        base = Baseline(os.path.join(work, "baseline.db"), synchronous)
        fs = subprocess.run(["df", "-T", work], capture_output=True, text=True).stdout.splitlines()[-1:] or ["?"]
        print("ckptd %s (%s), durability %s | baseline: sqlite3 %s in-process, WAL, synchronous=%s"
              % (client.server_info.get("serverVersion"), client.binary, client.capabilities.get("durability"),
                 sqlite3.sqlite_version, synchronous))
        print("python %s | %d round trips per size after %d warm-up | dir %s (%s)"
              % (sys.version.split()[0], args.n, args.warmup, work, " ".join(fs[0].split()[:2])))
        for size in sizes:
            state0 = make_state(size, rng)
            actual = len(json.dumps(state0, separators=(",", ":")).encode())
            wf = "bench-%d" % size
            res: Dict[str, Dict[str, List[float]]] = {
                "ckptd": {"save": [], "load": [], "rt": []}, "baseline": {"save": [], "load": [], "rt": []},
                "old": {"save": [], "load": [], "rt": []}}
            contenders = ["ckptd", "baseline"] + (["old"] if old else [])
            for i in range(args.warmup + args.n):
                state = vary(state0, i, rng)
                order = contenders[i % len(contenders):] + contenders[:i % len(contenders)]
                for who in order:
                    t0 = time.perf_counter()
                    if who in ("ckptd", "old"):
                        c = client if who == "ckptd" else old
                        cid = c.save(wf, state, step=i)["checkpointId"]
                        t1 = time.perf_counter()
                        back = c.load(checkpoint_id=cid).state
                    else:
                        cid = base.save(wf, state)
                        t1 = time.perf_counter()
                        back = base.load(cid)
                    t2 = time.perf_counter()
                    if back["step"] != i:
                        raise SystemExit("%s returned the wrong state" % who)
                    if i >= args.warmup:
                        r = res[who]
                        r["save"].append(t1 - t0)
                        r["load"].append(t2 - t1)
                        r["rt"].append(t2 - t0)
            samples[human(size)] = {who: {op: [x * 1000.0 for x in xs] for op, xs in r.items()}
                                    for who, r in res.items() if who in contenders}
            for op, label in (("rt", "round trip"), ("save", "save"), ("load", "load")):
                c, b = res["ckptd"][op], res["baseline"][op]
                rows.append((human(size), actual, label, [pct(c, p) for p in (50, 95, 99)],
                             [pct(b, p) for p in (50, 95, 99)]))
                if old:
                    ab_rows.append((human(size), label, [pct(c, p) for p in (50, 95, 99)],
                                    [pct(res["old"][op], p) for p in (50, 95, 99)]))
        if old:
            # The trivial request: workflows() (workflow/list) on a database holding one workflow.
            lat: Dict[str, List[float]] = {"ckptd": [], "old": []}
            for i in range(args.warmup + args.n):
                for who in (("ckptd", "old") if i % 2 == 0 else ("old", "ckptd")):
                    c = client if who == "ckptd" else old
                    t0 = time.perf_counter()
                    c.workflows()
                    if i >= args.warmup:
                        lat[who].append(time.perf_counter() - t0)
            ab_rows.append(("-", "workflows", [pct(lat["ckptd"], p) for p in (50, 95, 99)],
                            [pct(lat["old"], p) for p in (50, 95, 99)]))
            old.close()
        client.close()
        base.con.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    hdr = "%-7s %-10s | %-26s | %-26s | %s" % ("state", "op", "ckptd p50 / p95 / p99 ms", "sqlite3 p50 / p95 / p99 ms",
                                              "ratio p50 / p95 / p99")
    print()
    print(hdr)
    print("-" * len(hdr))
    verdicts = []
    for size_h, actual, label, c, b in rows:
        ratios = [x / y if y > 0 else float("inf") for x, y in zip(c, b)]
        print("%-7s %-10s | %7.3f / %7.3f / %7.3f | %7.3f / %7.3f / %7.3f | %5.2fx / %5.2fx / %5.2fx"
              % (size_h, label, c[0], c[1], c[2], b[0], b[1], b[2], ratios[0], ratios[1], ratios[2]))
        if label == "round trip":
            verdicts.append((size_h, ratios[1]))
    if ab_rows:
        hdr = "%-7s %-10s | %-26s | %-26s | %s" % ("state", "op", "ckptd p50 / p95 / p99 ms", "base p50 / p95 / p99 ms",
                                                  "ratio p50 / p95 / p99")
        print()
        print("A/B: this build against --base-binary, same run (below 1x: faster)")
        print(hdr)
        print("-" * len(hdr))
        for size_h, label, c, b in ab_rows:
            ratios = [x / y if y > 0 else float("inf") for x, y in zip(c, b)]
            print("%-7s %-10s | %7.3f / %7.3f / %7.3f | %7.3f / %7.3f / %7.3f | %5.2fx / %5.2fx / %5.2fx"
                  % (size_h, label, c[0], c[1], c[2], b[0], b[1], b[2], ratios[0], ratios[1], ratios[2]))
    if args.json:
        out = {"durability": args.durability, "n": args.n, "sqlite_version": sqlite3.sqlite_version,
               "rows": [{"size": sz, "bytes": actual, "op": label, "ckptd": c, "baseline": b} for sz, actual, label, c, b in rows],
               "samples_ms": samples}
        with open(args.json, "w") as f:
            json.dump(out, f)
    print()
    for size_h, ratio in verdicts:
        goal = 1.5 if size_h == "1 KB" else 1.25
        print("%s round trip p95: ckptd / in-process sqlite3 = %.2fx -> %s (target <= %.2gx)"
              % (size_h, ratio, "meets target" if ratio <= goal else "MISSES target", goal))
    return 0


if __name__ == "__main__":
    sys.exit(main())
