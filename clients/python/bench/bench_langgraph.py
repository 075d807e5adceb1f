#!/usr/bin/env python3
"""CkptdSaver vs LangGraph's SqliteSaver, side by side in one process, same workload.

The workload is what LangGraph's Pregel loop hands a checkpointer for one thread of N super-steps
(default 1000): every step appends one message to a growing ``messages`` list (about 100 KB
serialized by the end), bumps a ``step`` counter, flips a small ``status`` every 10 steps, and
carries a constant ``config`` dict and a trigger channel. Each step:

* ``put`` the new checkpoint (``new_versions``: the channels that changed this step) and one
  ``put_writes`` for the step's task;
* ``get_tuple`` of the thread's latest checkpoint;
* ``list(thread, limit=10)`` with ``checkpoint_ns: ""`` in the config (what Pregel's
  ``get_state_history`` passes), and every 10th step also ``list`` with only the ``thread_id``
  (every namespace of the thread; a direct ``saver.list(config)`` call often looks like this, and
  SqliteSaver then sorts the whole thread in a temporary b-tree) as ``list10_all_ns``.

Both savers run at their defaults: ckptd at ``--durability full`` (SQLite ``synchronous=FULL``,
WAL, one fsync per commit), SqliteSaver on a plain ``sqlite3.connect`` (it switches to WAL;
``synchronous`` stays SQLite's default, FULL; the script prints the PRAGMAs it finds). The two are
interleaved step by step, alternating which goes first, so background load hits both alike.

    python3 bench/bench_langgraph.py [--steps 1000] [--messages dict|langchain] [--json out.json]

Messages are plain dicts by default; ``--messages langchain`` uses LangChain message objects,
whose (de)serialization by LangGraph's serde then dominates both savers' times.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sqlite3
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))

from langgraph.checkpoint.base import empty_checkpoint  # noqa: E402
from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: E402

from ckptd.langgraph import CkptdSaver  # noqa: E402

WORDS = (
    "the agent tool call result user assistant message plan step search query document summary answer "
    "context memory retrieve function output input error retry node graph state value channel task model"
).split()
OPS = ("put", "get_tuple", "list10", "list10_all_ns")
# #18's targets, p95 ratio ckptd / SqliteSaver at the same durability.
TARGETS = {"put": 1.3, "get_tuple": 1.2, "list10": 1.0}


def pct(xs: List[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(round(p * len(s) + 0.5)) - 1))]


def file_size(path: str) -> int:
    return sum(os.path.getsize(path + ext) for ext in ("", "-wal", "-shm") if os.path.exists(path + ext))


class Thread:
    """One thread's evolving checkpoint, as the Pregel loop would build it, for one saver."""

    def __init__(self, saver: Any, thread_id: str, kind: str) -> None:
        self.saver = saver
        self.kind = kind
        self.config: Dict[str, Any] = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        self.cp = empty_checkpoint()
        self.cp["channel_values"] = {}
        self.cp["channel_versions"] = {}
        self.versions: Dict[str, Any] = {}

    def bump(self, channel: str) -> Any:
        v = self.saver.get_next_version(self.versions.get(channel), None)
        self.versions[channel] = v
        return v

    def step(self, i: int, message: Any) -> Tuple[Dict[str, Any], Dict[str, Any], Dict[str, Any]]:
        values = dict(self.cp["channel_values"])
        changed = ["messages", "step", "branch:to:agent"]
        values["messages"] = list(values.get("messages", [])) + [message]
        values["step"] = i
        values["branch:to:agent"] = None
        if i % 10 == 0:
            values["status"] = "phase-%d" % (i // 10)
            changed.append("status")
        if i == 0:
            values["config"] = {"model": "gpt-x", "temperature": 0.2, "tools": ["search", "calc"], "max_steps": 1000}
            changed.append("config")
        new_versions = {ch: self.bump(ch) for ch in changed}
        cp = empty_checkpoint()
        cp["channel_values"] = values
        cp["channel_versions"] = dict(self.versions)
        cp["versions_seen"] = {"agent": {"branch:to:agent": self.versions["branch:to:agent"]}}
        cp["updated_channels"] = changed
        metadata = {"source": "loop", "step": i, "parents": {}}
        self.cp = cp
        return cp, metadata, new_versions


def make_message(rng: random.Random, i: int, kind: str) -> Any:
    text = " ".join(rng.choice(WORDS) for _ in range(10 + rng.randrange(8)))
    if kind == "langchain":
        from langchain_core.messages import AIMessage, HumanMessage

        cls = HumanMessage if i % 2 == 0 else AIMessage
        return cls(content=text, id="m-%06d" % i)
    return {"role": "user" if i % 2 == 0 else "assistant", "content": text, "id": "m-%06d" % i}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--messages", choices=("dict", "langchain"), default="dict")
    ap.add_argument("--binary", default=None, help="ckptd executable (default $CKPTD_PATH / PATH)")
    ap.add_argument("--dir", default=None, help="where the two databases go (default: a temp dir)")
    ap.add_argument("--json", default=None, help="also write the results (with every sample, in ms) as JSON here")
    ap.add_argument("--durability", choices=("full", "normal"), default="full",
                    help="ckptd --durability, and SqliteSaver's synchronous level to match (FULL / NORMAL)")
    args = ap.parse_args()

    work = args.dir or tempfile.mkdtemp(prefix="bench-lg-")
    os.makedirs(work, exist_ok=True)
    ck_path, sq_path = os.path.join(work, "ckptd.db"), os.path.join(work, "sqlite.db")
    for p in (ck_path, sq_path):
        for ext in ("", "-wal", "-shm"):
            if os.path.exists(p + ext):
                os.remove(p + ext)

    conn = sqlite3.connect(sq_path, check_same_thread=False)
    savers: Dict[str, Any] = {"ckptd": CkptdSaver(db=ck_path, binary=args.binary, args=["--durability", args.durability]),
                              "sqlite": SqliteSaver(conn)}
    savers["sqlite"].setup()
    conn.execute("PRAGMA synchronous=%s" % args.durability.upper())
    pragmas = {p: conn.execute("PRAGMA %s" % p).fetchone()[0] for p in ("journal_mode", "synchronous")}
    info = savers["ckptd"].client.server_info
    print("ckptd %s: durability=%s (synchronous=%s, WAL)" % (
        info.get("serverVersion"), info.get("capabilities", {}).get("durability"),
        "FULL" if info.get("capabilities", {}).get("durability") == "full" else "NORMAL"))
    print("SqliteSaver: journal_mode=%s synchronous=%s (%s)" % (
        pragmas["journal_mode"], pragmas["synchronous"], {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}.get(pragmas["synchronous"])))

    threads = {name: Thread(s, "bench-thread", args.messages) for name, s in savers.items()}
    times: Dict[str, Dict[str, List[float]]] = {name: {op: [] for op in OPS + ("put_writes",)} for name in savers}
    rng = random.Random(42)
    t0 = time.time()
    last_bytes = 0
    growth: List[Tuple[int, int, int]] = []  # (steps done, ckptd bytes, sqlite bytes) on disk
    every = max(1, args.steps // 20)
    for i in range(args.steps):
        msg = make_message(rng, i, args.messages)
        order = ["ckptd", "sqlite"] if i % 2 == 0 else ["sqlite", "ckptd"]
        for name in order:
            th, s, tm = threads[name], savers[name], times[name]
            cp, md, nv = th.step(i, msg)
            t = time.perf_counter()
            th.config = s.put(th.config, cp, md, nv)
            tm["put"].append(time.perf_counter() - t)
            t = time.perf_counter()
            s.put_writes(th.config, [("messages", [msg]), ("branch:to:agent", None)], "task-%d" % i, "~pull, agent")
            tm["put_writes"].append(time.perf_counter() - t)
            latest = {"configurable": {"thread_id": "bench-thread", "checkpoint_ns": ""}}
            t = time.perf_counter()
            tup = s.get_tuple(latest)
            tm["get_tuple"].append(time.perf_counter() - t)
            t = time.perf_counter()
            listed = list(s.list(latest, limit=10))
            tm["list10"].append(time.perf_counter() - t)
            if i % 10 == 0:
                t = time.perf_counter()
                every_ns = list(s.list({"configurable": {"thread_id": "bench-thread"}}, limit=10))
                tm["list10_all_ns"].append(time.perf_counter() - t)
                assert [x.checkpoint["id"] for x in every_ns] == [x.checkpoint["id"] for x in listed], (name, i)
            assert tup is not None and tup.checkpoint["channel_values"]["step"] == i, (name, i)
            assert len(listed) == min(10, i + 1) and listed[0].checkpoint["id"] == cp["id"], (name, i)
            assert len(tup.checkpoint["channel_values"]["messages"]) == i + 1
        if (i + 1) % every == 0:
            growth.append((i + 1, file_size(ck_path), file_size(sq_path)))
        if i == args.steps - 1:
            last_bytes = len(savers["ckptd"].serde.dumps_typed(tup.checkpoint["channel_values"]["messages"])[1])
        if (i + 1) % max(1, args.steps // 10) == 0:
            print("  step %d/%d (%.0fs)" % (i + 1, args.steps, time.time() - t0), flush=True)

    # both savers agree on the final state
    a = savers["ckptd"].get_tuple({"configurable": {"thread_id": "bench-thread", "checkpoint_ns": ""}})
    b = savers["sqlite"].get_tuple({"configurable": {"thread_id": "bench-thread", "checkpoint_ns": ""}})
    assert a.checkpoint["channel_values"] == b.checkpoint["channel_values"]
    assert a.pending_writes == b.pending_writes

    server = savers["ckptd"].client.stats()["latency"]  # the daemon's side of each call (last 1024)
    sizes_open = {"ckptd": file_size(ck_path), "sqlite": file_size(sq_path)}
    savers["ckptd"].close()
    savers["sqlite"].conn.close()
    sizes = {"ckptd": file_size(ck_path), "sqlite": file_size(sq_path)}

    def row(label: str, f: Callable[[str], float], target: Any, fmt: str = "%9.3f") -> str:
        ck, sq = f("ckptd"), f("sqlite")
        ratio = ck / sq if sq else float("nan")
        mark = ""
        if target is not None:
            mark = "  ok (<= %.1fx)" % target if ratio <= target else "  MISSED (target <= %.1fx)" % target
        return "%-22s %s %s %8.2fx%s" % (label, fmt % ck, fmt % sq, ratio, mark)

    print()
    print("%d super-steps, messages=%s, final message list %.1f KB serialized; workdir %s" % (
        args.steps, args.messages, last_bytes / 1024, work))
    print("%-22s %9s %9s %9s" % ("latency (ms)", "ckptd", "sqlite", "ratio"))
    results: Dict[str, Any] = {"steps": args.steps, "messages": args.messages, "sqlite_pragmas": pragmas,
                               "ckptd_durability": info.get("capabilities", {}).get("durability"), "ops": {}, "db_bytes": sizes,
                               "growth": growth, "samples_ms": {n: {op: [x * 1e3 for x in xs] for op, xs in times[n].items()}
                                                               for n in savers}}
    for op in OPS + ("put_writes",):
        for p, pname in ((0.5, "p50"), (0.95, "p95"), (0.99, "p99")):
            target = TARGETS.get(op) if pname == "p95" else None
            print(row("%s %s" % (op, pname), lambda n: pct(times[n][op], p) * 1e3, target))
            results["ops"].setdefault(op, {})[pname] = {n: pct(times[n][op], p) * 1e3 for n in savers}
    print(row("DB size (MiB)", lambda n: sizes[n] / 2**20, None, "%9.2f"))
    print(row("DB size open (MiB)", lambda n: sizes_open[n] / 2**20, None, "%9.2f"))
    print()
    print("ckptd's share: time inside the daemon (stats); the rest is the client, serialisation, the pipe")
    methods = {"put": "lg/put", "put_writes": "lg/putWrites", "get_tuple": "lg/get", "list10": "lg/list"}  # both lists
    for op, m in methods.items():
        if m in server:
            l = server[m]
            print("%-22s p50 %.3f  p95 %.3f  p99 %.3f" % (m, l["p50Ms"], l["p95Ms"], l["p99Ms"]))
            results.setdefault("daemon", {})[m] = l
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    if not args.dir:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
