"""The benchmark script runs end to end (./scripts/bench.sh --tiny), so that it cannot rot: every
section runs at a token size and the report lists every target of #18 with a figure. The TS
LangGraph rows need the bench's own dependencies (better-sqlite3), which the tests never install:
without them the report says so by name instead of measuring."""

from __future__ import annotations

import json
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_bench_script_tiny(tmp_path: "os.PathLike[str]") -> None:
    out = os.path.join(str(tmp_path), "report")
    env = dict(os.environ, CKPTD_REQUIRE_LANGGRAPH="1", TMPDIR=str(tmp_path))
    p = subprocess.run(["./scripts/bench.sh", "--tiny", "--out", out], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=1200)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    with open(os.path.join(out, "REPORT.md")) as f:
        report = f.read()
    with open(os.path.join(out, "results.json")) as f:
        results = json.load(f)
    run = results["runs"][0]
    ts_installed = os.path.isdir(os.path.join(ROOT, "clients", "ts", "bench", "node_modules", "better-sqlite3"))
    for section in ("frames", "gobench", "probe", "roundtrip", "lg_full", "lg_normal", "ts_full", "ts_normal", "throughput", "ts_throughput", "scale"):
        assert section in run, section
        err = run[section].get("error")
        if section.startswith("ts_") and not ts_installed:
            assert err and err.startswith("not run: the TS bench's own dependencies"), err
            continue
        assert not err, (section, err)
    assert "tiny mode" in report
    for needle in ("WAL frames per 1 KB save", "1 KB save + load round trip", "100 KB save + load round trip",
                   "LangGraph Python put p95", "LangGraph Python get_tuple p95", "LangGraph Python list(limit 10) p95",
                   "32 asyncio tasks via one AsyncClient", "32 concurrent ainvoke", "8 processes",
                   "scale: load latest", "startup to initialize", "daemon RSS at rest", "in process: 100 KB save"):
        rows = [l for l in report.splitlines() if l.startswith("| ") and needle in l]
        assert rows, needle
        if not needle.startswith("LangGraph TS"):
            assert "not measured" not in rows[0], rows[0]
    for plot in ("latency-roundtrip.svg", "latency-langgraph-full.svg", "throughput.svg", "disk.svg", "latency-scale.svg"):
        path = os.path.join(out, "plots", plot)
        assert os.path.getsize(path) > 500, plot
        with open(path) as f:
            assert f.read().startswith("<svg"), plot
