#!/usr/bin/env python3
"""Saves per second under concurrency: one ckptd daemon (group commit) against in-process peers.

Three comparisons, each contender measured in the same run, alternating which goes first:

  concurrency  C asyncio tasks saving 1 KB JSON states through ONE ckptd AsyncClient (each task its
               own workflow), against C threads each with its OWN sqlite3 connection to one
               database (WAL, the same synchronous level, BEGIN IMMEDIATE + INSERT + COMMIT per
               save, busy_timeout 30 s) -- for every C in --levels. #18's target: at C=32, ckptd
               >= 3x the threads' saves/s at FULL.
  langgraph    C concurrent ``graph.ainvoke`` of a 3-node graph on distinct threads, CkptdSaver
               against AsyncSqliteSaver (aiosqlite); graphs/s. Target: >= 2x.
  processes    P processes, each with its own ckptd daemon on one database, against P processes
               each with its own sqlite3 connection; saves/s and save p95 (reported, no target).

    python3 bench_throughput.py [--binary ckptd] [--seconds 3] [--levels 1,4,16,32,64] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import operator
import os
import random
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
from typing import Annotated, Any, Dict, List, Optional, TypedDict

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))

import ckptd  # noqa: E402
from ckptd.aio import AsyncClient  # noqa: E402

WORDS = "the agent calls a tool and reads the result then plans the next step summary answer context".split()


_BASES: Dict[int, Dict[str, Any]] = {}


def state_of(rng: random.Random, i: int, size: int = 1024) -> Dict[str, Any]:
    """A ~1 KB checkpoint-like state, different at every step (a new step number and one message
    changed), built cheaply so that making it costs the benchmark next to nothing."""
    base = _BASES.get(size)
    if base is None:
        msgs: List[Dict[str, str]] = []
        base = {"step": 0, "messages": msgs}
        while len(json.dumps(base)) < size - 60:
            msgs.append({"role": "user", "content": " ".join(rng.choice(WORDS) for _ in range(8))})
        _BASES[size] = base
    msgs = list(base["messages"])
    msgs[i % len(msgs)] = {"role": "assistant", "content": "step %d: %08x" % (i, rng.getrandbits(32))}
    return {"step": i, "messages": msgs}


def pct(xs: List[float], p: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(p * (len(s) - 1) + 0.5))]


def sqlite_con(path: str, sync: str) -> sqlite3.Connection:
    con = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30.0)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=%s" % sync)
    con.execute("CREATE TABLE IF NOT EXISTS checkpoints (id TEXT PRIMARY KEY, workflow TEXT NOT NULL, "
                "seq INTEGER NOT NULL, state BLOB)")
    return con


def sqlite_save(con: sqlite3.Connection, wf: str, seq: int, state: Any) -> None:
    data = json.dumps(state, separators=(",", ":")).encode()
    con.execute("BEGIN IMMEDIATE")
    try:
        con.execute("INSERT INTO checkpoints (id, workflow, seq, state) VALUES (?, ?, ?, ?)",
                    ("%s-%d" % (wf, seq), wf, seq, data))
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


# ---------------------------------------------------------------------------------------------
# concurrency: one AsyncClient vs threads with their own connections

async def ckptd_level(client: AsyncClient, c: int, seconds: float, tag: str) -> Dict[str, Any]:
    lat: List[float] = []
    stop = time.perf_counter() + seconds

    async def worker(k: int) -> None:
        rng = random.Random(k)
        i = 0
        wf = "%s-%d" % (tag, k)
        while time.perf_counter() < stop:
            st = state_of(rng, i)
            t0 = time.perf_counter()
            await client.save(wf, st, step=i)
            lat.append(time.perf_counter() - t0)
            i += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(k) for k in range(c)))
    dt = time.perf_counter() - t0
    return {"saves": len(lat), "seconds": dt, "per_s": len(lat) / dt, "p50_ms": pct(lat, .5) * 1e3, "p95_ms": pct(lat, .95) * 1e3}


def sqlite_level(path: str, sync: str, c: int, seconds: float, tag: str) -> Dict[str, Any]:
    lat: List[float] = []
    lock = threading.Lock()
    cons = [sqlite_con(path, sync) for _ in range(c)]
    stop = time.perf_counter() + seconds
    barrier = threading.Barrier(c)

    def worker(k: int) -> None:
        rng = random.Random(k)
        mine: List[float] = []
        wf = "%s-%d" % (tag, k)
        barrier.wait()
        i = 0
        while time.perf_counter() < stop:
            st = state_of(rng, i)
            t0 = time.perf_counter()
            sqlite_save(cons[k], wf, i, st)
            mine.append(time.perf_counter() - t0)
            i += 1
        with lock:
            lat.extend(mine)

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(c)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    dt = time.perf_counter() - t0
    for con in cons:
        con.close()
    return {"saves": len(lat), "seconds": dt, "per_s": len(lat) / dt, "p50_ms": pct(lat, .5) * 1e3, "p95_ms": pct(lat, .95) * 1e3}


async def concurrency(args: argparse.Namespace, work: str) -> List[Dict[str, Any]]:
    out = []
    async with AsyncClient(db=os.path.join(work, "tp-ckptd.db"), binary=args.binary,
                           args=["--durability", args.durability, "--keep-last", "0", "--log-level", "warn"]) as client:
        base = os.path.join(work, "tp-sqlite.db")
        sqlite_con(base, args.durability.upper()).close()
        for n, c in enumerate(args.levels):
            row: Dict[str, Any] = {"concurrency": c}
            order = ("ckptd", "sqlite") if n % 2 == 0 else ("sqlite", "ckptd")
            for who in order:
                if who == "ckptd":
                    row["ckptd"] = await ckptd_level(client, c, args.seconds, "c%d" % c)
                else:
                    row["sqlite"] = await asyncio.to_thread(sqlite_level, base, args.durability.upper(), c, args.seconds, "c%d" % c)
            row["ratio"] = row["ckptd"]["per_s"] / row["sqlite"]["per_s"]
            print("  %3d callers: ckptd %7.0f saves/s (p95 %6.2f ms) | sqlite3 threads %7.0f saves/s (p95 %6.2f ms) | %.2fx"
                  % (c, row["ckptd"]["per_s"], row["ckptd"]["p95_ms"], row["sqlite"]["per_s"], row["sqlite"]["p95_ms"],
                     row["ratio"]), flush=True)
            out.append(row)
    return out


# ---------------------------------------------------------------------------------------------
# langgraph: concurrent ainvoke of a 3-node graph

class S(TypedDict):
    messages: Annotated[list, operator.add]
    step: int


def build_graph(saver: Any) -> Any:
    from langgraph.graph import END, START, StateGraph

    def node(name: str) -> Any:
        def f(s: S) -> Dict[str, Any]:
            return {"messages": [{"node": name, "text": " ".join(WORDS[: 6 + s["step"] % 6])}], "step": s["step"] + 1}
        return f

    g = StateGraph(S)
    for n in ("plan", "act", "reflect"):
        g.add_node(n, node(n))
    g.add_edge(START, "plan")
    g.add_edge("plan", "act")
    g.add_edge("act", "reflect")
    g.add_edge("reflect", END)
    return g.compile(checkpointer=saver)


async def lg_rounds(saver: Any, c: int, seconds: float, tag: str) -> Dict[str, Any]:
    graph = build_graph(saver)
    done = 0
    rnd = 0
    lat: List[float] = []
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds or rnd == 0:
        async def one(k: int) -> None:
            t = time.perf_counter()
            out = await graph.ainvoke({"messages": [{"node": "input", "text": "go"}], "step": 0},
                                      {"configurable": {"thread_id": "%s-%d-%d" % (tag, rnd, k)}})
            assert out["step"] == 3
            lat.append(time.perf_counter() - t)
        await asyncio.gather(*(one(k) for k in range(c)))
        done += c
        rnd += 1
    dt = time.perf_counter() - t0
    return {"graphs": done, "seconds": dt, "per_s": done / dt, "p95_ms": pct(lat, .95) * 1e3}


async def langgraph(args: argparse.Namespace, work: str) -> Optional[Dict[str, Any]]:
    try:
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    except ImportError as e:
        if os.environ.get("CKPTD_REQUIRE_LANGGRAPH"):
            raise
        print("  langgraph: not installed (%s)" % e)
        return None
    from ckptd.langgraph import CkptdSaver

    c = args.lg_concurrency
    row: Dict[str, Any] = {"concurrency": c}
    ck = CkptdSaver(db=os.path.join(work, "lg-ckptd.db"), binary=args.binary,
                    args=["--durability", args.durability, "--log-level", "warn"])
    try:
        async with AsyncSqliteSaver.from_conn_string(os.path.join(work, "lg-sqlite.db")) as sq:
            await sq.setup()
            await sq.conn.execute("PRAGMA synchronous=%s" % args.durability.upper())
            for n in range(2):  # two rounds each, alternating who goes first
                for who in (("ckptd", "sqlite") if n == 0 else ("sqlite", "ckptd")):
                    r = await lg_rounds(ck if who == "ckptd" else sq, c, args.seconds / 2, "%s%d" % (who, n))
                    acc = row.setdefault(who, {"graphs": 0, "seconds": 0.0, "p95s": []})
                    acc["graphs"] += r["graphs"]
                    acc["seconds"] += r["seconds"]
                    acc["p95s"].append(r["p95_ms"])
    finally:
        ck.close()
    for who in ("ckptd", "sqlite"):
        row[who]["per_s"] = row[who]["graphs"] / row[who]["seconds"]
    row["ratio"] = row["ckptd"]["per_s"] / row["sqlite"]["per_s"]
    print("  %d concurrent ainvoke: CkptdSaver %.0f graphs/s | AsyncSqliteSaver %.0f graphs/s | %.2fx"
          % (c, row["ckptd"]["per_s"], row["sqlite"]["per_s"], row["ratio"]), flush=True)
    return row


# ---------------------------------------------------------------------------------------------
# processes: each its own ckptd on one database, against each its own sqlite3 connection

def proc_main(kind: str, path: str, binary: str, durability: str, k: int, start: float, seconds: float, q: Any) -> None:
    rng = random.Random(k)
    lat: List[float] = []
    wf = "p%d" % k
    if kind == "ckptd":
        cl = ckptd.Client(db=path, binary=binary, args=["--durability", durability, "--keep-last", "0", "--log-level", "warn"])
        save = lambda i, st: cl.save(wf, st, step=i)  # noqa: E731
    else:
        con = sqlite_con(path, durability.upper())
        save = lambda i, st: sqlite_save(con, wf, i, st)  # noqa: E731
    while time.time() < start:
        time.sleep(0.001)
    stop = time.perf_counter() + seconds
    i = 0
    while time.perf_counter() < stop:
        st = state_of(rng, i)
        t0 = time.perf_counter()
        save(i, st)
        lat.append(time.perf_counter() - t0)
        i += 1
    if kind == "ckptd":
        cl.close()
    else:
        con.close()
    q.put(lat)


def processes(args: argparse.Namespace, work: str) -> Dict[str, Any]:
    ctx = mp.get_context("spawn")
    row: Dict[str, Any] = {"processes": args.procs}
    for who in ("ckptd", "sqlite"):
        path = os.path.join(work, "mp-%s.db" % who)
        if who == "sqlite":
            sqlite_con(path, args.durability.upper()).close()
        else:
            ckptd.Client(db=path, binary=args.binary, args=["--log-level", "warn"]).close()
        q = ctx.Queue()
        start = time.time() + 1.5 + 0.1 * args.procs  # every process (and daemon) up before the clock starts
        ps = [ctx.Process(target=proc_main, args=(who, path, args.binary, args.durability, k, start, args.seconds, q))
              for k in range(args.procs)]
        for p in ps:
            p.start()
        lat: List[float] = []
        for _ in ps:
            lat.extend(q.get(timeout=120))
        for p in ps:
            p.join(timeout=30)
        row[who] = {"saves": len(lat), "per_s": len(lat) / args.seconds, "p50_ms": pct(lat, .5) * 1e3,
                    "p95_ms": pct(lat, .95) * 1e3}
    row["ratio"] = row["ckptd"]["per_s"] / row["sqlite"]["per_s"]
    print("  %d processes: ckptd each %.0f saves/s (p95 %.2f ms) | sqlite3 each %.0f saves/s (p95 %.2f ms) | %.2fx"
          % (args.procs, row["ckptd"]["per_s"], row["ckptd"]["p95_ms"], row["sqlite"]["per_s"], row["sqlite"]["p95_ms"],
             row["ratio"]), flush=True)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", default=None)
    ap.add_argument("--seconds", type=float, default=3.0, help="measured seconds per contender and level")
    ap.add_argument("--levels", default="1,4,16,32,64", help="concurrency levels (callers)")
    ap.add_argument("--lg-concurrency", type=int, default=32)
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--durability", choices=("full", "normal"), default="full")
    ap.add_argument("--parts", default="concurrency,langgraph,processes")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    args.levels = [int(x) for x in args.levels.split(",") if x]
    args.binary = ckptd.find_binary(args.binary)
    work = tempfile.mkdtemp(prefix="bench-tp-", dir=args.dir)
    parts = set(args.parts.split(","))
    res: Dict[str, Any] = {"durability": args.durability, "seconds": args.seconds}
    try:
        if "concurrency" in parts:
            print("saves/s, 1 KB JSON states, durability %s:" % args.durability, flush=True)
            res["concurrency"] = asyncio.run(concurrency(args, work))
        if "langgraph" in parts:
            res["langgraph"] = asyncio.run(langgraph(args, work))
        if "processes" in parts:
            res["processes"] = processes(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
