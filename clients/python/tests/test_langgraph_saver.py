"""Edge cases of ckptd.langgraph.CkptdSaver beyond the conformance suite: what goes over the
wire, versions and forks, metadata, paging, write rules, delta-channel history (checked against
LangGraph's own reference walk), real graphs (sync, async, interrupts, DeltaChannel), prune.

Skips without LangGraph unless CKPTD_REQUIRE_LANGGRAPH=1 (then fails; see
test_langgraph_conformance.py for the install command).
"""


import asyncio
import datetime
import math
import operator
import os
import subprocess
import sys
import threading
import uuid
from typing import Any, Dict, Iterator, List

import pytest

from conftest import SRC
from test_langgraph_conformance import require


@pytest.fixture
def lg() -> None:
    require("langgraph.graph", "langgraph.checkpoint.base", "ckptd.langgraph")


@pytest.fixture
def saver(lg: None, ckptd_bin: str, tmp_path: Any) -> Iterator[Any]:
    from ckptd.langgraph import CkptdSaver

    s = CkptdSaver(db=str(tmp_path / "lg.db"), binary=ckptd_bin)
    try:
        yield s
    finally:
        s.close()


class Recorder:
    """Wraps client.request to record (method, params, attachment length)."""

    def __init__(self, client: Any) -> None:
        self.calls: List[Any] = []
        self._orig = client.request
        client.request = self

    def __call__(self, method: str, params: Any = None, attachment: Any = None, **kw: Any) -> Any:
        self.calls.append((method, params, 0 if attachment is None else len(attachment)))
        return self._orig(method, params, attachment, **kw)

    def methods(self) -> List[str]:
        return [c[0] for c in self.calls]


def cfg(thread: str, ns: str = "", cid: Any = None) -> Dict[str, Any]:
    c: Dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
    if cid:
        c["checkpoint_id"] = cid
    return {"configurable": c}


def ckpt(values: Dict[str, Any], versions: Dict[str, Any], cid: Any = None) -> Dict[str, Any]:
    from langgraph.checkpoint.base import empty_checkpoint

    cp = empty_checkpoint()
    if cid:
        cp["id"] = cid
    cp["channel_values"] = dict(values)
    cp["channel_versions"] = dict(versions)
    return cp


def md(step: int = 0, **kw: Any) -> Dict[str, Any]:
    return {"source": "loop", "step": step, "parents": {}, **kw}


# ---------------------------------------------------------------------------------------------
# Import hygiene


def test_import_ckptd_does_not_import_langgraph() -> None:
    code = "import ckptd, sys; bad = [m for m in sys.modules if m.startswith(('langgraph', 'langchain'))]; assert not bad, bad"
    env = dict(os.environ, PYTHONPATH=str(SRC))
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


# ---------------------------------------------------------------------------------------------
# Wire behaviour


def test_put_sends_only_new_versions_in_one_attachment(saver: Any) -> None:
    rec = Recorder(saver.client)
    c1 = saver.put(cfg("t"), ckpt({"a": "x" * 1000, "b": [1, 2]}, {"a": "1", "b": "1"}), md(0), {"a": "1", "b": "1"})
    c2 = saver.put(c1, ckpt({"a": "x" * 1000, "b": [1, 2, 3], "gone": None}, {"a": "1", "b": "2", "e": "1"}), md(1), {"b": "2", "e": "1"})
    (m1, p1, n1), (m2, p2, n2) = rec.calls
    assert (m1, m2) == ("lg/put", "lg/put")
    assert [b["channel"] for b in p1["blobs"]] == ["a", "b"]
    assert [(b["channel"], b["type"]) for b in p2["blobs"]] == [("b", "msgpack"), ("e", "empty")]
    assert p2["parentId"] == c1["configurable"]["checkpoint_id"]
    assert n2 < n1  # the unchanged 1 KB channel was not sent again
    for p, n in ((p1, n1), (p2, n2)):  # every segment lies in the attachment; no base64 anywhere
        for s in [p["checkpoint"], *p["blobs"]]:
            assert 0 <= s["offset"] and s["offset"] + s["length"] <= n
    t = saver.get_tuple(c2)
    assert t.checkpoint["channel_values"] == {"a": "x" * 1000, "b": [1, 2, 3]}  # "e" empty, "gone" not versioned
    assert t.parent_config["configurable"]["checkpoint_id"] == c1["configurable"]["checkpoint_id"]
    assert rec.methods()[-1] == "lg/get"
    assert len(rec.calls) == 3  # one round trip for the tuple with all its channels


def test_values_round_trip_through_serde(saver: Any) -> None:
    values = {
        "bytes": b"\x00\xffraw",
        "none": None,
        "tuple": (1, "a"),
        "set": {1, 2},
        "dt": datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc),
        "uuid": uuid.UUID(int=7),
        "nested": {"k": [1.5, {"x": "ü"}]},
        "big": "y" * (300 << 10),
    }
    versions = {k: "1" for k in values}
    c = saver.put(cfg("t"), ckpt(values, versions), md(), versions)
    # exactly what LangGraph's serde itself round-trips (it turns tuples into lists)
    expected = {k: saver.serde.loads_typed(saver.serde.dumps_typed(v)) for k, v in values.items()}
    assert expected["tuple"] == [1, "a"] and expected["bytes"] == b"\x00\xffraw"
    assert saver.get_tuple(c).checkpoint["channel_values"] == expected


def test_versions_are_fork_safe(saver: Any) -> None:
    v1 = saver.get_next_version(None, None)
    v2 = saver.get_next_version(v1, None)
    assert v1 < v2 and v1.startswith("0" * 31 + "1.") and v2.startswith("0" * 31 + "2.")
    assert saver.get_next_version(1, None).startswith("0" * 31 + "2.")
    # a fork from c1 writes a different value under "the same step" of the channel
    c1 = saver.put(cfg("t"), ckpt({"x": "base"}, {"x": v1}), md(0), {"x": v1})
    a = saver.put(c1, ckpt({"x": "branch-a"}, {"x": v2}), md(1), {"x": v2})
    v2b = saver.get_next_version(v1, None)
    assert v2b != v2
    b = saver.put(c1, ckpt({"x": "branch-b"}, {"x": v2b}), md(1), {"x": v2b})
    assert saver.get_tuple(a).checkpoint["channel_values"]["x"] == "branch-a"
    assert saver.get_tuple(b).checkpoint["channel_values"]["x"] == "branch-b"


def test_metadata_json_and_filters(saver: Any) -> None:
    when = datetime.datetime(2026, 5, 1, tzinfo=datetime.timezone.utc)
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "user": "ann", "langgraph_step": 3}, "metadata": {"tag": "x"}}
    c = saver.put(config, ckpt({}, {}), {**md(2), "when": when, "id": uuid.UUID(int=1), "score": 1.0, "bad": float("nan")}, {})
    t = saver.get_tuple(c)
    assert math.isnan(t.metadata["bad"])  # as SqliteSaver: the float it was (tagged on the wire)
    assert t.metadata["when"] == when.isoformat() and t.metadata["id"] == str(uuid.UUID(int=1))
    assert t.metadata["user"] == "ann" and t.metadata["tag"] == "x" and "langgraph_step" not in t.metadata
    assert [x.metadata["step"] for x in saver.list(None, filter={"score": 1})] == [2]  # numbers compare by value
    assert list(saver.list(None, filter={"user": "bob"})) == []
    assert len(list(saver.list(None, filter={"parents": {}}))) == 1


def test_list_scopes_before_limit(saver: Any) -> None:
    ids = {}
    for thread in ("A", "B"):
        for ns in ("", "child:1"):
            parent = cfg(thread, ns)
            for i in range(3):
                parent = saver.put(parent, ckpt({}, {}), md(i), {})
                ids[(thread, ns, i)] = parent["configurable"]["checkpoint_id"]
    assert len(list(saver.list(None))) == 12
    assert len(list(saver.list({"configurable": {"thread_id": "A"}}))) == 6  # every namespace
    assert len(list(saver.list(cfg("A")))) == 3  # checkpoint_ns "" = the root only
    assert len(list(saver.list({"configurable": {"checkpoint_ns": "child:1"}}))) == 6
    got = [t.checkpoint["id"] for t in saver.list(cfg("A"))]
    assert got == sorted(got, reverse=True) == [ids[("A", "", i)] for i in (2, 1, 0)]
    assert [t.checkpoint["id"] for t in saver.list(cfg("A"), before=cfg("A", "", ids[("A", "", 2)]), limit=1)] == [ids[("A", "", 1)]]
    assert [t.checkpoint["id"] for t in saver.list(cfg("A", "", ids[("A", "", 1)]))] == [ids[("A", "", 1)]]
    assert list(saver.list(cfg("A"), limit=0)) == []
    # everything sorted by id across threads
    every = [t.checkpoint["id"] for t in saver.list(None)]
    assert every == sorted(every, reverse=True)


def test_list_pages_large_results(saver: Any) -> None:
    """More than one 16 MiB response: the saver follows the daemon's cursor."""
    parent = cfg("big")
    blob = os.urandom(4 << 20)
    v = None
    for i in range(6):
        v = saver.get_next_version(v, None)
        parent = saver.put(parent, ckpt({"blob": blob + bytes([i])}, {"blob": v}), md(i), {"blob": v})
    rec = Recorder(saver.client)
    got = list(saver.list(cfg("big")))
    assert [t.metadata["step"] for t in got] == [5, 4, 3, 2, 1, 0]
    assert got[2].checkpoint["channel_values"]["blob"] == blob + bytes([3])
    assert rec.methods().count("lg/list") >= 2
    rec.calls.clear()
    assert len(list(saver.list(cfg("big"), limit=2))) == 2
    assert rec.methods() == ["lg/list"]


def test_put_writes_rules_and_order(saver: Any) -> None:
    from langgraph.checkpoint.base import WRITES_IDX_MAP
    from langgraph.checkpoint.serde.types import ERROR, INTERRUPT

    c = saver.put(cfg("t"), ckpt({}, {}), md(), {})
    saver.put_writes(c, [("a", 1), ("b", 2)], "task-z", "~pull, 2")
    saver.put_writes(c, [("a", "again")], "task-z", "~pull, 2")  # same (task, idx): ignored
    saver.put_writes(c, [(ERROR, "e1")], "task-z", "~pull, 2")
    saver.put_writes(c, [(ERROR, "e2"), (INTERRUPT, {"q": 1})], "task-z", "~pull, 2")  # special: replaced
    saver.put_writes(c, [("a", "first")], "task-a", "~pull, 1")
    saver.put_writes(c, [("a", "input")], "zzz")  # no task path sorts first
    writes = saver.get_tuple(c).pending_writes
    assert writes == [
        ("zzz", "a", "input"),
        ("task-a", "a", "first"),
        ("task-z", INTERRUPT, {"q": 1}),
        ("task-z", ERROR, "e2"),
        ("task-z", "a", 1),
        ("task-z", "b", 2),
    ]
    assert WRITES_IDX_MAP[INTERRUPT] < WRITES_IDX_MAP[ERROR] < 0


def test_missing_thread_id_and_unknown(saver: Any) -> None:
    with pytest.raises(ValueError, match="thread_id"):
        saver.get_tuple({"configurable": {}})
    assert saver.get_tuple(cfg("nope")) is None
    assert saver.get_tuple(cfg("nope", cid="x")) is None


def test_threads_copy_prune_delete_runs(saver: Any) -> None:
    parent = cfg("src")
    for i in range(3):
        v = "%032d.0" % (i + 1)
        parent = saver.put(parent, ckpt({"n": i}, {"n": v}), md(i, run_id="run-%d" % (i % 2)), {"n": v})
    saver.put_writes(parent, [("n", 99)], "t")
    saver.copy_thread("src", "dst")
    assert [t.checkpoint for t in saver.list(cfg("dst"))] == [t.checkpoint for t in saver.list(cfg("src"))]
    assert saver.get_tuple(cfg("dst")).pending_writes == [("t", "n", 99)]
    saver.delete_for_runs(["run-0"])
    assert [t.metadata["step"] for t in saver.list(None)] == [1, 1]
    saver.prune(["src"], strategy="keep_latest")
    saver.delete_thread("dst")
    assert [t.config["configurable"]["thread_id"] for t in saver.list(None)] == ["src"]
    saver.prune(["src"], strategy="delete")
    assert list(saver.list(None)) == []


def test_client_passthrough_and_close(lg: None, ckptd_bin: str, tmp_path: Any) -> None:
    import ckptd
    from ckptd.langgraph import CkptdSaver

    with ckptd.Client(db=str(tmp_path / "x.db"), binary=ckptd_bin) as client:
        s = CkptdSaver(client=client)
        s.put(cfg("t"), ckpt({}, {}), md(), {})
        s.close()  # not the saver's client: stays open
        assert not client.closed
        with pytest.raises(ValueError):
            CkptdSaver(client=client, db="other.db")
    s = CkptdSaver(db=str(tmp_path / "y.db"), binary=ckptd_bin)
    with s:
        s.put(cfg("t"), ckpt({}, {}), md(), {})
    s.close()  # idempotent
    assert s.client.closed


def test_concurrent_threads_and_async(saver: Any) -> None:
    errors: List[BaseException] = []

    def worker(n: int) -> None:
        try:
            parent = cfg("w%d" % n)
            for i in range(20):
                parent = saver.put(parent, ckpt({"i": i}, {"i": str(i + 1)}), md(i), {"i": str(i + 1)})
                saver.put_writes(parent, [("i", i)], "task")
            assert saver.get_tuple(cfg("w%d" % n)).checkpoint["channel_values"] == {"i": 19}
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    ts = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors

    async def amain() -> None:
        async def one(n: int) -> int:
            parent = cfg("a%d" % n)
            for i in range(10):
                parent = await saver.aput(parent, ckpt({"i": i}, {"i": str(i + 1)}), md(i), {"i": str(i + 1)})
            await saver.aput_writes(parent, [("x", n)], "task")
            return len([t async for t in saver.alist(cfg("a%d" % n), limit=5)])

        assert await asyncio.gather(*(one(n) for n in range(8))) == [5] * 8
        assert (await saver.aget_tuple(cfg("a3"))).pending_writes == [("task", "x", 3)]
        await saver.acopy_thread("a1", "a1-copy")
        await saver.aprune(["a1-copy"])
        await saver.adelete_for_runs([])
        await saver.adelete_thread("a2")
        assert [t async for t in saver.alist(cfg("a1-copy"))][0].checkpoint["channel_values"] == {"i": 9}
        assert await saver.aget_tuple(cfg("a2")) is None

    asyncio.run(amain())


# ---------------------------------------------------------------------------------------------
# Delta-channel history: the daemon's one-round-trip walk equals LangGraph's reference walk


def _chain(saver: Any, thread: str, n: int, snaps: List[int], channel: str = "ch", value: Any = None) -> List[Any]:
    from langgraph.checkpoint.serde.types import _DeltaSnapshot

    value = value or (lambda i: i)
    out, parent = [], cfg(thread)
    for i in range(n):
        values, versions = {}, {}
        if i in snaps:
            values[channel] = _DeltaSnapshot(value(i))
            versions[channel] = i + 1
        parent = saver.put(parent, ckpt(values, versions), md(i), dict(versions))
        out.append(parent)
        if i not in snaps:
            saver.put_writes(parent, [(channel, value(i))], str(uuid.uuid4()))
    return out


def _reference(saver: Any, config: Any, channels: List[str]) -> Any:
    from langgraph.checkpoint.base import BaseCheckpointSaver

    return BaseCheckpointSaver.get_delta_channel_history(saver, config=config, channels=channels)


def _norm(h: Any) -> Any:
    from langgraph.checkpoint.serde.types import _DeltaSnapshot

    def v(x: Any) -> Any:
        return ("snap", x.value) if isinstance(x, _DeltaSnapshot) else x

    return {ch: {"writes": [(w[1], v(w[2])) for w in e["writes"]], **({"seed": v(e["seed"])} if "seed" in e else {})} for ch, e in h.items()}


@pytest.mark.parametrize(
    "n,snaps,expect_writes,expect_seed",
    [
        (5, [0], [1, 2, 3], ("snap", 0)),
        (6, [0, 3], [4], ("snap", 3)),
        (4, [], [0, 1, 2], None),
        (4, [3], [0, 1, 2], None),  # a snapshot at the target itself is not used: the walk starts at its parent
    ],
)
def test_delta_history_matches_reference(saver: Any, n: int, snaps: List[int], expect_writes: List[int], expect_seed: Any) -> None:
    chain = _chain(saver, "t-%d-%s" % (n, snaps), n, snaps)
    head = chain[-1]
    saver.put_writes(head, [("ch", "pending-at-head")], "x")  # the target's own writes are excluded
    rec = Recorder(saver.client)
    got = saver.get_delta_channel_history(config=head, channels=["ch", "other"])
    assert rec.methods() == ["lg/channelHistory"]  # one round trip
    ref = _reference(saver, head, ["ch", "other"])
    assert _norm(got) == _norm(ref)
    assert [w[2] for w in got["ch"]["writes"]] == expect_writes
    assert _norm(got)["ch"].get("seed") == expect_seed
    assert got["other"] == {"writes": []}
    assert saver.get_delta_channel_history(config=head, channels=[]) == {}


def test_delta_history_ordering_and_plain_seed(saver: Any) -> None:
    # plain (pre-delta) value as seed; writes stored at the seed checkpoint are replayed;
    # parallel writes replay in task_path order, pathless ones first
    c0 = saver.put(cfg("p"), ckpt({"ch": [10]}, {"ch": 1}), md(0), {"ch": 1})
    saver.put_writes(c0, [("ch", "older-than-seed")], "t0")
    c1 = saver.put(c0, ckpt({"ch": [10, 20]}, {"ch": 2}), md(1), {"ch": 2})
    saver.put_writes(c1, [("ch", "second")], "00000000", "~pull, 02")
    saver.put_writes(c1, [("ch", "first")], "ffffffff", "~pull, 01")
    saver.put_writes(c1, [("ch", "input")], "zzzzzzzz")
    c2 = saver.put(c1, ckpt({}, {}), md(2), {})
    saver.put_writes(c2, [("ch", "after-seed")], "t2")
    c3 = saver.put(c2, ckpt({}, {}), md(3), {})
    got = saver.get_delta_channel_history(config=c3, channels=["ch"])
    assert got["ch"]["seed"] == [10, 20]
    assert [w[2] for w in got["ch"]["writes"]] == ["input", "first", "second", "after-seed"]
    assert _norm(got) == _norm(_reference(saver, c3, ["ch"]))


def test_delta_history_multi_channel_and_async(saver: Any) -> None:
    from langgraph.checkpoint.serde.types import _DeltaSnapshot

    parent = cfg("m")
    for step in range(5):
        values, versions = {}, {}
        if step == 1:
            values["a"], versions["a"] = _DeltaSnapshot("snap_a"), 2
        if step == 3:
            values["b"], versions["b"] = _DeltaSnapshot("snap_b"), 4
        parent = saver.put(parent, ckpt(values, versions), md(step), versions)
        saver.put_writes(parent, [("a", step), ("b", step)], str(uuid.uuid4()))
    got = asyncio.run(saver.aget_delta_channel_history(config=parent, channels=["a", "b"]))
    assert [w[2] for w in got["a"]["writes"]] == [1, 2, 3]
    assert [w[2] for w in got["b"]["writes"]] == [3]
    assert got["a"]["seed"].value == "snap_a" and got["b"]["seed"].value == "snap_b"
    assert _norm(got) == _norm(_reference(saver, parent, ["a", "b"]))


def test_delta_reconstruction_survives_prune(saver: Any) -> None:
    chain = _chain(saver, "r", 6, [1], channel="msgs", value=lambda i: [i])
    head = chain[-1]

    def rebuild() -> List[int]:
        h = saver.get_delta_channel_history(config=head, channels=["msgs"])
        base = list(h["msgs"]["seed"].value) if "seed" in h["msgs"] else []
        for _, _, v in h["msgs"]["writes"]:
            base += v
        return base

    assert rebuild() == [1, 2, 3, 4]
    saver.prune(["r"], strategy="keep_latest")  # keeps head + its ancestors back to the snapshot
    assert rebuild() == [1, 2, 3, 4]
    assert len(list(saver.list(cfg("r")))) == 5  # step 0 was not needed


# ---------------------------------------------------------------------------------------------
# Real graphs


def _counter_graph(saver: Any) -> Any:
    from typing import Annotated, TypedDict

    from langgraph.graph import END, START, StateGraph

    class S(TypedDict):
        log: Annotated[list, operator.add]
        n: int

    def step(state: S) -> Dict[str, Any]:
        return {"log": ["step %d" % state["n"]], "n": state["n"] + 1}

    def route(state: S) -> str:
        return END if state["n"] >= 5 else "step"

    b = StateGraph(S)
    b.add_node("step", step)
    b.add_edge(START, "step")
    b.add_conditional_edges("step", route)
    return b.compile(checkpointer=saver)


def test_graph_runs_resumes_and_lists_history(lg: None, ckptd_bin: str, tmp_path: Any) -> None:
    from ckptd.langgraph import CkptdSaver

    db = str(tmp_path / "g.db")
    config = {"configurable": {"thread_id": "g"}}
    with CkptdSaver(db=db, binary=ckptd_bin) as saver:
        out = _counter_graph(saver).invoke({"log": [], "n": 0}, config)
        assert out["n"] == 5 and len(out["log"]) == 5
    with CkptdSaver(db=db, binary=ckptd_bin) as saver:  # a new daemon on the same file
        g = _counter_graph(saver)
        state = g.get_state(config)
        assert state.values["n"] == 5 and state.values["log"][-1] == "step 4"
        history = list(g.get_state_history(config))
        assert [h.values.get("n") for h in history][:3] == [5, 4, 3]
        # time travel: fork from an earlier checkpoint
        earlier = next(h for h in history if h.values.get("n") == 2)
        forked = g.invoke(None, earlier.config)
        assert forked["n"] == 5 and len(forked["log"]) == 5
        assert g.get_state(config).values["n"] == 5


def test_graph_interrupt_and_resume_async(lg: None, ckptd_bin: str, tmp_path: Any) -> None:
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Command, interrupt

    from ckptd.langgraph import CkptdSaver

    class S(TypedDict):
        question: str
        answer: str

    def ask(state: S) -> Dict[str, Any]:
        return {"answer": interrupt({"q": state["question"]})}

    b = StateGraph(S)
    b.add_node("ask", ask)
    b.add_edge(START, "ask")
    b.add_edge("ask", END)

    async def run() -> None:
        async with CkptdSaver(db=str(tmp_path / "i.db"), binary=ckptd_bin) as saver:
            g = b.compile(checkpointer=saver)
            config = {"configurable": {"thread_id": "human"}}
            first = await g.ainvoke({"question": "why?", "answer": ""}, config)
            assert first["__interrupt__"][0].value == {"q": "why?"}
            state = await g.aget_state(config)
            assert state.next == ("ask",)
            final = await g.ainvoke(Command(resume="because"), config)
            assert final["answer"] == "because"

    asyncio.run(run())


def test_graph_with_delta_channel(lg: None, ckptd_bin: str, tmp_path: Any) -> None:
    pytest.importorskip("langgraph.channels.delta")
    from typing import Annotated, TypedDict

    from langgraph.channels.delta import DeltaChannel
    from langgraph.graph import END, START, StateGraph

    from ckptd.langgraph import CkptdSaver

    def reducer(state: list, writes: list) -> list:
        out = list(state)
        for w in writes:
            out.extend(w)
        return out

    class S(TypedDict):
        items: Annotated[list, DeltaChannel(reducer, snapshot_frequency=3)]
        n: int

    def step(state: S) -> Dict[str, Any]:
        return {"items": [state["n"]], "n": state["n"] + 1}

    b = StateGraph(S)
    b.add_node("step", step)
    b.add_edge(START, "step")
    b.add_conditional_edges("step", lambda s: END if s["n"] >= 8 else "step")
    db = str(tmp_path / "d.db")
    config = {"configurable": {"thread_id": "delta"}}
    with CkptdSaver(db=db, binary=ckptd_bin) as saver:
        assert b.compile(checkpointer=saver).invoke({"items": [], "n": 0}, config)["items"] == list(range(8))
    with CkptdSaver(db=db, binary=ckptd_bin) as saver:
        g = b.compile(checkpointer=saver)
        assert g.get_state(config).values["items"] == list(range(8))
        saver.prune(["delta"])
        assert g.get_state(config).values["items"] == list(range(8))
        assert g.invoke({"items": [100], "n": 7}, config)["items"] == list(range(8)) + [100, 7]


# ---------------------------------------------------------------------------------------------
# examples/langgraph_resume.py: run 1 SIGKILLs itself inside a node, run 2 resumes


def test_example_crash_then_resume(lg: None, ckptd_bin: str, tmp_path: Any) -> None:
    import signal

    from conftest import CLIENT_ROOT, child_env

    example = CLIENT_ROOT / "examples" / "langgraph_resume.py"
    db = str(tmp_path / "example.db")

    def run() -> Any:
        return subprocess.run([sys.executable, str(example), "--db", db, "--binary", ckptd_bin],
                              capture_output=True, text=True, timeout=120, env=child_env())

    first = run()
    assert first.returncode == -signal.SIGKILL, (first.returncode, first.stdout, first.stderr)
    assert "SIGKILL to my own process" in first.stdout and "finished" not in first.stdout
    second = run()
    assert second.returncode == 0, (second.stdout, second.stderr)
    out = second.stdout
    assert "already done: research, outline, draft; next: review" in out, out
    assert "finished: done=research,outline,draft,review,publish" in out, out
    # research/outline/draft ran once (in run 1); review ran twice (crashed, then resumed)
    assert "node executions across runs: research,outline,draft,review,review,publish" in out, out
    third = run()
    assert third.returncode == 0 and "already finished" in third.stdout, third.stdout


# --- value deltas (docs/protocol.md, lg/put "Value deltas") ------------------------------------


def test_value_deltas_for_a_growing_channel(saver: Any) -> None:
    """A msgpack list that grows (its count in the header changes, the new item at the end) goes
    as a delta of a few bytes with the base's body copied; every version reads back whole."""
    rec = Recorder(saver.client)
    config = cfg("grow")
    messages: List[Dict[str, Any]] = []
    ver = None
    kept = []
    for i in range(40):
        messages.append({"role": "user" if i % 2 else "ai", "content": "message %d %s" % (i, os.urandom(200).hex())})
        ver = saver.get_next_version(ver, None)
        config = saver.put(config, ckpt({"messages": list(messages), "step": i}, {"messages": ver, "step": ver}),
                           {"step": i}, {"messages": ver, "step": ver})
        kept.append((config, list(messages)))
    for c, want in kept:
        assert saver.get_tuple(c).checkpoint["channel_values"]["messages"] == want
    puts = [c for c in rec.calls if c[0] == "lg/put"]
    deltas = [c for c in puts if any("delta" in b for b in c[1]["blobs"])]
    assert len(deltas) >= 28, len(deltas)  # from ~4 KiB on, but the put where the count outgrows a fixarray
    assert all(any(b.get("delta", {}).get("copies") for b in c[1]["blobs"]) for c in deltas), "msgpack: the count changed"
    assert max(c[2] for c in deltas) < 2048, [c[2] for c in deltas]


def test_value_delta_base_gone_is_sent_whole(saver: Any) -> None:
    """A base the daemon does not have (-32001 naming blobs[i].delta.baseVersion): the put goes
    again with every value whole."""
    from ckptd.langgraph import _value_delta

    rec = Recorder(saver.client)
    big = ["item %d %s" % (i, os.urandom(40).hex()) for i in range(80)]
    typ, data = saver.serde.dumps_typed(big)
    saver._values.remember('["gone", "messages"]', "", '"00000000000000000000000000000009.1"', data)
    ver = saver.get_next_version(None, None)
    config = saver.put(cfg("gone"), ckpt({"messages": big + ["new"]}, {"messages": ver}), {}, {"messages": ver})
    puts = [c for c in rec.calls if c[0] == "lg/put"]
    assert [sum(1 for b in c[1]["blobs"] if "delta" in b) for c in puts] == [1, 0]
    assert saver.get_tuple(config).checkpoint["channel_values"]["messages"] == big + ["new"]
    body = os.urandom(20000)
    d = _value_delta(b"\xdc\x00\x10" + body, b"\xdc\x00\x11" + body + b"appended")
    assert d is not None and (d[0], d[1], d[3]) == (2, 0, [[1, 3, len(body)]]) and d[2] == b"\x11appended"
    assert _value_delta(b"\xdc\x00\x10" + body, os.urandom(len(body))) is None
