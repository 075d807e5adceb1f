"""Client logic that needs no ckptd binary: errors, binary lookup, state encoding, and the
transport (pipelining, notifications, death, id-null errors) against tests/fake_ckptd.py."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import pickle
import random
import signal
import stat
import threading
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest

from conftest import HERE
import ckptd
from ckptd import _common as C
from ckptd.errors import error_from_response

FAKE = str(HERE / "fake_ckptd.py")


# --- errors -----------------------------------------------------------------------------------

CODES = {
    -32700: ckptd.ProtocolError,
    -32600: ckptd.ProtocolError,
    -32601: ckptd.MethodNotFound,
    -32602: ckptd.InvalidParams,
    -32603: ckptd.InternalError,
    -32001: ckptd.CheckpointNotFound,
    -32002: ckptd.CheckpointCorrupt,
    -32003: ckptd.Conflict,
    -32004: ckptd.TooLarge,
    -32005: ckptd.ResumeValidationError,
    -32006: ckptd.StorageUnavailable,
    -32007: ckptd.ShuttingDown,
}


@pytest.mark.parametrize("code,cls", sorted(CODES.items()))
def test_error_classes(code: int, cls: type) -> None:
    e = error_from_response({"code": code, "message": "m", "data": {"x": 1}})
    assert type(e) is cls and isinstance(e, ckptd.CkptdError)
    assert (e.code, e.message, e.data) == (code, "m", {"x": 1})
    assert "m" in str(e) and str(code) in str(e)
    e2 = pickle.loads(pickle.dumps(e))
    assert type(e2) is cls and (e2.code, e2.message, e2.data) == (code, "m", {"x": 1})


def test_unknown_code_is_base_class() -> None:
    e = error_from_response({"code": -1, "message": "odd"})
    assert type(e) is ckptd.CkptdError and e.code == -1 and e.data is None


def test_resume_validation_problems() -> None:
    probs = [{"code": "workflow_hash_mismatch", "message": "x", "expected": "a", "actual": "b"}]
    e = error_from_response({"code": -32005, "message": "resume validation failed", "data": {"problems": probs}})
    assert isinstance(e, ckptd.ResumeValidationError) and e.problems == probs
    assert ckptd.ResumeValidationError(-32005, "x", None).problems == []


def test_daemon_died_fields() -> None:
    e = ckptd.DaemonDied("gone", 3, "tail")
    assert e.exit_code == 3 and e.stderr_tail == "tail" and e.code is None
    e2 = pickle.loads(pickle.dumps(e))
    assert (e2.exit_code, e2.stderr_tail, e2.message) == (3, "tail", "gone")


def test_interrupted_is_keyboard_interrupt() -> None:
    assert issubclass(ckptd.Interrupted, KeyboardInterrupt)


# --- binary lookup ----------------------------------------------------------------------------


def _exe(path: Path) -> str:
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_find_binary_order(tmp_path: Path) -> None:
    a = _exe(tmp_path / "a-ckptd")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    on_path = _exe(bindir / "ckptd")
    env = {"PATH": str(bindir)}
    assert C.find_binary(a, env) == a
    assert C.find_binary(None, dict(env, CKPTD_PATH=a)) == a
    assert C.find_binary(None, env) == on_path


def test_binary_not_found_lists_every_place(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path), "CKPTD_PATH": str(tmp_path / "nope")}
    with pytest.raises(ckptd.BinaryNotFound) as ei:
        C.find_binary(None, env)
    msg = str(ei.value)
    assert "binary= argument: not given" in msg
    assert "$CKPTD_PATH=" in msg and "does not exist" in msg
    assert "binary shipped with the package" in msg
    assert "$PATH (%s)" % tmp_path in msg
    assert len(ei.value.searched) == 4

    with pytest.raises(ckptd.BinaryNotFound) as ei:
        C.find_binary(None, {"PATH": str(tmp_path)})
    assert "$CKPTD_PATH: not set" in str(ei.value)


def test_explicit_binary_missing_or_not_executable(tmp_path: Path) -> None:
    f = tmp_path / "ckptd"
    f.write_text("x")
    with pytest.raises(ckptd.BinaryNotFound, match="is not executable"):
        C.find_binary(str(f), {"PATH": ""})
    with pytest.raises(ckptd.BinaryNotFound, match="does not exist"):
        C.find_binary(str(tmp_path / "missing"), {"PATH": ""})
    with pytest.raises(ckptd.BinaryNotFound, match="no executable of that name"):
        C.find_binary("no-such-ckptd-name", {"PATH": str(tmp_path)})


def test_ckptd_path_set_but_broken_does_not_fall_back(tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    _exe(bindir / "ckptd")
    with pytest.raises(ckptd.BinaryNotFound, match="not used because"):
        C.find_binary(None, {"PATH": str(bindir), "CKPTD_PATH": str(tmp_path / "gone")})


def test_client_raises_binary_not_found(tmp_path: Path) -> None:
    with pytest.raises(ckptd.BinaryNotFound):
        ckptd.Client(db=str(tmp_path / "x.db"), binary=str(tmp_path / "missing"))
    with pytest.raises(ckptd.BinaryNotFound):
        ckptd.AsyncClient(db=str(tmp_path / "x.db"), binary=str(tmp_path / "missing"))


# --- states and params -----------------------------------------------------------------------


def test_encode_state() -> None:
    assert C.encode_state({"a": [1, "é"]}) == (b'{"a":[1,"\\u00e9"]}', "json")
    assert C.encode_state(None) == (b"null", "json")
    assert C.encode_state(b"\x00\x01") == (b"\x00\x01", "bytes")
    assert C.encode_state(bytearray(b"ab")) == (b"ab", "bytes")
    assert C.encode_state(memoryview(b"xyz")[1:]) == (b"yz", "bytes")
    assert C.encode_state(b'{"pre":"encoded"}', "json") == (b'{"pre":"encoded"}', "json")
    with pytest.raises(TypeError):
        C.encode_state({"x": object()})
    with pytest.raises(ValueError):
        C.encode_state({"x": 1}, "bytes")


def test_decode_state_variants() -> None:
    assert C.decode_state({"stateType": "json", "stateAttachment": True}, b'{"a":1}') == ({"a": 1}, b'{"a":1}')
    assert C.decode_state({"stateType": "bytes", "stateAttachment": True}, b"\x00") == (b"\x00", b"\x00")
    assert C.decode_state({"stateType": "bytes", "stateBase64": base64.b64encode(b"hi").decode()}, None) == (b"hi", b"hi")
    assert C.decode_state({"stateType": "json", "state": [1]}, None) == ([1], b"[1]")
    assert C.decode_state({"stateType": "none"}, None) == (None, None)


def test_save_params_uses_attachment_and_checks_size() -> None:
    params, att = C.save_params(
        "wf", {"k": "v"}, namespace=None, checkpoint_id=None, parent_id="p", phase="completed", step=2,
        step_name="s", error=None, completed_tasks=["t1"], pending_tasks=None, workflow_hash="h",
        metadata={"m": 1}, sources=None, state_type=None, max_state_bytes=100,
    )
    assert att == b'{"k":"v"}'
    assert params == {"workflowId": "wf", "parentId": "p", "phase": "completed", "step": 2, "stepName": "s",
                      "completedTasks": ["t1"], "workflowHash": "h", "metadata": {"m": 1},
                      "stateAttachment": True, "stateType": "json"}
    assert "state" not in params
    with pytest.raises(ckptd.TooLarge) as ei:
        C.save_params("wf", "x" * 200, namespace=None, checkpoint_id=None, parent_id=None, phase=None, step=None,
                      step_name=None, error=None, completed_tasks=None, pending_tasks=None, workflow_hash=None,
                      metadata=None, sources=None, state_type=None, max_state_bytes=100)
    assert ei.value.code == -32004 and ei.value.data == {"limit": 100, "size": 202}
    params, att = C.save_params("wf", ckptd.NO_STATE, namespace=None, checkpoint_id=None, parent_id=None, phase=None,
                                step=None, step_name=None, error=None, completed_tasks=None, pending_tasks=None,
                                workflow_hash=None, metadata=None, sources=None, state_type=None, max_state_bytes=None)
    assert att is None and params == {"workflowId": "wf"}


def test_writes_param() -> None:
    assert C.writes_param([("ch", 1), ("ch2", b"\x00", -1), {"channel": "c", "value": None, "type": "t"}]) == [
        {"channel": "ch", "value": 1},
        {"channel": "ch2", "valueBase64": "AA==", "idx": -1},
        {"channel": "c", "value": None, "type": "t"},
    ]


def test_target_params_needs_exactly_one() -> None:
    with pytest.raises(ValueError):
        C.target_params(None, None, "load")
    with pytest.raises(ValueError):
        C.target_params("a", "b", "load")


def test_is_retryable() -> None:
    class Flaky(Exception):
        retryable = True

    class Fatal(OSError):
        retryable = False

    dflt = ckptd.DEFAULT_RETRYABLE
    assert C.is_retryable(TimeoutError(), dflt) and C.is_retryable(ConnectionResetError(), dflt)
    assert C.is_retryable(FileNotFoundError(), dflt)
    assert not C.is_retryable(ValueError(), dflt)
    assert C.is_retryable(Flaky(), dflt) and not C.is_retryable(Fatal(), dflt)
    e = ValueError("x")
    e.retryable = True  # type: ignore[attr-defined]
    assert C.is_retryable(e, dflt)
    assert C.is_retryable(ValueError(), (ValueError,))


def test_checkpoint_object() -> None:
    cp = ckptd.Checkpoint({"checkpointId": "c1", "seq": 3, "stateType": "json", "stateAttachment": True,
                           "phase": "completed", "step": 2}, b'{"x":1}')
    assert cp.state == {"x": 1} and cp["seq"] == 3 and cp.seq == 3 and cp.checkpoint_id == "c1"
    assert cp.state_bytes == b'{"x":1}' and cp.phase == "completed" and cp.step == 2
    plan = ckptd.ResumePlan({"startStep": 3, "retry": True, "stateType": "none"})
    assert plan.start_step == 3 and plan.retry and not plan.should_run(2) and plan.should_run(3)


# --- transport against the fake daemon ---------------------------------------------------------


def _fake(mode: str = "echo", **kw: Any) -> ckptd.Client:
    env = dict(os.environ, FAKE_MODE=mode)
    return ckptd.Client(db="unused", binary=FAKE, env=env, **kw)


def test_fake_roundtrip_and_attachment() -> None:
    with _fake() as c:
        assert c.server_info["serverName"] == "fake"
        r, att = c.request("anything", {"a": 1}, b"\x00\x01")
        assert r == {"method": "anything", "params": {"a": 1}, "attachmentLength": 2} and att == b"\x00\x01"
        r = c.save("wf", b"\xff" * 10, step=1)
        assert r["params"]["stateType"] == "bytes" and r["params"]["stateAttachment"] is True
        assert r["attachmentLength"] == 10
        with pytest.raises(ckptd.TooLarge):  # maxStateBytes from the fake's initialize: 1000
            c.save("wf", b"x" * 1001)
    assert c.closed and c.returncode == 0


def test_fake_out_of_order_responses_across_threads() -> None:
    with _fake() as c:
        results: Dict[int, Any] = {}

        def work(i: int) -> None:
            results[i] = c.request("m", {"i": i, "hold": 4})[0]

        ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(10)
        assert {i: r["params"]["i"] for i, r in results.items()} == {0: 0, 1: 1, 2: 2, 3: 3}


@pytest.mark.parametrize("kind", ["crash", "hang-kill"])
def test_fake_death_fails_pending_and_later_calls(kind: str) -> None:
    c = _fake("die" if kind == "crash" else "hang")
    try:
        errors: List[BaseException] = []

        def pending() -> None:
            try:
                c.request("slow", {"hold": 99})
            except BaseException as e:
                errors.append(e)

        t = threading.Thread(target=pending)
        t.start()
        time.sleep(0.1)
        t0 = time.monotonic()
        if kind == "crash":
            with pytest.raises(ckptd.DaemonDied) as ei:
                c.save("wf", {"x": 1})
            assert ei.value.exit_code == 3
            assert "fatal: disk on fire" in ei.value.stderr_tail and "disk on fire" in str(ei.value)
            assert "exit code 3" in str(ei.value)
        else:
            threading.Timer(0.2, c.kill).start()
            with pytest.raises(ckptd.DaemonDied) as ei:
                c.save("wf", {"x": 1})
            assert ei.value.exit_code == -9 and "SIGKILL" in str(ei.value)
            assert "fake ckptd starting" in ei.value.stderr_tail
        t.join(5)
        assert time.monotonic() - t0 < 5
        assert len(errors) == 1 and isinstance(errors[0], ckptd.DaemonDied)
        t1 = time.monotonic()
        with pytest.raises(ckptd.DaemonDied):
            c.stats()
        assert time.monotonic() - t1 < 0.5
    finally:
        c.close()


def test_fake_null_id_error_fails_the_only_pending_request() -> None:
    with _fake("nullid") as c:
        with pytest.raises(ckptd.TooLarge):
            c.save("wf", {"x": 1})
        assert len(c.unmatched_errors) == 1


def test_fake_malformed_frame_is_fatal_not_a_hang() -> None:
    c = _fake("garbage")
    try:
        with pytest.raises(ckptd.DaemonDied, match="malformed frame"):
            c.save("wf", {"x": 1})
    finally:
        c.close()


def test_fake_request_timeout() -> None:
    with _fake("hang") as c:
        with pytest.raises(TimeoutError):
            c.request("checkpoint/save", {"workflowId": "w"}, timeout=0.2)
        assert c.stats()["method"] == "stats"  # the connection is still usable


def test_fake_notifications_and_watch_callbacks() -> None:
    got: List[Any] = []
    watch_got: List[Any] = []
    ev = threading.Event()

    def on_note(method: str, params: Dict[str, Any]) -> None:
        got.append((method, params))
        if len(got) >= 3:
            ev.set()

    with _fake(on_notification=on_note) as c:
        w = c.drift_watch(workflow_id="wf", debounce_ms=10, callback=lambda m, p: watch_got.append(p))
        assert w == {"watchId": "w1"}
        c.request("notify-me")
        assert ev.wait(5)
    assert [m for m, _ in got] == ["drift/changed", "checkpoint/saved", "drift/changed"]
    assert len(watch_got) == 2 and watch_got[0]["changes"] == [{"path": "a.py", "kind": "modified"}]


def test_fake_caller_reads_its_own_response() -> None:
    """A lone caller reads its response itself (no hand-over from the reader thread); with
    several threads, whoever reads dispatches the others' responses to them."""
    seen: List[threading.Thread] = []
    with _fake() as c:
        c._request("m", {}, on_result=lambda r: seen.append(threading.current_thread()))
        assert seen == [threading.current_thread()]
        seen.clear()
        t = threading.Thread(target=lambda: c._request("m", {}, on_result=lambda r: seen.append(threading.current_thread())))
        t.start()
        t.join(10)
        assert seen == [t]
        # pipelined: the fake holds 4 requests, then answers in reverse order
        results: Dict[int, Any] = {}
        ts = [threading.Thread(target=lambda i=i: results.__setitem__(i, c.request("m", {"i": i, "hold": 4})[0]))
              for i in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(10)
        assert {i: r["params"]["i"] for i, r in results.items()} == {0: 0, 1: 1, 2: 2, 3: 3}


def test_fake_timeouts_and_threads_keep_responses_matched() -> None:
    """Calls that time out (their late responses are dropped), calls with attachments of every
    size and notifications, from several threads at once: every answer reaches its own caller."""
    errors: List[Any] = []
    notes: List[str] = []
    counts = {"timeouts": 0, "notify": 0}
    stop = time.monotonic() + 2.0

    def work(k: int) -> None:
        rng = random.Random(k)
        try:
            while time.monotonic() < stop:
                i = rng.randrange(1 << 30)
                r = rng.random()
                if r < 0.05:
                    try:
                        c.request("m", {"i": i, "pad": "x" * rng.randrange(0, 300_000)}, timeout=0.0005)
                    except TimeoutError:
                        counts["timeouts"] += 1
                elif r < 0.1:
                    c.request("notify-me")
                    counts["notify"] += 1
                else:
                    att = os.urandom(rng.randrange(0, 200_000)) if rng.random() < 0.3 else None
                    res, got = c.request("m", {"i": i}, att)
                    if res["params"]["i"] != i or got != att:
                        errors.append(("mismatch", i, res["params"]))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    with _fake(on_notification=lambda m, p: notes.append(m)) as c:
        ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in ts:
            t.start()
        work(99)  # the main thread too (it reads with signals deferred)
        for t in ts:
            t.join(30)
        assert not any(t.is_alive() for t in ts)
        assert c.request("m", {"i": -1})[0]["params"]["i"] == -1
        deadline = time.monotonic() + 5
        while len(notes) < 2 * counts["notify"] and time.monotonic() < deadline:
            time.sleep(0.01)
    assert not errors, errors[:5]
    assert counts["timeouts"] > 0 and len(notes) == 2 * counts["notify"]


@pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="needs pthread_kill")
@pytest.mark.parametrize("reader", ["caller", "other thread"])
def test_fake_ctrl_c_while_waiting_keeps_the_client_usable(reader: str) -> None:
    """Ctrl-C while the main thread waits for a response interrupts the wait (whether the main
    thread reads stdout itself or waits for another thread to), and the client stays usable."""
    with _fake("hang") as c:
        other = None
        if reader == "other thread":
            other = threading.Thread(target=lambda: pytest.raises(TimeoutError, c.request, "checkpoint/save",
                                                                  {"workflowId": "w"}, timeout=1.5))
            other.start()
            time.sleep(0.2)  # it reads stdout while waiting for an answer that never comes
        main = threading.main_thread().ident
        assert main is not None
        timer = threading.Timer(0.3, signal.pthread_kill, (main, signal.SIGINT))
        timer.start()
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            c.request("checkpoint/save", {"workflowId": "w"})
        assert time.monotonic() - t0 < 1.0
        if other is not None:
            other.join(5)
        assert c.stats()["method"] == "stats"
        r, att = c.request("m", {"i": 7}, b"abc")
        assert r["params"]["i"] == 7 and att == b"abc"


def test_fake_calls_after_close() -> None:
    c = _fake()
    c.close()
    c.close()
    with pytest.raises(ckptd.ClientClosed):
        c.stats()


def test_fake_async_client() -> None:
    async def main() -> None:
        got: List[str] = []
        async with ckptd.AsyncClient(db="x", binary=FAKE, env=dict(os.environ, FAKE_MODE="echo"),
                                     on_notification=lambda m, p: got.append(m)) as c:
            rs = await asyncio.gather(*[c.request("m", {"i": i, "hold": 5}) for i in range(5)])
            assert [r[0]["params"]["i"] for r in rs] == list(range(5))
            r = await c.save("wf", b"abc")
            assert r["attachmentLength"] == 3
            await c.request("notify-me")
            await asyncio.sleep(0.1)
            assert got == ["checkpoint/saved", "drift/changed"]
        async with ckptd.AsyncClient(db="x", binary=FAKE, env=dict(os.environ, FAKE_MODE="die")) as c:
            with pytest.raises(ckptd.DaemonDied, match="disk on fire"):
                await c.save("wf", {"x": 1})
            with pytest.raises(ckptd.DaemonDied):
                await c.stats()

    asyncio.run(main())


def test_sources_param(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    # the server's shape: one spec object {root, include?, exclude?, gitignore?}
    assert C.sources_param("src") == {"root": str(tmp_path / "src")}
    assert C.sources_param(tmp_path) == {"root": str(tmp_path)}
    assert C.sources_param(["src"]) == {"root": str(tmp_path / "src")}
    assert C.sources_param({"root": "src", "include": ["**/*.py"]}) == {"root": str(tmp_path / "src"), "include": ["**/*.py"]}
    assert C.sources_param([{"root": "a"}]) == {"root": str(tmp_path / "a")}
    with pytest.raises(ValueError, match="one root"):
        C.sources_param(["src", tmp_path])


@pytest.mark.parametrize("drift", [True, False])
def test_workflow_sends_sources_only_to_drift_capable_daemons(drift: bool, tmp_path: Path) -> None:
    env = dict(os.environ, FAKE_MODE="echo", FAKE_DRIFT="1" if drift else "0")
    with ckptd.Client(db="x", binary=FAKE, env=env) as c:
        assert c.has_capability("drift") is drift
        with c.workflow("w", sources=[str(tmp_path)]) as wf:
            with wf.step("a") as s:
                pass
        assert s.before is not None and s.result is not None
        for r in (s.before, s.result):
            assert r["method"] == "checkpoint/save"
            if drift:
                assert r["params"]["sources"] == {"root": str(tmp_path)}
            else:
                assert "sources" not in r["params"]
        # the plain save() sends what it is given
        assert c.save("w", {}, sources=[str(tmp_path)])["params"]["sources"] == {"root": str(tmp_path)}
