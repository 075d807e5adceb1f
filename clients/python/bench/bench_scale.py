#!/usr/bin/env python3
"""Point reads at scale, startup and memory: a large database against a small one, same run.

Two pairs of databases are filled by ``bench/fill`` (Go, the SQLite backend in process, group
commits): ``small`` with --small-workflows workflows (and as many LangGraph threads) of --per
checkpoints each (1,000 checkpoints by default), and ``large`` with --workflows of them
(1,000,000 by default: 10,000 x 100). The workflows' checkpoints and the threads' are in separate
files, filled in parallel. Then, one daemon per file, interleaved request by request between small
and large:

  load_latest   client.load(workflow_id=W) of a random workflow
  list10        client.list(W, limit=10)
  get_tuple     CkptdSaver.get_tuple of a random thread's latest checkpoint
  lg_list10     CkptdSaver.list(thread, limit=10)

Each op's p95 at large over its p95 at small is the figure (#18: <= 1.5x). Then startup: a client
spawning ckptd on the large workflows file until ``initialize`` is answered, --starts times (p95,
#18: <= 25 ms); and the daemons' resident memory at rest after the run (VmRSS; #18: <= 64 MB).

    python3 bench_scale.py --binary ckptd --fill fill [--workflows 10000] [--per 100] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))

import ckptd  # noqa: E402


def pct(xs: List[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(p * (len(s) - 1) + 0.5))] if s else float("nan")


def rss_kb(pid: int) -> int:
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def cpu_seconds(pid: int) -> float:
    with open("/proc/%d/stat" % pid) as f:
        x = f.read().rsplit(")", 1)[1].split()
    return (int(x[11]) + int(x[12])) / os.sysconf("SC_CLK_TCK")


def settle(pids: List[int], limit: float = 300.0) -> float:
    """Waits until the daemons stop using CPU (the background quick_check a database over 1 MiB
    gets at start reads the whole file), so that reads are measured at steady state; returns
    the seconds waited."""
    t0 = time.time()
    last = sum(cpu_seconds(p) for p in pids)
    quiet = 0
    while time.time() - t0 < limit and quiet < 3:
        time.sleep(0.25)
        now = sum(cpu_seconds(p) for p in pids)
        quiet = quiet + 1 if now - last < 0.02 else 0
        last = now
    return time.time() - t0


def size_of(path: str) -> int:
    return sum(os.path.getsize(path + e) for e in ("", "-wal", "-shm") if os.path.exists(path + e))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", default=None)
    ap.add_argument("--fill", required=True, help="the bench/fill executable")
    ap.add_argument("--workflows", type=int, default=10000, help="workflows (and threads) of the large databases")
    ap.add_argument("--small-workflows", type=int, default=10)
    ap.add_argument("--per", type=int, default=100, help="checkpoints per workflow / thread")
    ap.add_argument("--samples", type=int, default=400, help="requests per op and size")
    ap.add_argument("--starts", type=int, default=20)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--cache", default=None, help="keep the filled databases here and reuse them when they match "
                                                 "(runs in a row fill once)")
    args = ap.parse_args()
    binary = ckptd.find_binary(args.binary)
    try:
        from ckptd.langgraph import CkptdSaver
    except ImportError:
        if os.environ.get("CKPTD_REQUIRE_LANGGRAPH"):
            raise
        CkptdSaver = None  # type: ignore[assignment,misc]

    work = args.cache or tempfile.mkdtemp(prefix="bench-scale-", dir=args.dir)
    os.makedirs(work, exist_ok=True)
    res: Dict[str, Any] = {"workflows": args.workflows, "small_workflows": args.small_workflows, "per": args.per}
    try:
        sizes = {"small": args.small_workflows, "large": args.workflows}
        paths = {(sz, kind): os.path.join(work, "%s-%s.db" % (sz, kind)) for sz in sizes for kind in ("wf", "lg")}
        marker = os.path.join(work, "filled.json")
        want = {"small": args.small_workflows, "large": args.workflows, "per": args.per}
        reuse = False
        if os.path.exists(marker):
            with open(marker) as f:
                reuse = json.load(f) == want
        if not reuse:
            for path in paths.values():
                for ext in ("", "-wal", "-shm"):
                    if os.path.exists(path + ext):
                        os.remove(path + ext)
        t0 = time.time()
        procs = []
        for (sz, kind), path in ([] if reuse else paths.items()):
            n = sizes[sz]
            procs.append(subprocess.Popen([args.fill, "-db", path, "-per", str(args.per),
                                           "-workflows", str(n if kind == "wf" else 0),
                                           "-threads", str(n if kind == "lg" else 0)],
                                          stdout=subprocess.PIPE, text=True))
        for p in procs:
            out, _ = p.communicate()
            if p.returncode:
                raise SystemExit("fill failed: %s" % out)
        if not reuse:
            with open(marker, "w") as f:
                json.dump(want, f)
        res["fill_seconds"] = time.time() - t0
        res["reused_fill"] = reuse
        res["db_bytes"] = {"%s-%s" % k: size_of(p) for k, p in paths.items()}
        print("filled in %.0f s: %s" % (res["fill_seconds"], ", ".join("%s %.1f MB" % (k, v / 1e6) for k, v in res["db_bytes"].items())),
              flush=True)

        dargs = ["--log-level", "warn"]
        clients = {sz: ckptd.Client(db=paths[(sz, "wf")], binary=binary, args=dargs) for sz in sizes}
        savers = {sz: CkptdSaver(db=paths[(sz, "lg")], binary=binary, args=dargs) for sz in sizes} if CkptdSaver else {}
        pids = [c.pid for c in clients.values()] + [sv.client.pid for sv in savers.values()]
        res["settle_seconds"] = settle([p for p in pids if p])
        print("  daemons idle after %.1f s (start-up checks done)" % res["settle_seconds"], flush=True)
        rng = random.Random(7)
        ops = ["load_latest", "list10"] + (["get_tuple", "lg_list10"] if savers else [])
        lat: Dict[str, Dict[str, List[float]]] = {op: {sz: [] for sz in sizes} for op in ops}
        for i in range(args.samples + 20):
            order = ("small", "large") if i % 2 == 0 else ("large", "small")
            for sz in order:
                w = rng.randrange(sizes[sz])
                c = clients[sz]
                for op in ops:
                    t = time.perf_counter()
                    if op == "load_latest":
                        cp = c.load(workflow_id="wf-%d" % w)
                        assert cp["seq"] == args.per, cp
                    elif op == "list10":
                        assert len(c.list("wf-%d" % w, limit=10)) == 10
                    elif op == "get_tuple":
                        tup = savers[sz].get_tuple({"configurable": {"thread_id": "thread-%d" % w, "checkpoint_ns": ""}})
                        assert tup is not None and tup.checkpoint["channel_values"]["messages"]
                    else:
                        got = list(savers[sz].list({"configurable": {"thread_id": "thread-%d" % w, "checkpoint_ns": ""}}, limit=10))
                        assert len(got) == 10
                    if i >= 20:
                        lat[op][sz].append((time.perf_counter() - t) * 1e3)
        res["ops"] = {}
        for op in ops:
            s, l = lat[op]["small"], lat[op]["large"]
            row = {"small": {"p50": pct(s, .5), "p95": pct(s, .95)}, "large": {"p50": pct(l, .5), "p95": pct(l, .95)}}
            row["ratio_p95"] = row["large"]["p95"] / row["small"]["p95"]
            res["ops"][op] = row
            print("  %-12s p95 small %.3f ms, large %.3f ms: %.2fx" % (op, row["small"]["p95"], row["large"]["p95"], row["ratio_p95"]))
        res["samples_ms"] = lat

        # memory at rest after the run (the large daemons): an idle store releases its page
        # caches a second after its last request
        time.sleep(2.5)
        res["rss_kb"] = {"wf-large": rss_kb(clients["large"].pid)}
        if savers:
            res["rss_kb"]["lg-large"] = rss_kb(savers["large"].client.pid)
        print("  RSS at rest: %s" % ", ".join("%s %.1f MB" % (k, v / 1024) for k, v in res["rss_kb"].items()))
        for c in clients.values():
            c.close()
        for s in savers.values():
            s.close()

        # startup: spawn until initialize is answered
        starts: List[float] = []
        for _ in range(args.starts):
            t = time.perf_counter()
            c = ckptd.Client(db=paths[("large", "wf")], binary=binary, args=dargs)
            starts.append((time.perf_counter() - t) * 1e3)
            c.close()
        res["startup_ms"] = {"p50": pct(starts, .5), "p95": pct(starts, .95), "samples": starts}
        print("  startup to initialize (large): p50 %.1f ms, p95 %.1f ms" % (res["startup_ms"]["p50"], res["startup_ms"]["p95"]))
    finally:
        if not args.cache:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
