"""The client never sends a param the daemon does not know.

ckptd refuses any param a method does not take, or spells otherwise (docs/protocol.md, "Strict
params"). These tests drive every public method of every client class (Client, AsyncClient, the
workflow helpers, the LangGraph saver) against the real daemon, each keyword option given at least
once, and fail if the daemon refused a param anywhere, even where a helper swallows the error (a
failed step logs a save that did not go through). Coverage is enumerated, not listed: a public
method (or option) added to a class without being exercised here fails the test.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import re
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Set, Tuple

import pytest

import ckptd
from conftest import REPO_ROOT
from test_langgraph_conformance import require

# Options that never reach the wire (client-side behaviour), by "Class.method": exempt from the
# "every option given once" rule. Each must name a real parameter (checked).
NOT_ON_THE_WIRE: Dict[str, Set[str]] = {
    "Client.close": {"timeout"},
    "AsyncClient.close": {"timeout"},
    "Client.request": {"timeout"},
    "AsyncClient.request": {"timeout"},
    "Client.drift_watch": {"callback"},
    "AsyncClient.drift_watch": {"callback"},
    "Client.workflow": {"retryable"},
    "AsyncClient.workflow": {"retryable"},
    "CkptdSaver.get_next_version": {"channel"},  # LangGraph's signature; unused
}


def daemon_methods() -> Set[str]:
    """Every method docs/protocol.md documents (its ### `method` headings), notifications aside."""
    text = (REPO_ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
    found = set(re.findall(r"^### `([a-z]+(?:/[a-zA-Z]+)?)`\s*$", text, re.M))
    assert {"checkpoint/save", "lg/put", "stats", "shutdown"} <= found, found
    return found


def public_methods(cls: type) -> Dict[str, Callable[..., Any]]:
    """The public functions of cls (inherited ones included) that ckptd defines, and its context
    manager methods."""
    out = {}
    for name in dir(cls):
        if name.startswith("_") and name not in ("__enter__", "__exit__", "__aenter__", "__aexit__"):
            continue
        attr = inspect.getattr_static(cls, name)
        fn = attr.__func__ if isinstance(attr, (staticmethod, classmethod)) else attr
        if inspect.isfunction(fn) and fn.__module__.startswith("ckptd"):
            out[name] = fn
    return out


def _given(value: Any, default: Any) -> bool:
    """True when value is not the parameter's default (None is never "given": it sends nothing)."""
    if value is None:
        return False
    if default is inspect.Parameter.empty:
        return True
    try:
        return not (type(value) is type(default) and value == default)
    except Exception:  # pragma: no cover
        return True


class Recorder:
    """Wraps the public methods of the client classes (recording which ran and with which options)
    and the transport (recording every request and every error the daemon answered)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, classes: Iterable[type], transports: Iterable[type]) -> None:
        self.classes = list(classes)
        self.options: Dict[str, Set[str]] = {}  # "Class.method" -> options given
        self.sent: List[Tuple[str, Any]] = []
        self.errors: List[Tuple[str, Any, ckptd.CkptdError]] = []
        for cls in self.classes:
            for name, fn in public_methods(cls).items():
                monkeypatch.setattr(cls, name, self._wrap("%s.%s" % (cls.__name__, name), fn))
        for cls in transports:
            monkeypatch.setattr(cls, "_request", self._wrap_transport(cls.__dict__["_request"]))

    def _wrap(self, key: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(fn)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            got = self.options.setdefault(key, set())
            bound = sig.bind(*args, **kwargs)
            for pname, value in bound.arguments.items():
                p = sig.parameters[pname]
                if pname != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and _given(value, p.default):
                    got.add(pname)
            return fn(*args, **kwargs)

        return wrapper

    def _wrap_transport(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        rec = self
        if inspect.iscoroutinefunction(fn):

            async def arequest(self: Any, method: str, params: Any, *args: Any, **kwargs: Any) -> Any:
                rec.sent.append((method, params))
                try:
                    return await fn(self, method, params, *args, **kwargs)
                except ckptd.CkptdError as e:
                    rec.errors.append((method, params, e))
                    raise

            return arequest

        def request(self: Any, method: str, params: Any, *args: Any, **kwargs: Any) -> Any:
            rec.sent.append((method, params))
            try:
                return fn(self, method, params, *args, **kwargs)
            except ckptd.CkptdError as e:
                rec.errors.append((method, params, e))
                raise

        return request

    def check(self) -> None:
        refused = [(m, p, e) for m, p, e in self.errors if isinstance(e, ckptd.InvalidParams)]
        assert not refused, "the daemon refused params the client sent:\n" + "\n".join(
            "  %s %r: %s" % (m, p, e) for m, p, e in refused
        )
        # The only other errors: resume/plan of a workflow without checkpoints (the helper's
        # fresh start), stats of a thread that does not exist (the test's own), and a shutdown
        # sent again by close() after shutdown().
        unexpected = [
            (m, p, e)
            for m, p, e in self.errors
            if not (m in ("resume/plan", "stats") and isinstance(e, ckptd.CheckpointNotFound)) and m != "shutdown"
        ]
        assert not unexpected, unexpected
        missing = []
        for cls in self.classes:
            for name, fn in public_methods(cls).items():
                key = "%s.%s" % (cls.__name__, name)
                if key not in self.options:
                    missing.append("%s: never called" % key)
                    continue
                exempt = NOT_ON_THE_WIRE.get(key, set())
                params = inspect.signature(fn).parameters
                assert exempt <= set(params), "NOT_ON_THE_WIRE[%s] names no parameter of it: %s" % (key, exempt - set(params))
                for pname, p in params.items():
                    if pname == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or pname in exempt:
                        continue
                    if name.startswith("__") and name.endswith("__"):
                        continue  # exc_type/exc/tb: the failing steps below take the error path
                    if pname not in self.options[key]:
                        missing.append("%s: option %s never given" % (key, pname))
        assert not missing, "not exercised against the daemon:\n  " + "\n  ".join(missing)

    def methods_sent(self) -> Set[str]:
        return {m for m, _ in self.sent}


@pytest.fixture
def src(tmp_path: Path) -> Path:
    d = tmp_path / "src"
    d.mkdir()
    (d / "main.py").write_text("print('hi')\n")
    (d / "notes.txt").write_text("notes\n")
    return d


def test_sync_client_and_workflow_send_only_known_params(
    ckptd_bin: str, tmp_path: Path, src: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ckptd.claim import Claim
    from ckptd.client import Client
    from ckptd.workflow import Step, Workflow

    rec = Recorder(monkeypatch, [Client, Workflow, Step, Claim], [Client])
    db = str(tmp_path / "sync.db")
    args = ["--keep-last", "0"]
    with Client(db=db, binary=ckptd_bin, args=args, request_timeout=120) as c:
        seen: List[str] = []

        def handler(method: str, params: Dict[str, Any]) -> None:
            seen.append(method)

        exercise_client(c, src, handler)

        with c.claim("wf-helper", owner="wire", lease_seconds=45, renew_every=5) as claim, c.workflow(
            "wf-helper",
            workflow_hash="sha256:h",
            sources=str(src),
            namespace="ns",
            initial_state={"n": 0},
            retryable=(ValueError,),
            complete_on_exit=True,
            preserve_on_complete=True,
            force=True,
            metadata={"owner": "wire"},
            drift_as_warning=True,
            claim=claim,
            sources_root=str(src),
        ) as wf:
            assert wf.resume() is None
            assert wf.should_run(0) and wf.start_step == 0
            with wf.step("one", 0, metadata={"k": 1}) as s:
                s.state = {"n": 1}
            with pytest.raises(ValueError):
                with wf.step("two", 1, metadata={"k": 2}):
                    raise ValueError("boom")
            assert wf.drift_status()["drifted"] is False
            assert claim.renew()["fencingToken"] == claim.fencing_token
            claim.check()
        # a claim taken and released by hand
        manual = c.claim("wf-manual", "wire", 30)
        assert manual.acquire() is manual and manual.held
        assert manual.release() is True
        # resume a workflow that has checkpoints (the plan's params with a checkpoint to plan from)
        with c.workflow("wf-helper-2", namespace="", workflow_hash="h2", force=False) as wf2:
            with wf2.step("one") as s:
                s.state = {"n": 1}
        with c.workflow("wf-helper-2", workflow_hash="h2") as wf2:
            plan = wf2.resume()
            assert plan is not None and wf2.start_step == 1 and not wf2.should_run(0)
        exercise_saga(c)
        with c.workflow("wf-saga-helper", initial_state={}) as wf3:
            with wf3.step("a", 0) as s:
                s.validate(0.9, message="m", details={"d": 1})
            good = s.result["checkpointId"]
            with wf3.step("b", 1) as s:
                s.compensate({"kind": "noop"}, "nothing", task_id="t")
                s.validate(0.1)
            assert wf3.rollback_recommended
            assert wf3.rollback(lambda a: None, to_checkpoint_id=good, prune=False)["toCheckpointId"] == good
            assert wf3.rollback(lambda a: None, full=True)["full"] is True

    stop_clients(Client, db, ckptd_bin)
    rec.check()
    client_methods = daemon_methods() - {m for m in daemon_methods() if m.startswith(("lg/", "thread/"))}
    assert client_methods <= rec.methods_sent(), client_methods - rec.methods_sent()


def exercise_client(c: Any, src: Path, handler: Callable[[str, Dict[str, Any]], None]) -> None:
    """Every method of ckptd.Client with every option (sync)."""
    assert c.initialize(client_name="wire", events=["checkpoint/saved", "checkpoint/pruned"])["serverName"] == "ckptd"
    assert c.has_capability("drift")
    c.add_notification_handler(handler)
    r1 = c.save(
        "wf",
        {"n": 1},
        namespace="",
        checkpoint_id="c1",
        phase="completed",
        step=1,
        step_name="one",
        completed_tasks=["a"],
        pending_tasks=[{"id": "b"}],
        workflow_hash="sha256:h",
        metadata={"k": "v"},
        sources=str(src),
    )
    assert r1["checkpointId"] == "c1"
    c.save(
        "wf",
        b"\x00raw",
        checkpoint_id="c2",
        parent_id="c1",
        phase="failed",
        step=2,
        error={"message": "boom", "retryable": True},
        state_type="bytes",
        sources={"root": str(src), "include": ["*.py"], "exclude": ["build"], "gitignore": False, "editorFiles": True},
    )
    c.save("wf", b'{"n":3}', checkpoint_id="c3", step=3, state_type="json", sources=[str(src)])
    c.save("wf-empty")
    # a state that grows: the second save goes as a wire delta (stateDelta)
    grown = {"messages": ["message %d %s" % (i, "x" * 60) for i in range(200)]}
    c.save("wf-delta", grown, checkpoint_id="d1")
    grown["messages"].append("one more")
    c.save("wf-delta", grown, checkpoint_id="d2")
    assert c.stats()["counters"]["deltaSaves"] >= 1
    assert c.stats(workflow_id="wf-delta")["workflow"]["ratio"] > 1
    with pytest.raises(ckptd.CheckpointNotFound):
        c.stats(thread_id="no-such-thread")
    c.remove_notification_handler(handler)
    assert c.load(checkpoint_id="c1").state == {"n": 1}
    assert c.load(workflow_id="wf", namespace="").checkpoint_id == "c3"
    assert [s["checkpointId"] for s in c.list("wf", namespace="", phase="completed", metadata={"k": "v"}, before="c3", limit=5)] == ["c1"]
    c.put_writes("wf", "c3", "t1", [("ch", 1), ("ch", 2, 1), {"channel": "ch2", "value": b"x", "idx": 2, "type": "bytes"}],
                 namespace="", task_path="path")
    plan = c.resume_plan("wf", namespace="", checkpoint_id="c1", workflow_hash="sha256:h", force=True, drift_as_warning=True,
                         sources_root=str(src))
    assert plan.checkpoint_id == "c1"
    assert c.drift_status(workflow_id="wf", namespace="", sources_root=str(src))["drifted"] is False
    assert c.drift_status(checkpoint_id="c1")["checkpointId"] == "c1"
    w = c.drift_watch(workflow_id="wf", namespace="", debounce_ms=20, callback=handler)
    c.drift_unwatch(w["watchId"])
    w = c.drift_watch(checkpoint_id="c1")
    c.drift_unwatch(w["watchId"])
    assert c.configure("wf", keep_last=5, max_age_seconds=86400, keep_first=True, idle_ttl_seconds=86400)["retention"]["keepLast"] == 5
    assert c.configure("wf", retention={"keepLast": 4, "keepFirst": False})["retention"]["keepLast"] == 4
    assert {w["workflowId"] for w in c.workflows(resumable_only=True)} >= {"wf"}
    c.save("wf-page-1", {"n": 1})
    c.save("wf-page-2", {"n": 1})
    ids = [w["workflowId"] for w in c.workflows(order="id", page_size=1)]
    assert ids == sorted(ids) and {"wf-page-1", "wf-page-2"} <= set(ids)
    page = c.workflow_page(resumable_only=True, claimable=True, order="id", limit=1)
    assert len(page["workflows"]) == 1 and page["cursor"]
    assert c.workflow_page(resumable_only=True, claimable=True, order="id", limit=1, cursor=page["cursor"])["workflows"]
    assert c.prune("wf", keep_last=1, older_than_seconds=3600, dry_run=True)["dryRun"] is True
    assert c.complete("wf-empty", preserve=True)["workflowId"] == "wf-empty"
    assert c.delete(checkpoint_id="c2")["deleted"] == 1
    assert c.stats()["counters"]["saves"] >= 4
    result, _ = c.request("checkpoint/save", {"workflowId": "raw", "stateAttachment": True}, b"{}", timeout=60)
    assert result["seq"] == 1
    assert c.delete(workflow_id="raw")["deleted"] == 1
    # claims by hand: every write takes the token
    k = c.claim_workflow("wf-claim", "wire", 30)
    tok = k["fencingToken"]
    c.save("wf-claim", {"n": 1}, checkpoint_id="k1", fencing_token=tok)
    c.put_writes("wf-claim", "k1", "t1", [("ch", 1)], fencing_token=tok)
    assert c.renew_claim("wf-claim", tok, 60)["fencingToken"] == tok
    assert c.complete("wf-claim", preserve=True, fencing_token=tok)["workflowId"] == "wf-claim"
    assert c.release_claim("wf-claim", tok)["released"] is True
    c.save("wf-claimable", {"n": 1})
    assert "wf-claimable" in {w["workflowId"] for w in c.workflows(claimable=True)}
    assert isinstance(c.stderr_tail(), str) and c.returncode is None and not c.closed


def exercise_saga(c: Any) -> None:
    """The validation and compensation methods of ckptd.Client with every option (sync)."""
    cfg = c.configure("wf-saga", validation={"minConfidence": 0.6, "warningThreshold": 0.8, "rollbackOnFailure": True,
                                             "steps": {"s": {"minConfidence": 0.2}}}, compensation={"required": ["write"]})
    assert cfg["validation"]["minConfidence"] == 0.6 and cfg["compensation"] == {"required": ["write"]}
    c.save("wf-saga", {"n": 1}, checkpoint_id="v1", step_name="plan", validation={"confidence": 0.9, "message": "ok", "details": {"k": 1}})
    reg = c.register_compensation("wf-saga", {"kind": "noop"}, "nothing", namespace="", checkpoint_id="v1", step_name="write", task_id="t")
    c.save("wf-saga", {"n": 2}, checkpoint_id="v2", step_name="write", validation={"confidence": 0.1})
    assert [x["checkpointId"] for x in c.list("wf-saga", validation="failed")] == ["v2"]
    assert c.resume_plan("wf-saga", rollback=True).checkpoint_id == "v1"
    assert c.resume_plan("wf-saga", to_checkpoint_id="v1").rollback["actions"][0]["compensationId"] == reg["compensationId"]
    rb = c.rollback_plan("wf-saga", namespace="", to_checkpoint_id="v1")
    assert c.compensation_done(reg["compensationId"], rb["rollbackId"], ok=False, error="EACCES")["status"] == "failed"
    assert c.compensation_done(reg["compensationId"], rb["rollbackId"])["status"] == "done"
    assert c.rollback_complete(rb["rollbackId"], prune=True)["pruned"] == 1
    full = c.rollback_plan("wf-saga", full=True)
    assert c.rollback_complete(full["rollbackId"])["progress"]["total"] == 0


async def aexercise_saga(c: Any) -> None:
    """exercise_saga for ckptd.AsyncClient."""
    await c.configure("wf-saga", validation={"minConfidence": 0.6, "warningThreshold": 0.8, "rollbackOnFailure": True,
                                             "steps": {"s": {"minConfidence": 0.2}}}, compensation={"required": ["write"]})
    await c.save("wf-saga", {"n": 1}, checkpoint_id="v1", step_name="plan", validation={"confidence": 0.9, "message": "ok", "details": {}})
    reg = await c.register_compensation("wf-saga", {"kind": "noop"}, "nothing", namespace="", checkpoint_id="v1", step_name="write",
                                        task_id="t")
    await c.save("wf-saga", {"n": 2}, checkpoint_id="v2", step_name="write", validation={"confidence": 0.1})
    assert len(await c.list("wf-saga", validation="failed")) == 1
    assert (await c.resume_plan("wf-saga", rollback=True)).checkpoint_id == "v1"
    await c.resume_plan("wf-saga", to_checkpoint_id="v1")
    rb = await c.rollback_plan("wf-saga", namespace="", to_checkpoint_id="v1")
    await c.compensation_done(reg["compensationId"], rb["rollbackId"], ok=False, error="EACCES")
    await c.compensation_done(reg["compensationId"], rb["rollbackId"])
    await c.rollback_complete(rb["rollbackId"], prune=True)
    full = await c.rollback_plan("wf-saga", full=True)
    await c.rollback_complete(full["rollbackId"])


def stop_clients(cls: type, db: str, binary: str) -> None:
    """shutdown and kill, each on a client of its own."""
    a = cls(db=db, binary=binary)
    a.shutdown()
    a.close()
    b = cls(db=db, binary=binary)
    b.kill()
    b.close()


async def astop_clients(cls: type, db: str, binary: str) -> None:
    a = await cls(db=db, binary=binary).start()
    await a.shutdown()
    await a.close()
    b = await cls(db=db, binary=binary).start()
    b.kill()
    await b.close()


def test_async_client_and_workflow_send_only_known_params(
    ckptd_bin: str, tmp_path: Path, src: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ckptd.aio import AsyncClient, AsyncStep, AsyncWorkflow
    from ckptd.claim import AsyncClaim

    rec = Recorder(monkeypatch, [AsyncClient, AsyncWorkflow, AsyncStep, AsyncClaim], [AsyncClient])
    db = str(tmp_path / "async.db")

    async def main() -> None:
        async with AsyncClient(db=db, binary=ckptd_bin, args=["--keep-last", "0"], request_timeout=120) as c:

            def handler(method: str, params: Dict[str, Any]) -> None:
                pass

            assert (await c.initialize(client_name="wire", events=["checkpoint/saved"]))["serverName"] == "ckptd"
            assert c.has_capability("drift")
            c.add_notification_handler(handler)
            await c.save("wf", {"n": 1}, namespace="", checkpoint_id="c1", phase="completed", step=1, step_name="one",
                         completed_tasks=["a"], pending_tasks=[{"id": "b"}], workflow_hash="sha256:h",
                         metadata={"k": "v"}, sources=str(src))
            await c.save("wf", b"\x00raw", checkpoint_id="c2", parent_id="c1", phase="failed", step=2,
                         error={"message": "boom", "retryable": False}, state_type="bytes",
                         sources={"root": str(src), "include": ["*.py"], "exclude": ["x"], "gitignore": True})
            await c.save("wf", b"[3]", checkpoint_id="c3", step=3, state_type="json", sources=[str(src)])
            grown = {"messages": ["message %d %s" % (i, "x" * 60) for i in range(200)]}
            await c.save("wf-delta", grown, checkpoint_id="d1")
            grown["messages"].append("one more")
            await c.save("wf-delta", grown, checkpoint_id="d2")
            assert (await c.stats())["counters"]["deltaSaves"] >= 1
            assert (await c.stats(workflow_id="wf-delta"))["workflow"]["storedBytes"] > 0
            with pytest.raises(ckptd.CheckpointNotFound):
                await c.stats(thread_id="no-such-thread")
            c.remove_notification_handler(handler)
            assert (await c.load(checkpoint_id="c1")).state == {"n": 1}
            assert (await c.load(workflow_id="wf", namespace="")).checkpoint_id == "c3"
            assert len(await c.list("wf", namespace="", phase="failed", metadata={}, before="c3", limit=2)) == 1
            await c.put_writes("wf", "c3", "t1", [("ch", 1), {"channel": "b", "value": b"\x01", "idx": 1, "type": "bytes"}],
                               namespace="", task_path="p")
            plan = await c.resume_plan("wf", namespace="", checkpoint_id="c1", workflow_hash="sha256:h", force=True,
                                       drift_as_warning=True, sources_root=str(src))
            assert plan.checkpoint_id == "c1"
            assert (await c.drift_status(workflow_id="wf", namespace="", sources_root=str(src)))["drifted"] is False
            await c.drift_status(checkpoint_id="c1")
            w = await c.drift_watch(workflow_id="wf", namespace="", debounce_ms=20, callback=handler)
            await c.drift_unwatch(w["watchId"])
            w = await c.drift_watch(checkpoint_id="c1")
            await c.drift_unwatch(w["watchId"])
            await c.configure("wf", keep_last=5, max_age_seconds=60, keep_first=True, idle_ttl_seconds=60)
            await c.configure("wf", retention={"idleTtlSeconds": 0})
            assert await c.workflows(resumable_only=True)
            await c.save("wf-page-1", 1)
            await c.save("wf-page-2", 1)
            ids = [w["workflowId"] async for w in c.workflows(order="id", page_size=1)]
            assert ids == sorted(ids) and {"wf-page-1", "wf-page-2"} <= set(ids)
            page = await c.workflow_page(resumable_only=True, claimable=True, order="id", limit=1)
            assert len(page["workflows"]) == 1 and page["cursor"]
            assert (await c.workflow_page(resumable_only=True, claimable=True, order="id", limit=1, cursor=page["cursor"]))["workflows"]
            await c.prune("wf", keep_last=2, older_than_seconds=3600, dry_run=True)
            await c.complete("wf", preserve=True)
            k = await c.claim_workflow("wf-claim", "wire", 30)
            tok = k["fencingToken"]
            await c.save("wf-claim", [1], checkpoint_id="k1", fencing_token=tok)
            await c.put_writes("wf-claim", "k1", "t1", [("ch", 1)], fencing_token=tok)
            await c.renew_claim("wf-claim", tok, 60)
            await c.complete("wf-claim", preserve=True, fencing_token=tok)
            await c.release_claim("wf-claim", tok)
            assert isinstance(await c.workflows(claimable=True), list)
            await c.delete(checkpoint_id="c2")
            await c.delete(workflow_id="wf")
            await c.stats()
            result, _ = await c.request("checkpoint/save", {"workflowId": "raw", "stateAttachment": True}, b"1", timeout=60)
            assert result["seq"] == 1
            assert isinstance(c.stderr_tail(), str) and c.returncode is None and not c.closed

            claim = c.claim("wf-helper", owner="wire", lease_seconds=45, renew_every=5)
            async with claim, c.workflow("wf-helper", workflow_hash="h", sources=str(src), namespace="ns", initial_state=[0],
                                         retryable=(KeyError,), complete_on_exit=True, preserve_on_complete=True, force=True,
                                         metadata={"owner": "wire"}, drift_as_warning=True, claim=claim,
                                         sources_root=str(src)) as wf:
                assert await wf.resume() is None
                assert wf.should_run(0) and wf.start_step == 0
                async with wf.step("one", 0, metadata={"k": 1}) as s:
                    s.state = [1]
                with pytest.raises(KeyError):
                    async with wf.step("two", 1, metadata={"k": 2}):
                        raise KeyError("boom")
                assert (await wf.drift_status())["drifted"] is False
                assert (await claim.renew())["fencingToken"] == claim.fencing_token
                claim.check()
            manual = c.claim("wf-manual", "wire", 30)
            assert await manual.acquire() is manual
            assert await manual.release() is True
            await aexercise_saga(c)
            async with c.workflow("wf-saga-helper", initial_state={}) as wf3:
                async with wf3.step("a", 0) as s:
                    s.validate(0.9, message="m", details={"d": 1})
                good = s.result["checkpointId"]
                async with wf3.step("b", 1) as s:
                    await s.compensate({"kind": "noop"}, "nothing", task_id="t")
                    s.validate(0.1)
                assert wf3.rollback_recommended
                assert (await wf3.rollback(lambda a: None, to_checkpoint_id=good, prune=False))["toCheckpointId"] == good
                assert (await wf3.rollback(lambda a: None, full=True))["full"] is True
        await astop_clients(AsyncClient, db, ckptd_bin)

    asyncio.run(main())
    rec.check()
    client_methods = daemon_methods() - {m for m in daemon_methods() if m.startswith(("lg/", "thread/"))}
    assert client_methods <= rec.methods_sent(), client_methods - rec.methods_sent()


def test_langgraph_saver_sends_only_known_params(ckptd_bin: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require("langgraph.checkpoint.base", "ckptd.langgraph")
    from langgraph.checkpoint.base import empty_checkpoint

    from ckptd.client import Client
    from ckptd.langgraph import CkptdSaver

    rec = Recorder(monkeypatch, [CkptdSaver], [Client])

    def cfg(thread: str, ns: str = "", cid: Any = None) -> Dict[str, Any]:
        c: Dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
        if cid:
            c["checkpoint_id"] = cid
        return {"configurable": c}

    def ckpt(saver: Any, values: Dict[str, Any], versions: Dict[str, Any]) -> Dict[str, Any]:
        cp = empty_checkpoint()
        cp["channel_values"] = dict(values)
        cp["channel_versions"] = dict(versions)
        return cp

    def md(step: int, run: str) -> Dict[str, Any]:
        return {"source": "loop", "step": step, "parents": {}, "run_id": run}

    with CkptdSaver(db=str(tmp_path / "lg.db"), binary=ckptd_bin, args=["--durability", "normal"]) as saver:
        v1 = saver.get_next_version(None)
        v2 = saver.get_next_version(v1, None)
        c1 = ckpt(saver, {"a": 1, "b": "x"}, {"a": v1, "b": v1})
        conf1 = saver.put(cfg("t1"), c1, md(0, "r1"), {"a": v1, "b": v1})
        saver.put_writes(conf1, [("a", 2), ("__error__", "e")], "task-1", "path/1")
        c2 = ckpt(saver, {"a": 2}, {"a": v2, "b": v1})
        conf2 = saver.put(conf1, c2, md(1, "r2"), {"a": v2})
        saver.put_writes(conf2, [("a", 3)], "task-2")
        assert saver.get_tuple(conf1) is not None and saver.get_tuple(cfg("t1")) is not None
        got = list(saver.list(cfg("t1"), filter={"source": "loop"}, before=conf2, limit=5))
        assert [t.config["configurable"]["checkpoint_id"] for t in got] == [c1["id"]]
        hist = saver.get_delta_channel_history(config=conf2, channels=["a"])
        assert "a" in hist
        saver.copy_thread("t1", "t2")
        saver.delete_for_runs(["r1"])
        saver.prune(["t2"], strategy="keep_latest")
        saver.prune(["t2"], strategy="delete")
        saver.delete_thread("t1")

        async def amain() -> None:
            async with saver as s:
                c3 = ckpt(s, {"a": 1}, {"a": v1})
                conf3 = await s.aput(cfg("t3", "ns"), c3, md(0, "r3"), {"a": v1})
                await s.aput_writes(conf3, [("a", 5)], "task-3", "p")
                assert await s.aget_tuple(conf3) is not None
                got = [t async for t in s.alist(cfg("t3", "ns"), filter={"run_id": "r3"}, before=cfg("t3", "ns", "zzzz"), limit=2)]
                assert len(got) == 1
                assert "a" in await s.aget_delta_channel_history(config=conf3, channels=["a"])
                await s.acopy_thread("t3", "t4")
                await s.adelete_for_runs(["r3"])
                await s.aprune(["t4"], strategy="delete")
                await s.adelete_thread("t4")

        asyncio.run(amain())
    saver.close()  # idempotent
    # values over the daemon's limit together go ahead (lg/putValue); retention (lg/configure)
    retention = {"keep_last": 5, "keep_first": True, "max_age_seconds": 0, "idle_ttl_seconds": 3600}
    with CkptdSaver(db=str(tmp_path / "lg3.db"), binary=ckptd_bin, args=["--max-state-size", "64KiB"], retention=retention) as small:
        big = {"a": "x" * 40000, "b": "y" * 40000}
        v1 = small.get_next_version(None)
        conf = small.put(cfg("big"), ckpt(small, big, {"a": v1, "b": v1}), md(0, "rb"), {"a": v1, "b": v1})
        small.put_writes(conf, [("a", "z" * 40000), ("b", "w" * 40000)], "task-big")
        assert small.get_tuple(conf).checkpoint["channel_values"] == big
        assert small.configure_retention("big")["source"] == "thread"
        assert small.configure_retention(retention={"keep_last": 10})["source"] == "database"
        assert small.configure_retention(inherit=True)["retention"]["keepLast"] == 0

        async def aconf() -> None:
            assert (await small.aconfigure_retention("other", {"idle_ttl_seconds": 60}))["source"] == "thread"
            assert (await small.aconfigure_retention("other", inherit=True))["source"] == "daemon"

        asyncio.run(aconf())
    with CkptdSaver(client=Client(db=str(tmp_path / "lg2.db"), binary=ckptd_bin)) as shared:
        assert shared.get_tuple(cfg("none")) is None
        shared.client.close()
    rec.check()
    lg_methods = {m for m in daemon_methods() if m.startswith(("lg/", "thread/"))}
    assert lg_methods <= rec.methods_sent(), lg_methods - rec.methods_sent()
