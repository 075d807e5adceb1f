"""Renders bench/REPORT.md and its plots (SVG, drawn here: no plotting library needed) from the
results bench/run.py collected. write() returns the number of targets missed."""

from __future__ import annotations

import html
import math
import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"]


def pct(xs: Sequence[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(p * (len(s) - 1) + 0.5))] if s else float("nan")


# ---------------------------------------------------------------------------------------------
# SVG

def _ticks_log(lo: float, hi: float) -> List[float]:
    out = []
    e = math.floor(math.log10(lo))
    while 10 ** e <= hi * 1.0001:
        for m in (1, 2, 5):
            v = m * 10 ** e
            if lo <= v <= hi:
                out.append(v)
        e += 1
    return out


def _ticks_lin(lo: float, hi: float) -> List[float]:
    span = hi - lo or 1.0
    step = 10 ** math.floor(math.log10(span / 4))
    for m in (1, 2, 5, 10):
        if span / (step * m) <= 6:
            step *= m
            break
    v = math.ceil(lo / step) * step
    out = []
    while v <= hi + 1e-9:
        out.append(v)
        v += step
    return out


def _fmt(v: float) -> str:
    if v >= 1e6:
        return "%gM" % (v / 1e6)
    if v >= 1e4:
        return "%gk" % (v / 1e3)
    return "%g" % float("%.3g" % v)


def svg_plot(path: str, title: str, series: List[Tuple[str, List[float], List[float]]], xlabel: str, ylabel: str,
             logx: bool = False, logy: bool = False, dashed: Optional[Callable[[str], bool]] = None) -> None:
    """A line plot of series (label, xs, ys) written to path as SVG."""
    W, H, L, R, T, B = 640, 380, 70, 170, 36, 50
    xs = [x for _, a, _ in series for x in a if not logx or x > 0]
    ys = [y for _, _, b in series for y in b if not logy or y > 0]
    if not xs or not ys:
        xs, ys = [1.0, 2.0], [0.0, 1.0]
    x0, x1 = min(xs), max(xs)
    y0, y1 = (min(ys), max(ys)) if logy else (0.0, max(ys) * 1.05 or 1.0)
    if x1 <= x0:
        x1 = x0 * 2 if logx else x0 + 1
    if y1 <= y0:
        y1 = y0 * 2 if logy else y0 + 1

    def fx(x: float) -> float:
        t = (math.log10(x) - math.log10(x0)) / (math.log10(x1) - math.log10(x0)) if logx else (x - x0) / (x1 - x0)
        return L + t * (W - L - R)

    def fy(y: float) -> float:
        t = (math.log10(y) - math.log10(y0)) / (math.log10(y1) - math.log10(y0)) if logy else (y - y0) / (y1 - y0)
        return H - B - t * (H - T - B)

    o = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">'
         % (W, H, W, H), '<rect width="100%" height="100%" fill="white"/>',
         '<text x="%d" y="20" font-size="14" font-weight="bold">%s</text>' % (L, html.escape(title))]
    for v in (_ticks_log(x0, x1) if logx else _ticks_lin(x0, x1)):
        o.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#eee"/>' % (fx(v), T, fx(v), H - B))
        o.append('<text x="%.1f" y="%d" text-anchor="middle">%s</text>' % (fx(v), H - B + 14, _fmt(v)))
    for v in (_ticks_log(y0, y1) if logy else _ticks_lin(y0, y1)):
        o.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/>' % (L, fy(v), W - R, fy(v)))
        o.append('<text x="%d" y="%.1f" text-anchor="end">%s</text>' % (L - 4, fy(v) + 4, _fmt(v)))
    o.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>' % (L, T, W - L - R, H - T - B))
    o.append('<text x="%.1f" y="%d" text-anchor="middle">%s</text>' % ((L + W - R) / 2, H - 12, html.escape(xlabel)))
    o.append('<text x="14" y="%.1f" text-anchor="middle" transform="rotate(-90 14 %.1f)">%s</text>'
             % ((T + H - B) / 2, (T + H - B) / 2, html.escape(ylabel)))
    for i, (label, a, b) in enumerate(series):
        c = COLORS[i % len(COLORS)]
        pts = [(fx(x), fy(y)) for x, y in zip(a, b) if (not logx or x > 0) and (not logy or y > 0)]
        if not pts:
            continue
        dash = ' stroke-dasharray="5,3"' if dashed and dashed(label) else ""
        o.append('<polyline fill="none" stroke="%s" stroke-width="1.6"%s points="%s"/>'
                 % (c, dash, " ".join("%.1f,%.1f" % p for p in pts)))
        if len(pts) <= 12:
            o.extend('<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"/>' % (x, y, c) for x, y in pts)
        ly = T + 14 + 16 * i
        o.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>' % (W - R + 10, ly - 4, W - R + 30, ly - 4, c, dash))
        o.append('<text x="%d" y="%d">%s</text>' % (W - R + 34, ly, html.escape(label)))
    o.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(o) + "\n")


def cdf(samples: Sequence[float]) -> Tuple[List[float], List[float]]:
    s = sorted(x for x in samples if x > 0)
    n = len(s)
    if n > 400:  # thin out, keeping the tail
        idx = sorted(set([int(i * (n - 1) / 300) for i in range(301)] + list(range(max(0, n - 40), n))))
        s2 = [s[i] for i in idx]
        return s2, [(i + 1) / n for i in idx]
    return s, [(i + 1) / n for i in range(n)]


# ---------------------------------------------------------------------------------------------
# Targets

def _get(d: Any, *keys: Any) -> Any:
    for k in keys:
        if d is None:
            return None
        if isinstance(d, dict):
            d = d.get(k)
        elif isinstance(d, list) and isinstance(k, int) and k < len(d):
            d = d[k]
        else:
            return None
    return d


def _rt(run: Dict[str, Any], size: str, op: str) -> Optional[Tuple[float, float]]:
    for row in _get(run, "roundtrip", "data", "rows") or []:
        if row["size"] == size and row["op"] == op:
            return row["ckptd"][1], row["baseline"][1]
    return None


def _lg(run: Dict[str, Any], dur: str, op: str) -> Optional[Tuple[float, float]]:
    ops = _get(run, "lg_" + dur, "data", "ops", op, "p95")
    return (ops["ckptd"], ops["sqlite"]) if ops else None


def _ts(run: Dict[str, Any], dur: str, op: str) -> Optional[Tuple[float, float]]:
    s = _get(run, "ts_" + dur, "data", "samples_ms")
    return (pct(s["ckptd"][op], .95), pct(s["SqliteSaver"][op], .95)) if s else None


def _probe(run: Dict[str, Any]) -> Optional[Tuple[float, float]]:
    rows = {r["name"]: r for r in _get(run, "probe", "data", "ops") or []}
    if "wflist" in rows and "unknown" in rows:
        return rows["wflist"]["p95_us"], rows["unknown"]["p95_us"]
    return None


def _tp(run: Dict[str, Any]) -> Optional[Tuple[float, float, int]]:
    rows = _get(run, "throughput", "data", "concurrency") or []
    row = next((r for r in rows if r["concurrency"] == 32), rows[-1] if rows else None)
    return (row["ckptd"]["per_s"], row["sqlite"]["per_s"], row["concurrency"]) if row else None


def _frames(run: Dict[str, Any], name: str) -> Optional[float]:
    for r in _get(run, "frames", "data") or []:
        if r["name"] == name:
            return r["frames_per_save"]
    return None


# (label, unit, kind, extract, goal): kind "ratio" compares measured/baseline with goal (<=, or
# >= when goal is negative); "abs" compares the value itself; "info" has no goal.
def targets() -> List[Tuple[str, str, str, Callable[[Dict[str, Any]], Any], float]]:
    T: List[Tuple[str, str, str, Callable[[Dict[str, Any]], Any], float]] = [
        ("trivial request (workflow/list, empty) vs unknown-method round trip, p95", "µs", "ratio", _probe, 2.0),
        ("WAL frames per 1 KB save (SQLite, one save per commit)", "frames", "abs", lambda r: _frames(r, "1 workflow"), 4.0),
        ("1 KB save + load round trip, p95, vs in-process sqlite3 FULL", "ms", "ratio", lambda r: _rt(r, "1 KB", "round trip"), 1.5),
        ("100 KB save + load round trip, p95, vs in-process sqlite3 FULL", "ms", "ratio", lambda r: _rt(r, "100 KB", "round trip"), 1.25),
    ]
    for dur in ("full", "normal"):
        for op, goal in (("put", 1.3), ("get_tuple", 1.2), ("list10", 1.0)):
            T.append(("LangGraph Python %s p95 vs SqliteSaver, %s" % (op.replace("list10", "list(limit 10)"), dur.upper()), "ms",
                      "ratio", (lambda d, o: lambda r: _lg(r, d, o))(dur, op), goal))
    for dur in ("full", "normal"):
        for op, goal in (("put", 1.3), ("getTuple", 1.2), ("list10", 1.0)):
            T.append(("LangGraph TS %s p95 vs SqliteSaver (better-sqlite3), %s" % (op.replace("list10", "list(limit 10)"), dur.upper()),
                      "ms", "ratio", (lambda d, o: lambda r: _ts(r, d, o))(dur, op), goal))
    T += [
        ("32 asyncio tasks via one AsyncClient vs 32 threads with own sqlite3 connections, saves/s (FULL)", "saves/s", "ratio",
         lambda r: (_tp(r) or (None, None))[:2] if _tp(r) else None, -3.0),
        ("LangGraph Python: 32 concurrent ainvoke, CkptdSaver vs AsyncSqliteSaver, graphs/s", "graphs/s", "ratio",
         lambda r: (_get(r, "throughput", "data", "langgraph", "ckptd", "per_s"), _get(r, "throughput", "data", "langgraph", "sqlite", "per_s"))
         if _get(r, "throughput", "data", "langgraph") else None, -2.0),
        ("LangGraph TS: 32 concurrent invoke, CkptdSaver vs SqliteSaver (better-sqlite3), graphs/s", "graphs/s", "ratio",
         lambda r: (_get(r, "ts_throughput", "data", "ckptd", "per_s"), _get(r, "ts_throughput", "data", "SqliteSaver", "per_s"))
         if _get(r, "ts_throughput", "data") else None, -2.0),
        ("8 processes, each its own ckptd on one database, vs each its own sqlite3: saves/s", "saves/s", "info",
         lambda r: (_get(r, "throughput", "data", "processes", "ckptd", "per_s"), _get(r, "throughput", "data", "processes", "sqlite", "per_s"))
         if _get(r, "throughput", "data", "processes") else None, 0.0),
        ("8 processes: save p95", "ms", "info",
         lambda r: (_get(r, "throughput", "data", "processes", "ckptd", "p95_ms"), _get(r, "throughput", "data", "processes", "sqlite", "p95_ms"))
         if _get(r, "throughput", "data", "processes") else None, 0.0),
    ]
    for op, label in (("load_latest", "load latest"), ("list10", "list(limit 10)"), ("get_tuple", "LangGraph get_tuple"),
                      ("lg_list10", "LangGraph list(limit 10)")):
        T.append(("scale: %s p95 at the large database vs at the small one" % label, "ms", "ratio",
                  (lambda o: lambda r: (_get(r, "scale", "data", "ops", o, "large", "p95"), _get(r, "scale", "data", "ops", o, "small", "p95"))
                   if _get(r, "scale", "data", "ops", o) else None)(op), 1.5))
    T += [
        ("startup to initialize answered (large database), p95", "ms", "abs", lambda r: _get(r, "scale", "data", "startup_ms", "p95"), 25.0),
        ("daemon RSS at rest after the scale run (largest of the large daemons)", "MB", "abs",
         lambda r: max(_get(r, "scale", "data", "rss_kb").values()) / 1024 if _get(r, "scale", "data", "rss_kb") else None, 64.0),
        ("in process: 100 KB save p95 at FULL (Go benchmark)", "ms", "abs",
         lambda r: _get(r, "gobench", "data", "BenchmarkSave/100KB/full", "p95-ms"), 2.0),
        ("in process: 100 KB load p95 (Go benchmark)", "ms", "abs", lambda r: _get(r, "gobench", "data", "BenchmarkLoad/100KB", "p95-ms"), 1.0),
    ]
    return T


def _num(v: Optional[float], unit: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if unit in ("saves/s", "graphs/s"):
        return "%.0f" % v
    if unit == "frames":
        return "%.2f" % v
    return "%.3g" % v if v < 100 else "%.0f" % v


# The targets the README's table shows (by label prefix).
HEADLINE = ("WAL frames", "1 KB save + load", "100 KB save + load", "LangGraph Python put p95 vs SqliteSaver, FULL",
            "LangGraph Python get_tuple p95 vs SqliteSaver, FULL", "LangGraph Python list(limit 10) p95 vs SqliteSaver, FULL",
            "32 asyncio tasks", "LangGraph Python: 32 concurrent", "scale: load latest", "startup", "daemon RSS")
README_BEGIN = "<!-- bench:begin (written by ./scripts/bench.sh) -->"
README_END = "<!-- bench:end -->"


def update_readme(path: str, report: Dict[str, Any], rows: List[str], header: str) -> None:
    """Replaces the README's table between the bench markers with this run's headline rows."""
    with open(path) as f:
        text = f.read()
    if README_BEGIN not in text or README_END not in text:
        return
    m = report["machine"]
    body = [README_BEGIN, "", "Last run: %s, %s CPUs (%s), load average %s → %s; every ratio against its baseline measured in the "
            "same run ([bench/REPORT.md](bench/REPORT.md) has every target, the machine and the plots)."
            % (report["started"], m["cpus"], m["cpu"], report["load_start"], report["load_end"]), "", header,
            header_rule(header)] + rows + ["", README_END]
    a, rest = text.split(README_BEGIN, 1)
    _, b = rest.split(README_END, 1)
    with open(path, "w") as f:
        f.write(a + "\n".join(body) + b)


def header_rule(header: str) -> str:
    n = header.count("|") - 1
    return "|" + "---|" * n


def write(report: Dict[str, Any], out: str, readme: Optional[str] = None) -> int:
    plots = os.path.join(out, "plots")
    os.makedirs(plots, exist_ok=True)
    runs = report["runs"]
    lines: List[str] = []
    m = report["machine"]
    tiny = " — **tiny mode: a smoke run, the figures mean nothing**" if report.get("tiny") else ""
    lines += ["# ckptd benchmark report", "",
              "Written by `./scripts/bench.sh` on %s (%d run%s, %.0f s)%s. Every ratio is ckptd over its baseline "
              "measured in the same run; rerun with `./scripts/bench.sh` (`--runs 3` for three runs in a row)."
              % (report["started"], len(runs), "" if len(runs) == 1 else "s", report["seconds"], tiny), "",
              "Machine: %s, %s CPUs, %s memory; kernel %s; file system %s; load average %s at the start, %s at the end; "
              "commit %s." % (m["cpu"], m["cpus"], m["memory"], m["kernel"], m["filesystem"], report["load_start"],
                               report["load_end"], m["commit"]), "",
              "Versions: " + "; ".join("%s %s" % (k, v) for k, v in m["versions"].items()) + ".", ""]

    # targets
    lines += ["## Targets (#18)", "",
              "| target | ckptd | baseline | " + " | ".join("run %d" % (i + 1) for i in range(len(runs))) + " | goal | verdict |",
              "|---|---:|---:|" + "---:|" * len(runs) + "---|---|"]
    missed = 0
    headline: List[str] = []
    for label, unit, kind, f, goal in targets():
        vals = []
        for r in runs:
            try:
                vals.append(f(r))
            except (KeyError, TypeError, ValueError, ZeroDivisionError, IndexError):
                vals.append(None)
        cells, oks = [], []
        first = vals[0]
        if kind == "abs":
            ck, base = (first if first is not None else None), None
            for v in vals:
                cells.append(_num(v, unit) if v is not None else "not measured")
                oks.append(v is not None and v <= goal)
            goal_s = "≤ %g %s" % (goal, unit)
        else:
            ck, base = (first if first else (None, None))
            for v in vals:
                if not v or v[0] is None or v[1] in (None, 0):
                    cells.append("not measured")
                    oks.append(False)
                    continue
                ratio = v[0] / v[1]
                cells.append("%.2f×" % ratio)
                oks.append(ratio <= goal if goal > 0 else ratio >= -goal)
            goal_s = "—" if kind == "info" else ("≤ %g×" % goal if goal > 0 else "≥ %g×" % -goal)
        if kind == "info":
            verdict = "reported"
        elif all(oks):
            verdict = "**met**" + (" (all runs)" if len(runs) > 1 else "")
        else:
            missed += 1
            verdict = "**missed**" if not any(oks) else "**missed** in %d of %d runs" % (oks.count(False), len(oks))
        row = "| %s | %s | %s | %s | %s | %s |" % (label, _num(ck, unit) + ("" if ck is None else " " + unit),
                                                   "" if base is None else _num(base, unit) + " " + unit,
                                                   " | ".join(cells), goal_s, verdict)
        lines.append(row)
        if label.startswith(HEADLINE):
            headline.append(row)
    lines += ["", "%d target(s) missed. Where a target is missed, bench/results/ has the profile of what is left." % missed, ""]

    # plots from the first run
    r0 = runs[0]
    pl: List[Tuple[str, str]] = []
    s = _get(r0, "roundtrip", "data", "samples_ms")
    if s:
        series = []
        for size in s:
            for who, label in (("ckptd", "ckptd"), ("baseline", "sqlite3 in-process")):
                x, y = cdf(s[size][who]["rt"])
                series.append(("%s %s" % (label, size), x, y))
        svg_plot(os.path.join(plots, "latency-roundtrip.svg"), "save + load round trip: latency CDF", series, "ms (log)",
                 "fraction of round trips", logx=True, dashed=lambda l: l.startswith("sqlite3"))
        pl.append(("Save + load round trip, ckptd (FULL) against in-process sqlite3 (FULL)", "plots/latency-roundtrip.svg"))
    for dur in ("full", "normal"):
        s = _get(r0, "lg_" + dur, "data", "samples_ms")
        if s:
            series = []
            for op in ("put", "get_tuple", "list10"):
                for who, label in (("ckptd", "CkptdSaver"), ("sqlite", "SqliteSaver")):
                    x, y = cdf(s[who][op])
                    series.append(("%s %s" % (label, op), x, y))
            svg_plot(os.path.join(plots, "latency-langgraph-%s.svg" % dur), "LangGraph (Python), %s: latency CDF" % dur.upper(),
                     series, "ms (log)", "fraction of calls", logx=True, dashed=lambda l: l.startswith("Sqlite"))
            pl.append(("LangGraph Python savers at %s" % dur.upper(), "plots/latency-langgraph-%s.svg" % dur))
        s = _get(r0, "ts_" + dur, "data", "samples_ms")
        if s:
            series = []
            for op in ("put", "getTuple", "list10"):
                for who in ("ckptd", "SqliteSaver"):
                    x, y = cdf(s[who][op])
                    series.append(("%s %s" % (who, op), x, y))
            svg_plot(os.path.join(plots, "latency-langgraph-ts-%s.svg" % dur), "LangGraph (TS), %s: latency CDF" % dur.upper(),
                     series, "ms (log)", "fraction of calls", logx=True, dashed=lambda l: l.startswith("Sqlite"))
            pl.append(("LangGraph TS savers at %s" % dur.upper(), "plots/latency-langgraph-ts-%s.svg" % dur))
    s = _get(r0, "scale", "data", "samples_ms")
    if s:
        series = []
        for op in s:
            for sz in ("small", "large"):
                x, y = cdf(s[op][sz])
                series.append(("%s %s" % (op, sz), x, y))
        svg_plot(os.path.join(plots, "latency-scale.svg"), "point reads: small vs large database, latency CDF", series, "ms (log)",
                 "fraction of reads", logx=True, dashed=lambda l: l.endswith("small"))
        pl.append(("Point reads at the large database against the small one", "plots/latency-scale.svg"))
    rows = _get(r0, "throughput", "data", "concurrency")
    if rows:
        xs = [r["concurrency"] for r in rows]
        svg_plot(os.path.join(plots, "throughput.svg"), "1 KB saves per second against concurrency (FULL)",
                 [("ckptd, one AsyncClient", xs, [r["ckptd"]["per_s"] for r in rows]),
                  ("sqlite3, a connection per thread", xs, [r["sqlite"]["per_s"] for r in rows])],
                 "concurrent callers (log)", "saves/s", logx=True, dashed=lambda l: l.startswith("sqlite3"))
        pl.append(("Throughput against concurrency", "plots/throughput.svg"))
    g = _get(r0, "lg_full", "data", "growth")
    if g:
        xs = [x[0] for x in g]
        svg_plot(os.path.join(plots, "disk.svg"), "LangGraph: bytes on disk against steps (db + wal)",
                 [("CkptdSaver", xs, [x[1] / 2**20 for x in g]), ("SqliteSaver", xs, [x[2] / 2**20 for x in g])],
                 "steps", "MiB", dashed=lambda l: l.startswith("Sqlite"))
        pl.append(("Bytes on disk against steps (one LangGraph thread, growing message list)", "plots/disk.svg"))
    lines += ["## Plots", ""]
    for title, p in pl:
        lines += ["### " + title, "", "![%s](%s)" % (title, p), ""]

    # details
    lines += ["## Details (run 1)", ""]
    fr = _get(r0, "frames", "data")
    if fr:
        lines += ["WAL frames per 1 KB save, by b-tree (in-process sqlite3 baseline, its one-table schema: %.2f):"
                  % (_get(r0, "frames", "baseline", "frames_per_save") or float("nan")), "",
                  "| case | frames/save | by b-tree |", "|---|---:|---|"]
        for x in fr:
            by = ", ".join("%s %.2f" % (k, v) for k, v in sorted(x["by_btree"].items(), key=lambda kv: -kv[1]))
            lines.append("| %s | %.2f | %s |" % (x["name"], x["frames_per_save"], by))
        lines.append("")
    rt = _get(r0, "roundtrip", "data", "rows")
    if rt:
        lines += ["Round trips (ms, p50 / p95 / p99):", "", "| state | op | ckptd | sqlite3 | p95 ratio |", "|---|---|---|---|---:|"]
        for x in rt:
            lines.append("| %s | %s | %s | %s | %.2f× |" % (x["size"], x["op"], " / ".join("%.3f" % v for v in x["ckptd"]),
                                                           " / ".join("%.3f" % v for v in x["baseline"]), x["ckptd"][1] / x["baseline"][1]))
        lines.append("")
    if rows:
        lines += ["Throughput (1 KB saves, FULL):", "", "| callers | ckptd saves/s (p95 ms) | sqlite3 threads saves/s (p95 ms) | ratio |",
                  "|---:|---:|---:|---:|"]
        for x in rows:
            lines.append("| %d | %.0f (%.1f) | %.0f (%.1f) | %.2f× |" % (x["concurrency"], x["ckptd"]["per_s"], x["ckptd"]["p95_ms"],
                                                                     x["sqlite"]["per_s"], x["sqlite"]["p95_ms"], x["ratio"]))
        lines.append("")
    sc = _get(r0, "scale", "data")
    if sc:
        lines += ["Scale: %d workflows and %d LangGraph threads of %d checkpoints each (%s checkpoints each kind) against %d of each; "
                  "filled in %.0f s%s; files: %s." % (sc["workflows"], sc["workflows"], sc["per"], "{:,}".format(sc["workflows"] * sc["per"]),
                                                    sc["small_workflows"], sc["fill_seconds"],
                                                    " (reused from the first run)" if sc.get("reused_fill") else "",
                                                    ", ".join("%s %.0f MB" % (k, v / 1e6) for k, v in sc["db_bytes"].items())), ""]
    errs = [(i + 1, k, v["error"]) for i, r in enumerate(runs) for k, v in r.items() if isinstance(v, dict) and v.get("error")]
    if errs:
        lines += ["Sections that did not run:", ""] + ["- run %d, %s: %s" % e for e in errs] + [""]
    lines += ["Per-run load average: " + "; ".join("run %d %s → %s" % (i + 1, r["load_start"], r["load_end"]) for i, r in enumerate(runs)), ""]
    with open(os.path.join(out, "REPORT.md"), "w") as f:
        f.write("\n".join(lines))
    if readme:
        update_readme(readme, report, headline, "| target | ckptd | baseline | " + " | ".join("run %d" % (i + 1) for i in range(len(runs)))
                      + " | goal | verdict |")
    return missed
