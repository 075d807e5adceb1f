#!/usr/bin/env python3
"""CkptdSaver on ckptd's PostgreSQL backend vs LangGraph's PostgresSaver
(``langgraph-checkpoint-postgres``), on the same PostgreSQL server and database, same workload:
the super-steps of bench_langgraph.py (put + put_writes, get_tuple, list of 10), interleaved step
by step. Reports p50/p95 per operation and each saver's size in the database after the run
(ckptd: its schema's tables; PostgresSaver: its four tables), as ratios of one run.

    go run ./internal/pgtest/cmd/pgcluster -env /tmp/pg.env &   # or any server you own
    . /tmp/pg.env; python3 bench/bench_langgraph_postgres.py --url "$CKPTD_TEST_PG_URL" [--steps 300]

Bench-only dependencies: ``pip install langgraph-checkpoint-postgres 'psycopg[binary]'``.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
import uuid
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))
sys.path.insert(0, HERE)

import psycopg  # noqa: E402
from langgraph.checkpoint.postgres import PostgresSaver  # noqa: E402

from bench_langgraph import OPS, Thread, make_message, pct  # noqa: E402
from ckptd.langgraph import CkptdSaver  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default=os.environ.get("CKPTD_TEST_PG_URL", ""), help="postgres:// URL (default $CKPTD_TEST_PG_URL)")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--binary", default=None)
    args = ap.parse_args()
    if not args.url:
        ap.error("no --url and no $CKPTD_TEST_PG_URL")
    schema = "bench_%s" % uuid.uuid4().hex[:8]
    sep = "&" if "?" in args.url else "?"
    ck = CkptdSaver(db="%s%sckptd_schema=%s" % (args.url, sep, schema), binary=args.binary)
    pg_cm = PostgresSaver.from_conn_string(args.url)
    pg = pg_cm.__enter__()
    pg.setup()
    with psycopg.connect(args.url, autocommit=True) as c:  # a fresh PostgresSaver: its tables emptied
        for t in ("checkpoint_writes", "checkpoint_blobs", "checkpoints"):
            c.execute("TRUNCATE %s" % t)
    savers: Dict[str, Any] = {"ckptd": ck, "postgres": pg}
    threads = {n: Thread(s, "bench-thread", "dict") for n, s in savers.items()}
    times: Dict[str, Dict[str, List[float]]] = {n: {op: [] for op in OPS + ("put_writes",)} for n in savers}
    rng = random.Random(42)
    t0 = time.time()
    for i in range(args.steps):
        msg = make_message(rng, i, "dict")
        for name in (["ckptd", "postgres"] if i % 2 == 0 else ["postgres", "ckptd"]):
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
                list(s.list({"configurable": {"thread_id": "bench-thread"}}, limit=10))
                tm["list10_all_ns"].append(time.perf_counter() - t)
            assert tup is not None and tup.checkpoint["channel_values"]["step"] == i, (name, i)
            assert len(listed) == min(10, i + 1), (name, i)
        if (i + 1) % max(1, args.steps // 5) == 0:
            print("  step %d/%d (%.0fs)" % (i + 1, args.steps, time.time() - t0), flush=True)
    a = ck.get_tuple({"configurable": {"thread_id": "bench-thread", "checkpoint_ns": ""}})
    b = pg.get_tuple({"configurable": {"thread_id": "bench-thread", "checkpoint_ns": ""}})
    assert a.checkpoint["channel_values"] == b.checkpoint["channel_values"]
    ck.close()
    pg_cm.__exit__(None, None, None)
    with psycopg.connect(args.url, autocommit=True) as c:
        c.execute("VACUUM")
        size = {
            "ckptd": c.execute("""SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c
                JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r'""", (schema,)).fetchone()[0],
            "postgres": c.execute("""SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c
                JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relkind = 'r'
                AND c.relname IN ('checkpoints', 'checkpoint_blobs', 'checkpoint_writes', 'checkpoint_migrations')""").fetchone()[0],
        }
        c.execute("DROP SCHEMA %s CASCADE" % schema)
    print()
    print("%d super-steps; ms; ratio = CkptdSaver (ckptd on PostgreSQL) / PostgresSaver" % args.steps)
    print("%-18s %10s %13s %8s" % ("", "ckptd-pg", "PostgresSaver", "ratio"))
    for op in OPS + ("put_writes",):
        for p in (0.5, 0.95):
            x, y = pct(times["ckptd"][op], p) * 1e3, pct(times["postgres"][op], p) * 1e3
            print("%-18s %10.3f %13.3f %8.2fx" % ("%s p%d" % (op, p * 100), x, y, x / y if y else float("nan")))
    print("%-18s %10.2f %13.2f %8.2fx" % ("DB size (MiB)", size["ckptd"] / 2**20, size["postgres"] / 2**20,
                                          size["ckptd"] / size["postgres"] if size["postgres"] else float("nan")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
