#!/usr/bin/env python3
"""Runs every comparison of #18 in one go and writes bench/REPORT.md with its plots.

Called by ./scripts/bench.sh, which builds the binaries first. Each benchmark measures its
baseline in the same run (interleaved where it can) and prints the ratio; this script collects
their JSON, records the machine, and hands everything to bench/report.py.

    python3 bench/run.py --bin ckptd --fill fill --sqlite-test sqlite.test --work DIR --out bench [--tiny] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYBENCH = os.path.join(ROOT, "clients", "python", "bench")
TSDIR = os.path.join(ROOT, "clients", "ts")

# (full, tiny) sizes of each benchmark
SIZES = {
    "roundtrip_n": (1000, 30),
    "lg_steps": (500, 20),
    "ts_steps": (500, 20),
    "tp_seconds": (3.0, 0.5),
    "tp_levels": ("1,4,16,32,64", "1,4"),
    "lg_concurrency": (32, 4),
    "procs": (8, 2),
    "scale_workflows": (10000, 50),
    "scale_small": (10, 5),
    "scale_per": (100, 20),
    "scale_samples": (400, 20),
    "starts": (20, 3),
    "probe_n": (2000, 50),
    "frames_n": (400, 400),
    "gobench": ("300x", "20x"),
}


def sh(cmd: List[str], **kw: Any) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30, **kw).stdout.strip()
    except Exception as e:  # noqa: BLE001
        return "? (%s)" % e


def machine(work: str, binary: str) -> Dict[str, Any]:
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    df = sh(["df", "-T", work]).splitlines()
    fs = df[-1].split() if len(df) > 1 else ["?", "?"]
    mem = "?"
    try:
        with open("/proc/meminfo") as f:
            mem = "%.1f GiB" % (int(f.readline().split()[1]) / 2**20)
    except OSError:
        pass
    versions = {
        "ckptd": sh([binary, "--version"]),
        "go": sh(["go", "version"]),
        "python": sys.version.split()[0],
        "python sqlite3 (SQLite)": sqlite3.sqlite_version,
        "node": sh(["node", "--version"]),
    }
    try:
        import importlib.metadata as md

        for pkg in ("langgraph", "langgraph-checkpoint", "langgraph-checkpoint-sqlite", "aiosqlite"):
            try:
                versions[pkg] = md.version(pkg)
            except md.PackageNotFoundError:
                versions[pkg] = "not installed"
    except ImportError:
        pass
    bs = os.path.join(TSDIR, "bench", "node_modules", "better-sqlite3", "package.json")
    if os.path.exists(bs):
        with open(bs) as f:
            versions["better-sqlite3"] = json.load(f)["version"]
    return {"cpu": cpu, "cpus": os.cpu_count(), "memory": mem, "kernel": platform.release(), "os": platform.platform(),
            "filesystem": "%s (%s)" % (fs[1], fs[0]) if len(fs) > 1 else "?", "versions": versions,
            "commit": sh(["git", "-C", ROOT, "describe", "--always", "--dirty"])}


class Runner:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.tiny = args.tiny
        self.log: List[str] = []

    def size(self, key: str) -> Any:
        return SIZES[key][1 if self.tiny else 0]

    def run(self, name: str, cmd: List[str], out: Optional[str], env: Optional[Dict[str, str]] = None,
            cwd: Optional[str] = None, timeout: float = 900) -> Dict[str, Any]:
        """Runs one benchmark; its stdout goes to the console and the log, its JSON is returned."""
        t0 = time.time()
        print("\n== %s: %s" % (name, " ".join(cmd)), flush=True)
        e = dict(os.environ)
        e.update(env or {})
        p = subprocess.run(cmd, cwd=cwd, env=e, capture_output=True, text=True, timeout=timeout)
        sys.stdout.write(p.stdout[-6000:])
        dt = time.time() - t0
        res: Dict[str, Any] = {"seconds": dt}
        if p.returncode != 0:
            sys.stdout.write(p.stderr[-4000:])
            res["error"] = "exit %d: %s" % (p.returncode, (p.stderr.strip().splitlines() or ["?"])[-1][:300])
            print("!! %s failed: %s" % (name, res["error"]), flush=True)
            return res
        res["stdout"] = p.stdout
        if out:
            with open(out) as f:
                res["data"] = json.load(f)
        print("   (%.0f s)" % dt, flush=True)
        return res

    # -- the benchmarks -------------------------------------------------------------------------

    def frames(self, w: str) -> Dict[str, Any]:
        out = os.path.join(w, "frames.json")
        r = self.run("WAL frames per save", [self.args.sqlite_test, "-test.run", "^TestWALFramesPerSave$", "-test.v",
                                             "-test.count", "1"], None, env={"CKPTD_WALFRAMES_JSON": out})
        if "error" not in r:
            with open(out) as f:
                r["data"] = json.load(f)
        r["baseline"] = baseline_frames(w, self.size("frames_n"))
        return r

    def gobench(self, w: str) -> Dict[str, Any]:
        r: Dict[str, Any] = {"stdout": ""}
        for pattern in ("^BenchmarkSave$/^100KB$/^full$", "^BenchmarkLoad$/^100KB$"):
            x = self.run("in-process (Go benchmark %s)" % pattern, [self.args.sqlite_test, "-test.run", "^$", "-test.bench", pattern,
                                                                   "-test.benchtime", self.size("gobench")], None, timeout=600)
            if "error" in x:
                return x
            r["stdout"] += x["stdout"]
        # BenchmarkSave/100KB/full-2   300   1234 ns/op   ...   0.61 p50-ms   0.93 p95-ms ...
        data: Dict[str, Dict[str, float]] = {}
        for line in r["stdout"].splitlines():
            if not line.startswith("Benchmark"):
                continue
            f = line.split()
            name = re.sub(r"-\d+$", "", f[0])
            data[name] = {f[i + 1]: float(f[i]) for i in range(2, len(f) - 1) if re.match(r"^[0-9.]+$", f[i])}
        r["data"] = data
        return r

    def probe(self, w: str) -> Dict[str, Any]:
        out = os.path.join(w, "probe.json")
        return self.run("trivial request (bench/probe)", [self.args.probe, "-bin", self.args.bin, "-n", str(self.size("probe_n")),
                                                          "-cpu-n", "0", "-ops", "unknown,wflist", "-json", out,
                                                          "-dir", w], out)

    def roundtrip(self, w: str) -> Dict[str, Any]:
        out = os.path.join(w, "roundtrip.json")
        return self.run("save + load round trip", [sys.executable, os.path.join(PYBENCH, "bench_roundtrip.py"),
                                                   "--binary", self.args.bin, "--n", str(self.size("roundtrip_n")),
                                                   "--sizes", "1024,102400", "--durability", "full", "--dir", w,
                                                   "--json", out], out)

    def langgraph(self, w: str, durability: str) -> Dict[str, Any]:
        out = os.path.join(w, "lg-%s.json" % durability)
        return self.run("LangGraph (Python), %s" % durability,
                        [sys.executable, os.path.join(PYBENCH, "bench_langgraph.py"), "--binary", self.args.bin,
                         "--steps", str(self.size("lg_steps")), "--durability", durability,
                         "--dir", os.path.join(w, "lg-" + durability), "--json", out], out)

    def langgraph_ts(self, w: str, durability: str) -> Dict[str, Any]:
        out = os.path.join(w, "ts-%s.json" % durability)
        if not os.path.exists(os.path.join(TSDIR, "bench", "node_modules", "better-sqlite3")) and not self.args.ts_install:
            return {"error": "not run: the TS bench's own dependencies (SqliteSaver, better-sqlite3) are not installed; "
                             "./scripts/bench.sh --ts-install installs them into clients/ts/bench/node_modules"}
        if not os.path.exists(os.path.join(TSDIR, "node_modules")):
            return {"error": "not run: clients/ts has no node_modules (npm ci)"}
        return self.run("LangGraph (TypeScript), %s" % durability,
                        ["node", "build/bench/langgraph.js", "--steps", str(self.size("ts_steps")), "--durability", durability,
                         "--json", out], out, env={"CKPTD_PATH": self.args.bin}, cwd=TSDIR)

    def throughput_ts(self, w: str) -> Dict[str, Any]:
        out = os.path.join(w, "ts-throughput.json")
        if not os.path.exists(os.path.join(TSDIR, "bench", "node_modules", "better-sqlite3")):
            return {"error": "not run: the TS bench's own dependencies (SqliteSaver, better-sqlite3) are not installed; "
                             "./scripts/bench.sh --ts-install installs them into clients/ts/bench/node_modules"}
        return self.run("LangGraph (TypeScript) throughput",
                        ["node", "build/bench/throughput.js", "--concurrency", str(self.size("lg_concurrency")),
                         "--seconds", str(2 * self.size("tp_seconds")), "--json", out], out, env={"CKPTD_PATH": self.args.bin},
                        cwd=TSDIR)

    def throughput(self, w: str) -> Dict[str, Any]:
        out = os.path.join(w, "throughput.json")
        return self.run("throughput", [sys.executable, os.path.join(PYBENCH, "bench_throughput.py"), "--binary", self.args.bin,
                                       "--seconds", str(self.size("tp_seconds")), "--levels", self.size("tp_levels"),
                                       "--lg-concurrency", str(self.size("lg_concurrency")), "--procs", str(self.size("procs")),
                                       "--dir", w, "--json", out], out)

    def scale(self, w: str) -> Dict[str, Any]:
        out = os.path.join(w, "scale.json")
        return self.run("scale", [sys.executable, os.path.join(PYBENCH, "bench_scale.py"), "--binary", self.args.bin,
                                  "--fill", self.args.fill, "--workflows", str(self.size("scale_workflows")),
                                  "--small-workflows", str(self.size("scale_small")), "--per", str(self.size("scale_per")),
                                  "--samples", str(self.size("scale_samples")), "--starts", str(self.size("starts")),
                                  "--dir", w, "--cache", os.path.join(self.args.work, "scale-dbs"), "--json", out], out,
                        timeout=1800)


def baseline_frames(w: str, n: int) -> Dict[str, Any]:
    """WAL frames per 1 KB save of the in-process baseline (the round trip's sqlite3 table: id TEXT
    PRIMARY KEY, workflow, seq, state), measured the same way: WAL growth with checkpoints off."""
    path = os.path.join(w, "frames-baseline.db")
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=FULL")
    con.execute("PRAGMA wal_autocheckpoint=0")
    con.execute("CREATE TABLE checkpoints (id TEXT PRIMARY KEY, workflow TEXT NOT NULL, seq INTEGER NOT NULL, state BLOB)")
    page = con.execute("PRAGMA page_size").fetchone()[0]
    blob = bytes(range(256)) * 4

    def save(i: int) -> None:
        con.execute("BEGIN IMMEDIATE")
        con.execute("INSERT INTO checkpoints VALUES (?, ?, ?, ?)", ("wf-%d" % i, "wf", i, blob[:-8] + i.to_bytes(8, "big")))
        con.execute("COMMIT")

    for i in range(200):
        save(i)
    s0 = os.path.getsize(path + "-wal")
    for i in range(200, 200 + n):
        save(i)
    s1 = os.path.getsize(path + "-wal")
    con.close()
    return {"frames_per_save": (s1 - s0) / (page + 24) / n, "page_size": page}


def loadavg() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--fill", required=True)
    ap.add_argument("--probe", required=True)
    ap.add_argument("--sqlite-test", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench"))
    ap.add_argument("--tiny", action="store_true", help="every benchmark at a token size (the smoke test)")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--only", default="", help="comma-separated sections (default: all)")
    ap.add_argument("--ts-install", action="store_true")
    ap.add_argument("--scale", type=int, default=0, help="workflows (and threads) of 100 checkpoints in the large scale "
                                                         "databases (default 10000: 1,000,000 checkpoints each)")
    args = ap.parse_args()
    if args.scale > 0:
        SIZES["scale_workflows"] = (args.scale, args.scale)
    r = Runner(args)
    only = set(filter(None, args.only.split(",")))
    report: Dict[str, Any] = {"started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "tiny": args.tiny,
                              "machine": machine(args.work, args.bin), "load_start": loadavg(), "runs": []}
    t0 = time.time()
    for k in range(args.runs):
        w = os.path.join(args.work, "run%d" % (k + 1))
        os.makedirs(w, exist_ok=True)
        res: Dict[str, Any] = {"load_start": loadavg()}
        sections = [
            ("frames", lambda: r.frames(w)),
            ("gobench", lambda: r.gobench(w)),
            ("probe", lambda: r.probe(w)),
            ("roundtrip", lambda: r.roundtrip(w)),
            ("lg_full", lambda: r.langgraph(w, "full")),
            ("lg_normal", lambda: r.langgraph(w, "normal")),
            ("ts_full", lambda: r.langgraph_ts(w, "full")),
            ("ts_normal", lambda: r.langgraph_ts(w, "normal")),
            ("throughput", lambda: r.throughput(w)),
            ("ts_throughput", lambda: r.throughput_ts(w)),
            ("scale", lambda: r.scale(w)),
        ]
        for name, f in sections:
            if only and name not in only:
                continue
            try:
                res[name] = f()
            except Exception as e:  # noqa: BLE001 - a failed section is reported, the others still run
                res[name] = {"error": "%s: %s" % (type(e).__name__, e)}
                print("!! %s: %s" % (name, res[name]["error"]), flush=True)
        res["load_end"] = loadavg()
        report["runs"].append(res)
        shutil.rmtree(w, ignore_errors=True)
    report["seconds"] = time.time() - t0
    report["load_end"] = loadavg()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(strip_samples(report), f, indent=1)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import report as rep

    # The README's headline table follows the repository's own report (not a smoke run's).
    readme = os.path.join(ROOT, "README.md")
    own = os.path.realpath(args.out) == os.path.realpath(os.path.join(ROOT, "bench")) and not args.tiny
    missed = rep.write(report, args.out, readme if own else None)
    print("\nwrote %s (%d target(s) missed) in %.0f s" % (os.path.join(args.out, "REPORT.md"), missed, report["seconds"]))
    return 0


def strip_samples(x: Any) -> Any:
    """results.json keeps the figures, not every sample (the plots have those)."""
    if isinstance(x, dict):
        return {k: strip_samples(v) for k, v in x.items() if k not in ("samples_ms", "samples", "stdout", "lat_us")}
    if isinstance(x, list):
        return [strip_samples(v) for v in x]
    return x


if __name__ == "__main__":
    sys.exit(main())
