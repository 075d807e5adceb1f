"""Every method and every error class against the real daemon ($CKPTD_PATH)."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import shutil
import sqlite3
import subprocess
import threading
import time
from typing import Any, Dict, List

import pytest

import ckptd
from ckptd.errors import error_from_response
from ckptd.framing import encode_message, read_message


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def test_initialize_result(client: ckptd.Client, db_path: str) -> None:
    info = client.server_info
    assert info["serverName"] == "ckptd" and info["protocolVersion"] == 1
    assert os.path.realpath(info["dbPath"]) == os.path.realpath(db_path)
    caps = client.capabilities
    assert caps["attachments"] is True and "bytes" in caps["stateTypes"] and caps["maxStateBytes"] > 0
    again = client.initialize(client_name="again")
    assert again["serverName"] == "ckptd"


def test_save_and_load_json_state(client: ckptd.Client) -> None:
    state = {"messages": [{"role": "user", "content": "naïve ☃ 𝄞"}], "n": 1.5, "ok": True, "none": None}
    r = client.save("wf", state, step=2, step_name="summarize", phase="completed", metadata={"source": "loop"},
                    completed_tasks=["a"], pending_tasks=[{"id": "b"}], workflow_hash="sha256:x")
    assert r["seq"] == 1 and r["deduplicated"] is False
    encoded = ckptd._common.encode_state(state)[0]
    assert r["sha256"] == sha(encoded) and r["sizeBytes"] == len(encoded)
    cp = client.load(checkpoint_id=r["checkpointId"])
    assert isinstance(cp, ckptd.Checkpoint) and cp.state == state and cp.state_bytes == encoded
    assert cp["stateType"] == "json" and cp.step == 2 and cp.step_name == "summarize" and cp.phase == "completed"
    assert cp.metadata == {"source": "loop"} and cp.completed_tasks == ["a"] and cp.pending_tasks == [{"id": "b"}]
    assert cp["workflowHash"] == "sha256:x" and cp["sha256"] == r["sha256"]
    assert "state" not in cp and "stateBase64" not in cp  # the state came as the attachment
    latest = client.load(workflow_id="wf")
    assert latest.checkpoint_id == r["checkpointId"] and latest.state == state


@pytest.mark.parametrize("make", [bytes, bytearray, memoryview])
def test_bytes_states_come_back_as_bytes(client: ckptd.Client, make: Any) -> None:
    raw = os.urandom(1000) + b"\x00\r\n\r\nContent-Length: 5\r\n\r\n"
    r = client.save("wf-bytes", make(raw))
    assert r["sha256"] == sha(raw)
    cp = client.load(checkpoint_id=r["checkpointId"])
    assert cp.state_type == "bytes" and cp.state == raw and isinstance(cp.state, bytes)


def test_pre_encoded_json_bytes(client: ckptd.Client) -> None:
    r = client.save("wf", b'{"already":"json"}', state_type="json")
    assert client.load(checkpoint_id=r["checkpointId"]).state == {"already": "json"}


def test_no_state(client: ckptd.Client) -> None:
    r = client.save("wf-none", step=0)
    cp = client.load(checkpoint_id=r["checkpointId"])
    assert cp.state_type == "none" and cp.state is None


@pytest.mark.parametrize("size", [100 * 1024, 5 * 1024 * 1024])
def test_large_states(client: ckptd.Client, size: int) -> None:
    raw = os.urandom(size)
    big = {"blob": base64.b64encode(raw[: size // 2]).decode()}
    r1 = client.save("wf-big", raw)
    r2 = client.save("wf-big", big)
    assert client.load(checkpoint_id=r1["checkpointId"]).state == raw
    assert client.load(checkpoint_id=r2["checkpointId"]).state == big


def test_idempotent_save_and_dedup(client: ckptd.Client) -> None:
    r1 = client.save("wf", {"x": 1}, checkpoint_id="fixed-1")
    r2 = client.save("wf", {"x": 1}, checkpoint_id="fixed-1")
    assert r1["seq"] == r2["seq"] and r1["checkpointId"] == r2["checkpointId"] == "fixed-1"
    r3 = client.save("wf", {"x": 1})
    assert r3["deduplicated"] is True and r3["seq"] == r1["seq"] + 1


def test_list_filters(client: ckptd.Client) -> None:
    ids = [client.save("wf-l", {"i": i}, step=i, phase="completed" if i % 2 else "before_step",
                       metadata={"parity": i % 2})["checkpointId"] for i in range(5)]
    client.save("other", {"i": 0})
    got = client.list("wf-l")
    assert [c["checkpointId"] for c in got] == ids[::-1]
    assert "state" not in got[0] and "completedTasks" not in got[0]
    assert [c["step"] for c in client.list("wf-l", phase="completed")] == [3, 1]
    assert [c["step"] for c in client.list("wf-l", metadata={"parity": 0})] == [4, 2, 0]
    assert [c["step"] for c in client.list("wf-l", before=ids[2])] == [1, 0]
    assert len(client.list("wf-l", limit=2)) == 2
    assert len(client.list()) == 6
    assert client.list("wf-l", namespace="elsewhere") == []


def test_namespaces(client: ckptd.Client) -> None:
    client.save("wf-ns", {"ns": "a"}, namespace="a")
    client.save("wf-ns", {"ns": "root"})
    assert client.load(workflow_id="wf-ns", namespace="a").state == {"ns": "a"}
    assert client.load(workflow_id="wf-ns").state == {"ns": "root"}


def test_delete(client: ckptd.Client) -> None:
    a = client.save("wf-d", {"i": 1})["checkpointId"]
    client.save("wf-d", {"i": 2})
    assert client.delete(checkpoint_id=a) == {"deleted": 1}
    assert client.delete(checkpoint_id="unknown") == {"deleted": 0}
    assert client.delete(workflow_id="wf-d")["deleted"] == 1
    with pytest.raises(ckptd.CheckpointNotFound):
        client.load(workflow_id="wf-d")


def test_prune(client: ckptd.Client) -> None:
    for i in range(6):
        client.save("wf-p", {"i": i})
    dry = client.prune("wf-p", keep_last=2, dry_run=True)
    assert dry["deleted"] == 4 and dry["dryRun"] is True
    assert len(client.list("wf-p")) == 6
    res = client.prune("wf-p", keep_last=2)
    assert res["deleted"] == 4 and res["dryRun"] is False and "freedBytes" in res
    assert [c["seq"] for c in client.list("wf-p")] == [6, 5]
    assert client.prune(older_than_seconds=3600)["deleted"] == 0


def test_configure_retention(client: ckptd.Client) -> None:
    r = client.configure("wf-c", keep_last=3)
    assert r["workflowId"] == "wf-c" and r["retention"]["keepLast"] == 3
    assert set(r["retention"]) >= {"keepLast", "maxAgeSeconds", "keepFirst", "idleTtlSeconds"}
    for i in range(5):
        client.save("wf-c", {"i": i})
    assert [c["seq"] for c in client.list("wf-c")] == [5, 4, 3]
    r = client.configure("wf-c", retention={"keepLast": 0}, keep_first=True)
    assert r["retention"]["keepLast"] == 0 and r["retention"]["keepFirst"] is True


def test_workflows_come_in_pages(client: ckptd.Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """``for wf in client.workflows()`` asks for one page at a time (issue #22); the result still
    reads as the list earlier versions returned; ``workflow_page`` is one call with its cursor."""
    for i in range(25):
        client.save("wf-%02d" % i, {"i": i})
    calls: List[Dict[str, Any]] = []
    real = client._request

    def counting(method: str, params: Any, *args: Any, **kwargs: Any) -> Any:
        if method == "workflow/list":
            calls.append(dict(params))
        return real(method, params, *args, **kwargs)

    monkeypatch.setattr(client, "_request", counting)
    listing = client.workflows(page_size=10)
    assert calls == []  # nothing asked before iterating
    it = iter(listing)
    first = next(it)
    assert first["workflowId"] == "wf-24" and len(calls) == 1 and calls[0] == {"limit": 10}
    rest = list(it)
    assert [w["workflowId"] for w in [first] + rest] == ["wf-%02d" % i for i in reversed(range(25))]
    assert len(calls) == 3 and calls[1]["cursor"] and calls[2]["cursor"] != calls[1]["cursor"]
    # list-like, as before: len, indexing, ==, bool (every page, once)
    calls.clear()
    by_id = client.workflows(order="id", page_size=7)
    assert len(by_id) == 25 and by_id[0]["workflowId"] == "wf-00" and by_id[-1]["workflowId"] == "wf-24"
    assert by_id == list(by_id) and bool(by_id) and len(calls) == 4
    assert [w["workflowId"] for w in by_id] == ["wf-%02d" % i for i in range(25)]
    assert len(calls) == 4, "kept once fetched"
    page = client.workflow_page(limit=20)
    assert len(page["workflows"]) == 20 and page["cursor"]
    last = client.workflow_page(limit=20, cursor=page["cursor"])
    assert len(last["workflows"]) == 5 and "cursor" not in last
    with pytest.raises(ckptd.InvalidParams) as ei:
        client.workflow_page(cursor="nope")
    assert ei.value.data["field"] == "cursor"
    with pytest.raises(ValueError):
        client.workflows(order="name")
    with pytest.raises(ValueError):
        client.workflow_page(limit=0)


def test_async_workflows_come_in_pages(ckptd_bin: str, db_path: str) -> None:
    import asyncio

    async def main() -> None:
        async with ckptd.AsyncClient(db=db_path, binary=ckptd_bin, args=["--keep-last", "0"]) as c:
            for i in range(12):
                await c.save("a-%02d" % i, i)
            got = [w["workflowId"] async for w in c.workflows(order="id", page_size=5)]
            assert got == ["a-%02d" % i for i in range(12)]
            every = await c.workflows(page_size=5)
            assert isinstance(every, list) and [w["workflowId"] for w in every] == list(reversed(got))
            pages = [len(p) async for p in c.workflows(page_size=5).pages()]
            assert pages == [5, 5, 2]

    asyncio.run(main())


def test_complete_and_workflows(client: ckptd.Client) -> None:
    client.save("wf-a", {"a": 1})
    client.save("wf-b", {"b": 1})
    wfs = {w["workflowId"]: w for w in client.workflows()}
    assert wfs["wf-a"]["resumable"] is True and wfs["wf-a"]["count"] == 1 and wfs["wf-a"]["latest"]["seq"] == 1
    assert client.complete("wf-a", preserve=True) == {"workflowId": "wf-a", "deleted": 0}
    assert {w["workflowId"] for w in client.workflows(resumable_only=True)} == {"wf-b"}
    with pytest.raises(ckptd.ResumeValidationError) as ei:
        client.resume_plan("wf-a")
    assert [p["code"] for p in ei.value.problems] == ["workflow_completed"]
    assert client.complete("wf-b")["deleted"] == 1
    with pytest.raises(ckptd.CheckpointNotFound):
        client.load(workflow_id="wf-b")


def test_put_writes(client: ckptd.Client) -> None:
    cid = client.save("wf-w", {"s": 1})["checkpointId"]
    r = client.put_writes("wf-w", cid, "task-1", [("messages", {"m": 1}), ("raw", b"\x00\xff"), {"channel": "x", "value": 2, "idx": -1, "type": "t"}])
    assert r == {"stored": 3}
    assert client.put_writes("wf-w", cid, "task-1", [("messages", {"m": "again"})]) == {"stored": 0}
    writes = client.load(checkpoint_id=cid).pending_writes
    by_idx = {w["idx"]: w for w in writes}
    assert by_idx[0]["value"] == {"m": 1} and by_idx[0]["channel"] == "messages"
    assert base64.b64decode(by_idx[1]["valueBase64"]) == b"\x00\xff"
    assert by_idx[-1]["type"] == "t"


def test_resume_plan(client: ckptd.Client) -> None:
    client.save("wf-r", {"s": 0}, step=0, phase="completed", workflow_hash="h1")
    plan = client.resume_plan("wf-r", workflow_hash="h1")
    assert isinstance(plan, ckptd.ResumePlan) and plan.start_step == 1 and plan.retry is False
    assert plan.state == {"s": 0} and plan.warnings == []
    client.save("wf-r", {"s": 1}, step=1, phase="before_step", workflow_hash="h1")
    plan = client.resume_plan("wf-r")
    assert (plan.start_step, plan.retry, plan.state) == (1, True, {"s": 1})
    client.save("wf-r", b"bytes-state", step=1, phase="failed", error={"message": "boom", "retryable": True})
    plan = client.resume_plan("wf-r")
    assert (plan.start_step, plan.retry, plan.state) == (1, True, b"bytes-state")


def test_stats(client: ckptd.Client) -> None:
    client.save("wf-s", {"a": 1})
    client.load(workflow_id="wf-s")
    st = client.stats()
    assert st["counters"]["saves"] >= 1 and st["counters"]["loads"] >= 1
    assert st["latency"]["save"]["count"] >= 1 and "p95Ms" in st["latency"]["save"]
    assert st["db"]["checkpoints"] >= 1


def test_notifications_saved_and_pruned(ckptd_bin: str, db_path: str) -> None:
    got: List[Any] = []
    done = threading.Event()

    def on_note(method: str, params: Dict[str, Any]) -> None:
        got.append((method, params))
        if method == "checkpoint/pruned":
            done.set()

    with ckptd.Client(db=db_path, binary=ckptd_bin, events=["checkpoint/saved", "checkpoint/pruned"],
                      on_notification=on_note) as c:
        c.configure("wf-n", keep_last=2)
        for i in range(3):
            c.save("wf-n", {"i": i}, step=i, phase="completed")
        assert done.wait(5), got
    saved = [p for m, p in got if m == "checkpoint/saved"]
    assert [(p["workflowId"], p["seq"], p["step"], p["phase"]) for p in saved] == [
        ("wf-n", 1, 0, "completed"), ("wf-n", 2, 1, "completed"), ("wf-n", 3, 2, "completed")]
    pruned = [p for m, p in got if m == "checkpoint/pruned"]
    assert pruned[0]["reason"] == "retention" and pruned[0]["checkpointIds"] == [saved[0]["checkpointId"]]


def test_no_notifications_without_opt_in(client: ckptd.Client) -> None:
    got: List[Any] = []
    client.add_notification_handler(lambda m, p: got.append(m))
    client.save("wf", {"a": 1})
    client.stats()
    time.sleep(0.1)
    assert got == []


# --- errors -----------------------------------------------------------------------------------


def test_invalid_params(client: ckptd.Client) -> None:
    with pytest.raises(ckptd.InvalidParams) as ei:
        client.save("", {"a": 1})
    assert ei.value.code == -32602 and ei.value.data["field"] == "workflowId"
    assert "workflowId" in ei.value.message
    with pytest.raises(ckptd.InvalidParams):
        client.save("wf", {"a": 1}, phase="sideways")
    with pytest.raises(ckptd.InvalidParams):
        client.save("wf", {"a": 1}, step=-1)


def test_method_not_found(client: ckptd.Client) -> None:
    with pytest.raises(ckptd.MethodNotFound) as ei:
        client.request("no/such/method", {})
    assert ei.value.code == -32601 and ei.value.data == {"method": "no/such/method"}


def test_not_found(client: ckptd.Client) -> None:
    with pytest.raises(ckptd.CheckpointNotFound) as ei:
        client.load(checkpoint_id="nope")
    assert ei.value.code == -32001
    with pytest.raises(ckptd.CheckpointNotFound):
        client.load(workflow_id="nope")
    with pytest.raises(ckptd.CheckpointNotFound):
        client.resume_plan("nope")


def test_conflict(client: ckptd.Client) -> None:
    client.save("wf", {"x": 1}, checkpoint_id="c-1")
    with pytest.raises(ckptd.Conflict) as ei:
        client.save("wf", {"x": 2}, checkpoint_id="c-1")
    assert ei.value.code == -32003 and "c-1" in ei.value.message
    with pytest.raises(ckptd.Conflict):
        client.save("other-wf", {"x": 1}, checkpoint_id="c-1")


def test_conflict_data(client: ckptd.Client) -> None:
    client.save("wf", {"x": 1}, checkpoint_id="c-1")
    with pytest.raises(ckptd.Conflict) as ei:
        client.save("wf", {"x": 2}, checkpoint_id="c-1")
    assert ei.value.data["checkpointId"] == "c-1"


def test_too_large(ckptd_bin: str, db_path: str) -> None:
    with ckptd.Client(db=db_path, binary=ckptd_bin, args=["--max-state-size", "1KiB"]) as c:
        assert c.capabilities["maxStateBytes"] == 1024
        with pytest.raises(ckptd.TooLarge) as ei:  # refused by the client before sending
            c.save("wf", b"x" * 2000)
        assert ei.value.data == {"limit": 1024, "size": 2000}
        # the daemon's own check, bypassing the client's
        with pytest.raises(ckptd.TooLarge) as ei:
            c.request("checkpoint/save", {"workflowId": "wf", "stateAttachment": True, "stateType": "bytes"},
                      b"y" * 2000, timeout=10)
        assert ei.value.code == -32004
        with pytest.raises(ckptd.TooLarge):
            c.request("checkpoint/save", {"workflowId": "wf", "state": "z" * 2000}, timeout=10)
        assert c.save("wf", b"x" * 1000)["sizeBytes"] == 1000  # still in sync


def test_resume_validation_error(client: ckptd.Client) -> None:
    client.save("wf", {"s": 1}, step=1, phase="failed", error={"message": "bad", "retryable": False},
                workflow_hash="sha256:old")
    with pytest.raises(ckptd.ResumeValidationError) as ei:
        client.resume_plan("wf", workflow_hash="sha256:new")
    assert ei.value.code == -32005
    codes = {p["code"]: p for p in ei.value.problems}
    assert set(codes) == {"workflow_hash_mismatch", "not_retryable"}
    assert codes["workflow_hash_mismatch"]["expected"] == "sha256:old"
    assert codes["workflow_hash_mismatch"]["actual"] == "sha256:new"
    plan = client.resume_plan("wf", workflow_hash="sha256:new", force=True)
    assert {w["code"] for w in plan.warnings} == {"workflow_hash_mismatch", "not_retryable"}
    assert plan.state == {"s": 1}


def _corrupt_state(db_path: str) -> None:
    con = sqlite3.connect(db_path)
    try:
        n = con.execute("UPDATE states SET data = CAST(? AS BLOB) WHERE encoding = 0", (b'{"tampered":1}',)).rowcount
        con.commit()
        assert n >= 1
    finally:
        con.close()


def test_corrupt_checkpoint(ckptd_bin: str, db_path: str) -> None:
    events: List[Any] = []
    with ckptd.Client(db=db_path, binary=ckptd_bin) as c:
        good = c.save("wf", {"v": "good"}, step=0)["checkpointId"]
        c.save("wf", {"v": "bad"}, step=1)
    con = sqlite3.connect(db_path)
    con.execute("UPDATE states SET data = CAST(? AS BLOB) WHERE data = CAST(? AS BLOB)",
                (b'{"v":"BAD"}', b'{"v":"bad"}'))
    con.commit()
    con.close()
    with ckptd.Client(db=db_path, binary=ckptd_bin, events=["checkpoint/corrupted"],
                      on_notification=lambda m, p: events.append((m, p))) as c:
        bad = c.list("wf")[0]["checkpointId"]
        with pytest.raises(ckptd.CheckpointCorrupt) as ei:
            c.load(checkpoint_id=bad)
        assert ei.value.code == -32002 and ei.value.data["checkpointId"] == bad and ei.value.data["reason"]
        cp = c.load(workflow_id="wf")  # falls back to the newest intact one
        assert cp.checkpoint_id == good and cp.state == {"v": "good"}
        assert [r["checkpointId"] for r in cp.recovered_from] == [bad]
        with pytest.raises(ckptd.ResumeValidationError) as ei2:
            c.resume_plan("wf")
        assert "corrupt" in {p["code"] for p in ei2.value.problems}
        time.sleep(0.2)
    assert any(m == "checkpoint/corrupted" and p["checkpointId"] == bad for m, p in events)


def test_storage_unavailable_disk_full(ckptd_bin: str, tmp_path: Any) -> None:
    """A 1 MiB tmpfs (in a private mount namespace) fills up: saves fail with -32006, the daemon
    lives on."""
    unshare = shutil.which("unshare")
    probe = subprocess.run([unshare or "unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /tmp"],
                           capture_output=True) if unshare else None
    if probe is None or probe.returncode != 0:
        pytest.skip("needs unshare -rm and tmpfs mounts to make a full disk: %s" % (probe.stderr if probe else "no unshare"))
    small = tmp_path / "small"
    small.mkdir()
    script = 'mount -t tmpfs -o size=1m tmpfs "$1" && exec "$0" --db "$1/ckptd.db"'
    with ckptd.Client(binary=unshare, args=["-rm", "sh", "-c", script, ckptd_bin, str(small)]) as c:
        with pytest.raises(ckptd.StorageUnavailable) as ei:
            for i in range(40):
                c.save("wf-full", os.urandom(100 * 1024))
        assert ei.value.code == -32006 and ei.value.data.get("reason")
        assert c.stats()["counters"]["saves"] >= 1  # still serving


def _raw_session(ckptd_bin: str, db_path: str, data: bytes, replies: int) -> List[Any]:
    """Writes raw bytes to a fresh daemon and returns the first ``replies`` messages it sends
    (stdin stays open until then: the daemon stops answering once its stdin is closed)."""
    p = subprocess.Popen([ckptd_bin, "--db", db_path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL)
    assert p.stdin and p.stdout
    msgs: List[Any] = []
    timer = threading.Timer(20, p.kill)
    timer.start()
    try:
        p.stdin.write(data)
        p.stdin.flush()
        while len(msgs) < replies:
            m = read_message(p.stdout)
            if m is None:
                break
            msgs.append(m[0])
    finally:
        timer.cancel()
        p.stdin.close()
        p.wait(10)
        p.stdout.close()
    return msgs


def test_protocol_errors_map_to_protocol_error(ckptd_bin: str, db_path: str) -> None:
    data = (
        b"Content-Length: 5\r\n\r\n{bad}"
        + encode_message([{"jsonrpc": "2.0", "id": 1, "method": "stats"}])
        + encode_message({"id": 2, "method": "stats"})
        + encode_message({"jsonrpc": "2.0", "id": 3, "method": "stats"})
    )
    msgs = _raw_session(ckptd_bin, db_path, data, 4)
    errs = [m for m in msgs if "error" in m]
    assert [e["error"]["code"] for e in errs] == [-32700, -32600, -32600]
    assert all(isinstance(error_from_response(e["error"]), ckptd.ProtocolError) for e in errs)
    assert errs[0]["id"] is None and errs[1]["id"] is None
    assert any(m.get("id") == 3 and "result" in m for m in msgs)


def test_shutting_down(ckptd_bin: str, db_path: str) -> None:
    data = (encode_message({"jsonrpc": "2.0", "id": 1, "method": "shutdown"})
            + encode_message({"jsonrpc": "2.0", "id": 2, "method": "stats"}))
    msgs = {m["id"]: m for m in _raw_session(ckptd_bin, db_path, data, 2)}
    assert msgs[1]["result"] is None
    err = error_from_response(msgs[2]["error"])
    assert isinstance(err, ckptd.ShuttingDown) and err.code == -32007


def test_shutdown_then_calls_fail(ckptd_bin: str, db_path: str) -> None:
    c = ckptd.Client(db=db_path, binary=ckptd_bin)
    try:
        c.save("wf", {"a": 1})
        c.shutdown()
        with pytest.raises((ckptd.ShuttingDown, ckptd.DaemonDied, ckptd.ClientClosed)):
            for _ in range(100):
                c.stats()
                time.sleep(0.01)
        deadline = time.monotonic() + 5
        while c.returncode is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert c.returncode == 0
    finally:
        c.close()
    with ckptd.Client(db=db_path, binary=ckptd_bin) as c2:
        assert c2.load(workflow_id="wf").state == {"a": 1}


def test_close_is_clean_and_idempotent(ckptd_bin: str, db_path: str) -> None:
    c = ckptd.Client(db=db_path, binary=ckptd_bin)
    c.save("wf", {"a": 1})
    c.close()
    assert c.returncode == 0 and c.closed
    c.close()
    with pytest.raises(ckptd.ClientClosed):
        c.save("wf", {"a": 2})
    assert "stopped" in c.stderr_tail() or c.stderr_tail() != ""


def test_binary_lookup_via_env(ckptd_bin: str, db_path: str, tmp_path: Any) -> None:
    env = dict(os.environ, CKPTD_PATH=ckptd_bin)
    with ckptd.Client(db=db_path, env=env) as c:
        assert c.binary == ckptd_bin
    bindir = tmp_path / "bin"
    bindir.mkdir()
    os.symlink(ckptd_bin, bindir / "ckptd")
    env = {k: v for k, v in os.environ.items() if k != "CKPTD_PATH"}
    env["PATH"] = str(bindir)
    with ckptd.Client(db=db_path, env=env) as c:
        assert c.binary == str(bindir / "ckptd")
    env["PATH"] = str(tmp_path)
    with pytest.raises(ckptd.BinaryNotFound) as ei:
        ckptd.Client(db=db_path, env=env)
    assert "$CKPTD_PATH: not set" in str(ei.value) and str(tmp_path) in str(ei.value)


def test_bad_flag_reports_stderr(ckptd_bin: str, db_path: str) -> None:
    with pytest.raises(ckptd.DaemonDied) as ei:
        ckptd.Client(db=db_path, binary=ckptd_bin, args=["--no-such-flag"])
    assert ei.value.exit_code not in (None, 0)
    assert "no-such-flag" in ei.value.stderr_tail and "no-such-flag" in str(ei.value)
