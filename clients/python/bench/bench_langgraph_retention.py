#!/usr/bin/env python3
"""LangGraph retention, measured: what it costs a put, and what a sweep deleting a large idle
thread does to the puts of the other threads (issue #24: "a thread idle past idle_ttl_seconds is
gone after the next sweep while graphs on other threads keep their put p99").

1. put overhead: chat-like puts (a 1 KB message appended to a DeltaChannel-like write history: a
   new 1 KB value per put, 3 channels) with ``retention={"keep_last": 20}`` vs without, on two
   daemons, interleaved put by put so that background load hits both alike.
2. sweep: one daemon (``--sweep-interval 200ms``); a thread of ``--idle-checkpoints`` checkpoints
   (1 KB value and a write each) stored, then idle with ``idle_ttl_seconds``; ``--busy`` threads
   put in a loop through the same daemon. The put latencies of the busy threads before the sweep
   starts deleting and while it deletes (in bites) are compared; the sweep's start and end are
   seen by polling the idle thread's oldest and newest checkpoints.

    python3 bench/bench_langgraph_retention.py [--puts 2000] [--idle-checkpoints 20000] [--busy 4] [--json out.json]

Needs CKPTD_PATH (or ckptd on PATH) and langgraph-checkpoint.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))

from langgraph.checkpoint.base import empty_checkpoint  # noqa: E402

from ckptd.langgraph import CkptdSaver  # noqa: E402


def pct(xs: List[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))] if s else float("nan")


def cfg(thread: str, cid: Any = None) -> Dict[str, Any]:
    c: Dict[str, Any] = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    if cid:
        c["configurable"]["checkpoint_id"] = cid
    return c


def chat_put(saver: Any, parent: Dict[str, Any], i: int) -> Dict[str, Any]:
    cp = empty_checkpoint()
    v = "%032d.0" % (i + 1)
    cp["channel_values"] = {"messages": os.urandom(512).hex(), "turn": i, "status": "ok"}
    cp["channel_versions"] = {"messages": v, "turn": v, "status": "%032d.0" % 1}
    new = {"messages": v, "turn": v} if i else {"messages": v, "turn": v, "status": "%032d.0" % 1}
    return saver.put(parent, cp, {"source": "loop", "step": i}, new)


def bench_put_overhead(binary: str, tmp: str, puts: int) -> Dict[str, Any]:
    savers = {
        "no retention": CkptdSaver(db=os.path.join(tmp, "plain.db"), binary=binary),
        "keep_last=20": CkptdSaver(db=os.path.join(tmp, "kept.db"), binary=binary, retention={"keep_last": 20}),
    }
    lat: Dict[str, List[float]] = {k: [] for k in savers}
    parents = {k: cfg("chat") for k in savers}
    order = list(savers)
    for i in range(puts):
        for k in order if i % 2 == 0 else reversed(order):
            t0 = time.perf_counter()
            parents[k] = chat_put(savers[k], parents[k], i)
            lat[k].append(time.perf_counter() - t0)
    out = {}
    for k, s in savers.items():
        kept = len(list(s.list(cfg("chat"))))
        out[k] = {"p50_ms": pct(lat[k], 50) * 1e3, "p99_ms": pct(lat[k], 99) * 1e3, "kept": kept}
        s.close()
    out["ratio_p50"] = out["keep_last=20"]["p50_ms"] / out["no retention"]["p50_ms"]
    out["ratio_p99"] = out["keep_last=20"]["p99_ms"] / out["no retention"]["p99_ms"]
    return out


def bench_sweep(binary: str, tmp: str, idle_n: int, busy: int, ttl: int) -> Dict[str, Any]:
    db = os.path.join(tmp, "sweep.db")
    args = ["--sweep-interval", "200ms", "--durability", "normal"]
    with CkptdSaver(db=db, binary=binary, args=args, retention={"idle_ttl_seconds": ttl}) as filler:
        parent = cfg("idle")
        first = last = None
        for i in range(idle_n):
            parent = chat_put(filler, parent, i)
            filler.put_writes(parent, [("messages", "w")], "task")
            first = first or parent["configurable"]["checkpoint_id"]
            last = parent["configurable"]["checkpoint_id"]
    idle_since = time.time()
    saver = CkptdSaver(db=db, binary=binary, args=args, retention={"idle_ttl_seconds": 0})
    stop = threading.Event()
    lat: List[tuple] = []
    lock = threading.Lock()

    def worker(k: int) -> None:
        p = cfg("busy-%d" % k)
        i = 0
        while not stop.is_set():
            t0 = time.perf_counter()
            p = chat_put(saver, p, i)
            t1 = time.perf_counter()
            with lock:
                lat.append((time.time(), t1 - t0))
            i += 1

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(busy)]
    for t in threads:
        t.start()
    start = end = None
    deadline = idle_since + ttl + 120
    while time.time() < deadline:
        if start is None and saver.get_tuple(cfg("idle", first)) is None:
            start = time.time()
        if saver.get_tuple(cfg("idle", last)) is None:
            end = time.time()
            break
        time.sleep(0.005)
    time.sleep(0.5)
    stop.set()
    for t in threads:
        t.join()
    saver.close()
    if start is None or end is None:
        raise SystemExit("the idle thread was not deleted within 2 minutes")
    before = [l for (t, l) in lat if t < start]
    during = [l for (t, l) in lat if start <= t <= end]
    return {
        "idle_checkpoints": idle_n,
        "busy_threads": busy,
        "sweep_seconds": end - start,
        "before": {"puts": len(before), "p50_ms": pct(before, 50) * 1e3, "p99_ms": pct(before, 99) * 1e3},
        "during": {"puts": len(during), "p50_ms": pct(during, 50) * 1e3, "p99_ms": pct(during, 99) * 1e3},
        "ratio_p99": pct(during, 99) / pct(before, 99),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--puts", type=int, default=2000)
    ap.add_argument("--idle-checkpoints", type=int, default=20000)
    ap.add_argument("--busy", type=int, default=4)
    ap.add_argument("--ttl", type=int, default=8, help="idle TTL (s): the busy threads run this long before the sweep")
    ap.add_argument("--json", help="write the results here too")
    a = ap.parse_args()
    binary = os.environ.get("CKPTD_PATH") or shutil.which("ckptd") or "ckptd"
    tmp = tempfile.mkdtemp(prefix="ckptd-bench-retention-")
    try:
        load = os.getloadavg()[0]
        over = bench_put_overhead(binary, tmp, a.puts)
        sweep = bench_sweep(binary, tmp, a.idle_checkpoints, a.busy, a.ttl)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("load average at start: %.2f" % load)
    print("\nput overhead (%d interleaved puts each)" % a.puts)
    print("| saver | p50 ms | p99 ms | checkpoints kept |\n|---|---|---|---|")
    for k in ("no retention", "keep_last=20"):
        r = over[k]
        print("| %s | %.2f | %.2f | %d |" % (k, r["p50_ms"], r["p99_ms"], r["kept"]))
    print("| ratio | %.2fx | %.2fx | |" % (over["ratio_p50"], over["ratio_p99"]))
    print("\nsweep of an idle thread of %d checkpoints, %d busy threads putting" % (sweep["idle_checkpoints"], sweep["busy_threads"]))
    print("| busy puts | n | p50 ms | p99 ms |\n|---|---|---|---|")
    for k in ("before", "during"):
        r = sweep[k]
        print("| %s the sweep | %d | %.2f | %.2f |" % (k, r["puts"], r["p50_ms"], r["p99_ms"]))
    print("| p99 during / before | | | %.2fx |" % sweep["ratio_p99"])
    print("sweep took %.2f s (in bites)" % sweep["sweep_seconds"])
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"load": load, "put_overhead": over, "sweep": sweep}, f, indent=2)


if __name__ == "__main__":
    main()
