"""``CkptdSaver`` behaves like LangGraph's reference ``SqliteSaver``, checked against the installed
reference in the same test (issue #19 points 1-4), and bounds long threads with its opt-in
retention (issue #24): replayed branches, metadata filters, values larger than one frame, thread
ids, NaN metadata, get_tuple's config, keep_last over a 2,000-turn chat, idle threads.

On SQLite and on PostgreSQL (the run's throwaway cluster, CKPTD_TEST_PG_URL). Skips without
LangGraph unless CKPTD_REQUIRE_LANGGRAPH=1 (then fails; see test_langgraph_conformance.py).
"""


import base64
import json
import math
import operator
import os
import random
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import pytest

from conftest import pg_schema_url
from test_langgraph_conformance import require


@pytest.fixture
def lg() -> None:
    require("langgraph.graph", "langgraph.checkpoint.base", "langgraph.checkpoint.sqlite", "ckptd.langgraph")


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db(lg: None, backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if backend == "sqlite":
        return str(tmp_path / "ckptd.db")
    return pg_schema_url(request.getfixturevalue("pg_base_url"))


@pytest.fixture
def ours(db: str, ckptd_bin: str) -> Iterator[Any]:
    from ckptd.langgraph import CkptdSaver

    with CkptdSaver(db=db, binary=ckptd_bin, request_timeout=300) as s:
        yield s


@pytest.fixture
def ref(lg: None, tmp_path: Path) -> Iterator[Any]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(str(tmp_path / "reference.sqlite"), check_same_thread=False)
    try:
        yield SqliteSaver(conn)
    finally:
        conn.close()


def cfg(thread: str, ns: str = "", checkpoint_id: Any = None) -> Dict[str, Any]:
    c: Dict[str, Any] = {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}
    if checkpoint_id:
        c["configurable"]["checkpoint_id"] = checkpoint_id
    return c


# --- 1. a replayed branch reads its own values --------------------------------------------------


def _replay(saver: Any) -> Tuple[Any, Any, List[Any]]:
    """The issue's reproduction: a 3-node graph whose middle node re-seeds ``random`` and returns
    another value on its second run, replayed from the checkpoint before it."""
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph

    class S(TypedDict):
        value: str
        log: list

    runs = {"b": 0}

    def a(s: S) -> Dict[str, Any]:
        return {"log": s["log"] + ["a"]}

    def b(s: S) -> Dict[str, Any]:
        random.seed(42)  # the saver's version generator repeats after this
        runs["b"] += 1
        return {"value": "run-%d" % runs["b"]}

    def c(s: S) -> Dict[str, Any]:
        return {"log": s["log"] + ["c saw " + s["value"]]}

    g = StateGraph(S)
    for name, fn in (("a", a), ("b", b), ("c", c)):
        g.add_node(name, fn)
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("b", "c")
    g.add_edge("c", END)
    graph = g.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "replay"}}
    graph.invoke({"value": "", "log": []}, config)
    before_b = next(s for s in graph.get_state_history(config) if s.next == ("b",))
    out = graph.invoke(None, before_b.config)
    state = graph.get_state(config).values
    history = [(s.values, s.next, s.metadata["step"]) for s in graph.get_state_history(config)]
    return out, state, history


@pytest.mark.parametrize("versions", ["random", "counter"])
def test_replayed_branch_reads_its_own_values(ours: Any, ref: Any, versions: str) -> None:
    if versions == "counter":
        # a version generator that repeats on any replay: LangGraph's default (1, 2, 3, ...)
        from langgraph.checkpoint.base import BaseCheckpointSaver

        ours.get_next_version = lambda current, channel=None: BaseCheckpointSaver.get_next_version(ours, current, channel)
        ref.get_next_version = lambda current, channel=None: BaseCheckpointSaver.get_next_version(ref, current, channel)
    got = _replay(ours)
    want = _replay(ref)
    assert got[0] == want[0] == {"value": "run-2", "log": ["a", "c saw run-2"]}
    assert got[1] == want[1]
    assert got[2] == want[2]
    # both branches are in the history with their own values
    values = [h[0].get("value") for h in got[2]]
    assert "run-1" in values and "run-2" in values


# --- 2. metadata filters select what SqliteSaver selects ----------------------------------------

_METADATA = [
    {"source": "input", "step": -1, "flag": True, "x": {"a": 1, "b": 2}, "n": None},
    {"source": "loop", "step": 0, "flag": 1, "x": {"b": 2, "a": 1}},
    {"source": "loop", "step": 1, "flag": False, "x": [1, True], "score": 1.0},
    {"source": "loop", "step": 1.0, "flag": 0, "score": 2},
    {"source": "update", "step": 2, "tags": ["é", "x"]},
]
# (no NaN or infinity here: SqliteSaver stores them as NaN and Infinity, which its SQLite's
# json_extract refuses as malformed JSON for every filter; see the NaN test)

# filters on which SqliteSaver's json_extract comparison is Python's == (and InMemorySaver's)
_FILTERS = [
    {"missing_key": None},
    {"flag": 1},
    {"flag": True},
    {"flag": 0},
    {"flag": False},
    {"step": True},
    {"step": 1},
    {"step": 1.0},
    {"step": 0},
    {"step": -1},
    {"n": None},
    {"source": None},
    {"source": "loop"},
    {"source": "loop", "flag": 1},
    {"source": "loop", "step": 1, "missing": None},
    {"x": [1, True]},
    {"score": 1},
    {"score": float("inf")},
    {"score": float("nan")},
    {"step": "1"},
    {"tags": ["a"]},
]
# filters where SqliteSaver compares JSON texts (key order; its filter text escapes non-ASCII while
# the stored text does not): Python's == is the rule there (InMemorySaver's)
_PYTHON_EQ_ONLY = [{"x": {"b": 2, "a": 1}}, {"x": {"a": 1, "b": 2}}, {"tags": ["é", "x"]}, {"x": [True, 1.0]}]


def _fill(saver: Any) -> List[str]:
    from langgraph.checkpoint.base import empty_checkpoint

    ids = []
    for thread in ("t1", "t2"):
        parent = cfg(thread)
        for i, md in enumerate(_METADATA):
            cp = empty_checkpoint()
            cp["id"] = "1f0%s-%04d" % (thread, i)
            parent = saver.put(parent, cp, dict(md), {})
            ids.append(cp["id"])
    return ids


def test_metadata_filters_select_what_sqlitesaver_selects(ours: Any, ref: Any) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    mem = InMemorySaver()
    for s in (ours, ref, mem):
        _fill(s)
    for f in _FILTERS:
        for config in (None, cfg("t1"), {"configurable": {"thread_id": "t2"}}):
            want = [t.checkpoint["id"] for t in ref.list(config, filter=dict(f))]
            got = [t.checkpoint["id"] for t in ours.list(config, filter=dict(f))]
            assert got == want, (f, config)
            # InMemorySaver orders by thread first: the same set
            assert sorted(got) == sorted(t.checkpoint["id"] for t in mem.list(config, filter=dict(f))), (f, config)
    # the three, named
    assert len(list(ours.list(None, filter={"missing_key": None}))) == 10
    assert [t.metadata["step"] for t in ours.list(cfg("t1"), filter={"flag": 1})] == [0, -1]
    assert [t.metadata["step"] for t in ours.list(cfg("t1"), filter={"step": True})] == [1.0, 1]
    for f in _PYTHON_EQ_ONLY:
        got = sorted(t.checkpoint["id"] for t in ours.list(None, filter=f))
        assert got == sorted(t.checkpoint["id"] for t in mem.list(None, filter=f)), f
        assert got, f


# --- 3. the size limit is per value ---------------------------------------------------------------


@pytest.mark.timeout(600)
def test_two_40mb_channels_in_one_step(ours: Any, ref: Any, backend: str) -> None:
    """One node writing two 40 MB channels: under the daemon's 64 MiB limit each value fits a
    frame, their sum does not; the saver sends them ahead one by one (lg/putValue)."""
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph

    class S(TypedDict):
        a: bytes
        b: bytes
        n: int

    big_a = os.urandom(40 << 20)
    big_b = bytes(reversed(big_a))

    def node(s: S) -> Dict[str, Any]:
        return {"a": big_a, "b": big_b, "n": s["n"] + 1}

    g = StateGraph(S)
    g.add_node("big", node)
    g.add_edge(START, "big")
    g.add_edge("big", END)
    results = []
    for saver in (ref, ours):
        graph = g.compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "big"}}
        out = graph.invoke({"a": b"", "b": b"", "n": 0}, config)
        state = graph.get_state(config).values
        results.append((out["n"], state["n"], state["a"] == big_a, state["b"] == big_b))
        del out, state
    assert results[0] == results[1] == (1, 1, True, True)


def test_large_values_go_ahead_under_a_small_limit(db: str, ckptd_bin: str) -> None:
    """The same with a 1 MiB limit: a put and a put_writes whose values are 3 x 700 KB."""
    from langgraph.checkpoint.base import empty_checkpoint

    from ckptd.langgraph import CkptdSaver

    with CkptdSaver(db=db, binary=ckptd_bin, args=["--max-state-size", "1MiB"]) as s:
        vals = {ch: os.urandom(700 << 10) for ch in ("a", "b", "c")}
        cp = empty_checkpoint()
        cp["channel_values"] = dict(vals)
        cp["channel_versions"] = {ch: "1" for ch in vals}
        c = s.put(cfg("t"), cp, {}, {ch: "1" for ch in vals})
        s.put_writes(c, [("a", vals["a"]), ("b", vals["b"]), ("c", vals["c"])], "task")
        t = s.get_tuple(c)
        assert t.checkpoint["channel_values"] == vals
        assert [w[2] for w in t.pending_writes] == [vals["a"], vals["b"], vals["c"]]
        # one value over the limit is refused, naming the limit
        import ckptd

        cp2 = empty_checkpoint()
        cp2["channel_values"] = {"huge": os.urandom(2 << 20)}
        cp2["channel_versions"] = {"huge": "2"}
        with pytest.raises(ckptd.TooLarge):
            s.put(c, cp2, {}, {"huge": "2"})
        assert s.get_tuple(cfg("t")).checkpoint["id"] == cp["id"]


# --- 4. thread ids, NaN metadata, get_tuple's config ---------------------------------------------


def test_thread_ids_the_reference_accepts(ours: Any, ref: Any) -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    for thread in ("", "x" * 1000, "é" * 1000):
        out = []
        for s in (ref, ours):
            cp = empty_checkpoint()
            cp["id"] = "1f0-0001"
            cp["channel_values"] = {"v": thread[:3]}
            cp["channel_versions"] = {"v": "1"}
            c = s.put(cfg(thread), cp, {"source": "input"}, {"v": "1"})
            t = s.get_tuple(cfg(thread))
            out.append((c, t.config, t.checkpoint["channel_values"], [x.config for x in s.list(cfg(thread))]))
        assert out[0] == out[1], repr(thread[:5])
    # the documented limit: 2048 bytes of UTF-8 are taken, one byte more is refused naming threadId
    import ckptd

    longest = "é" * 1024
    cp = empty_checkpoint()
    assert ours.put(cfg(longest), cp, {}, {})["configurable"]["thread_id"] == longest
    assert ours.get_tuple(cfg(longest)).checkpoint["id"] == cp["id"]
    with pytest.raises(ckptd.InvalidParams, match="threadId: longer than 2048 bytes"):
        ours.put(cfg(longest + "x"), empty_checkpoint(), {}, {})
    with pytest.raises(ckptd.InvalidParams, match="threadId"):
        ours.get_tuple(cfg(longest + "x"))
    assert [t.checkpoint["id"] for t in ours.list(cfg(longest))] == [cp["id"]]


def test_metadata_nan_and_infinity_round_trip(ours: Any, ref: Any) -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    md = {"nan": float("nan"), "inf": float("inf"), "ninf": float("-inf"), "nested": {"l": [float("nan"), 1.5]},
          "looks_like_a_tag": {"$ckptd.float": "NaN"}, "also": {"$ckptd.object": {"a": 1}}}
    got = []
    for s in (ref, ours):
        cp = empty_checkpoint()
        c = s.put(cfg("t"), cp, dict(md), {})
        got.append(s.get_tuple(c).metadata)
    want, ours_md = got

    def norm(v: Any) -> Any:
        if isinstance(v, float) and math.isnan(v):
            return "NaN!"
        if isinstance(v, dict):
            return {k: norm(x) for k, x in v.items()}
        if isinstance(v, list):
            return [norm(x) for x in v]
        return v

    assert norm(ours_md) == norm(want)
    assert isinstance(ours_md["inf"], float) and ours_md["inf"] == math.inf and ours_md["ninf"] == -math.inf
    assert ours_md["looks_like_a_tag"] == {"$ckptd.float": "NaN"}


def test_get_tuple_with_checkpoint_id_hands_back_the_callers_config(ours: Any, ref: Any) -> None:
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph

    class S(TypedDict):
        n: int

    g = StateGraph(S)
    g.add_node("inc", lambda s: {"n": s["n"] + 1})
    g.add_edge(START, "inc")
    g.add_edge("inc", END)
    got = []
    for s in (ref, ours):
        graph = g.compile(checkpointer=s)
        graph.invoke({"n": 1}, {"configurable": {"thread_id": "t"}})
        first = list(graph.get_state_history({"configurable": {"thread_id": "t"}}))[-1]
        cid = first.config["configurable"]["checkpoint_id"]
        caller = {"configurable": {"thread_id": "t", "checkpoint_id": cid, "user": "ann"}}
        t = s.get_tuple(caller)
        snap = graph.get_state(caller)
        latest = s.get_tuple({"configurable": {"thread_id": "t"}}).config
        got.append((t.config == caller, t.config is caller, snap.config == caller, sorted(latest["configurable"])))
    assert got[0] == got[1] == (True, True, True, ["checkpoint_id", "checkpoint_ns", "thread_id"])


# --- retention (issue #24) -------------------------------------------------------------------------


def _chat_graph(saver: Any) -> Any:
    from typing import Annotated, TypedDict

    from langgraph.channels.delta import DeltaChannel
    from langgraph.graph import END, START, StateGraph

    def reducer(state: list, writes: list) -> list:
        out = list(state)
        for w in writes:
            out.extend(w)
        return out

    class S(TypedDict):
        messages: Annotated[list, DeltaChannel(reducer, snapshot_frequency=50)]
        turns: int

    def bot(s: S) -> Dict[str, Any]:
        return {"turns": s["turns"] + 1}

    g = StateGraph(S)
    g.add_node("bot", bot)
    g.add_edge(START, "bot")
    g.add_edge("bot", END)
    return g.compile(checkpointer=saver)


def _message(i: int) -> str:
    """Message i: 1 KB of text that does not compress (as chat messages mostly do not, at this size)."""
    return ("%06d " % i) + base64.b64encode(random.Random(i).randbytes(762)).decode()


def _chat(saver: Any, thread: str, turns: int) -> Any:
    graph = _chat_graph(saver)
    config = {"configurable": {"thread_id": thread}}
    for i in range(turns):
        graph.invoke({"messages": [_message(i)], "turns": i}, config)
    return graph


@pytest.mark.timeout(1500)
def test_keep_last_over_a_long_chat(db: str, backend: str, ckptd_bin: str, ref: Any, tmp_path: Path) -> None:
    """A 2,000-turn chat (each turn appends a 1 KB message) with keep_last=20: the history is the
    20 newest checkpoints plus what a delta replay of them needs, each gives the state SqliteSaver
    gives for the same checkpoint, and the SQLite file holds little more than what it keeps."""
    from ckptd.langgraph import CkptdSaver

    turns = 2000 if backend == "sqlite" else 400
    config = {"configurable": {"thread_id": "chat"}}
    with CkptdSaver(db=db, binary=ckptd_bin, retention={"keep_last": 20}, request_timeout=300) as saver:
        graph = _chat(saver, "chat", turns)
        ref_graph = _chat(ref, "chat", turns)
        hist = list(graph.get_state_history(config))
        assert sum(1 for _ in ref.list(config)) == 3 * turns  # the reference keeps everything
        ref_hist = list(ref_graph.get_state_history(config, limit=len(hist) + 10))
        # the 20 newest, then a contiguous chain back to the snapshot the oldest of them replays from
        assert [h.metadata["step"] for h in hist[:20]] == [h.metadata["step"] for h in ref_hist[:20]]
        assert 20 <= len(hist) <= 20 + 3 * 50, len(hist)
        for older, newer in zip(hist[1:], hist):
            assert newer.parent_config["configurable"]["checkpoint_id"] == older.config["configurable"]["checkpoint_id"]
        # ... and no further: the oldest kept holds the DeltaChannel's snapshot, none between it and the 20th does
        snapshot = ["messages" in saver.get_tuple(h.config).checkpoint["channel_values"] for h in hist]
        assert snapshot[-1] and not any(snapshot[19:-1]), snapshot
        by_step = {h.metadata["step"]: h for h in ref_hist}
        for h in hist:  # the state at each kept checkpoint (delta channels replayed) is the reference's
            r = by_step[h.metadata["step"]]
            assert h.values == r.values, h.metadata["step"]
            assert h.next == r.next
        # resuming (a new turn) from each of the 20 newest, every 10th checkpoint of the replay chain
        # behind them and the oldest kept gives the reference's state: each resume runs in a copy of
        # the thread (thread/copy keeps the checkpoint ids), since its puts would make retention drop
        # the other kept checkpoints of the thread it runs in
        for i in sorted(set(range(20)) | set(range(20, len(hist), 10)) | {len(hist) - 1}):
            h = hist[i]
            copy = "resume-%d" % i
            saver.copy_thread("chat", copy)
            r = by_step[h.metadata["step"]]
            got = graph.invoke({"messages": ["again %d" % i], "turns": 0},
                               {"configurable": {**h.config["configurable"], "thread_id": copy}})
            want = ref_graph.invoke({"messages": ["again %d" % i], "turns": 0}, r.config)
            assert got == want, h.metadata["step"]
            assert len(got["messages"]) > 1 and got["messages"][-1] == "again %d" % i
            saver.delete_thread(copy)
    if backend == "sqlite":
        kept = json.loads(subprocess.run([ckptd_bin, "threads", "--json", "--db", db], check=True, capture_output=True).stdout)
        stored = sum(t["storedBytes"] for t in kept["threads"])
        size = os.path.getsize(db)
        print("keep_last=20 over %d turns: %d checkpoints kept; file %d bytes, stored %d bytes (%.2fx)"
              % (turns, len(hist), size, stored, size / stored))
        # the channel values are chunked (~2 KiB chunks), the chunks each put adds packed
        # together into rows whose overflow pages SQLite fills: the file is ~1.45x what the
        # threads keep (indexes, LangGraph rows' pages, packs' bytes of chunks no longer listed)
        assert size <= 1.5 * stored, (size, stored)


def test_idle_thread_gone_after_the_next_sweep(db: str, ckptd_bin: str) -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    from ckptd.langgraph import CkptdSaver

    with CkptdSaver(db=db, binary=ckptd_bin, args=["--sweep-interval", "200ms"], retention={"idle_ttl_seconds": 1}) as s:
        for thread in ("idle", "busy"):
            s.put(cfg(thread), empty_checkpoint(), {}, {})
        deadline = time.time() + 30
        puts = 1
        while s.get_tuple(cfg("idle")) is not None:
            assert time.time() < deadline, "the idle thread was not deleted"
            s.put(cfg("busy"), empty_checkpoint(), {}, {})  # busy stays busy
            puts += 1
            time.sleep(0.05)
        assert len(list(s.list(cfg("busy")))) == puts
        idle = s.client.request("lg/configure", {"threadId": "busy"})[0]
        assert idle == {"threadId": "busy", "retention": {"keepLast": 0, "maxAgeSeconds": 0, "keepFirst": False, "idleTtlSeconds": 1},
                        "source": "thread"}


def test_retention_option_is_checked(lg: None, ckptd_bin: str, tmp_path: Path) -> None:
    from ckptd.langgraph import CkptdSaver

    for bad in ({"keep_lsat": 1}, {"keep_last": -1}, {"keep_last": 1.5}, {"keep_first": 1}, {"idle_ttl_seconds": "1d"}, [1]):
        with pytest.raises(ValueError):
            CkptdSaver(db=str(tmp_path / "x.db"), binary=ckptd_bin, retention=bad)  # type: ignore[arg-type]


@pytest.mark.timeout(600)
def test_retention_bench_runs(lg: None, ckptd_bin: str, tmp_path: Path) -> None:
    """bench/bench_langgraph_retention.py (the put p99 of busy threads while a sweep deletes an idle
    thread, and retention's put overhead), tiny: it runs, the sweep deletes the idle thread, and
    keep_last=20 keeps 20 (figures are the bench's business, not this test's)."""
    import sys

    out = tmp_path / "bench.json"
    script = Path(__file__).resolve().parent.parent / "bench" / "bench_langgraph_retention.py"
    p = subprocess.run([sys.executable, str(script), "--puts", "40", "--idle-checkpoints", "300", "--busy", "2", "--ttl", "2",
                        "--json", str(out)], env=dict(os.environ, CKPTD_PATH=ckptd_bin), capture_output=True, text=True, timeout=540)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "| p99 during / before |" in p.stdout and "| ratio |" in p.stdout, p.stdout
    r = json.loads(out.read_text())
    assert r["put_overhead"]["keep_last=20"]["kept"] == 20 and r["put_overhead"]["no retention"]["kept"] == 40
    assert r["sweep"]["before"]["puts"] > 0 and r["sweep"]["sweep_seconds"] >= 0
