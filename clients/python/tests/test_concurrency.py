"""Pipelining from many threads, and the asyncio client, against the real daemon."""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
from typing import Any, Dict, List, Tuple

import pytest

import ckptd


def test_threads_pipelined_saves_matched(client: ckptd.Client) -> None:
    n_threads, per_thread = 8, 50
    results: Dict[Tuple[int, int], Dict[str, Any]] = {}
    errors: List[BaseException] = []
    start = threading.Barrier(n_threads)

    def work(t: int) -> None:
        try:
            start.wait()
            for i in range(per_thread):
                state = {"thread": t, "i": i, "pad": "x" * ((t * 131 + i * 17) % 3000)}
                r = client.save("wf-t%d" % t, state, step=i, metadata={"t": t, "i": i})
                results[(t, i)] = (r, state)  # type: ignore[assignment]
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert not errors, errors
    assert len(results) == n_threads * per_thread
    for (t, i), (r, state) in results.items():  # type: ignore[misc]
        encoded = ckptd._common.encode_state(state)[0]
        assert r["sha256"] == hashlib.sha256(encoded).hexdigest(), (t, i)  # this save's own answer
        assert r["seq"] == i + 1, (t, i)  # per-workflow seq, in this thread's order
    # and every checkpoint reads back as written, again from many threads
    def check(t: int) -> None:
        for c in client.list("wf-t%d" % t, limit=per_thread):
            cp = client.load(checkpoint_id=c["checkpointId"])
            assert cp.state["thread"] == t and cp.state["i"] == cp.metadata["i"]
    loaders = [threading.Thread(target=check, args=(t,)) for t in range(n_threads)]
    for th in loaders:
        th.start()
    for th in loaders:
        th.join(120)
    assert client.stats()["counters"]["saves"] == n_threads * per_thread


def test_threads_mixed_methods(client: ckptd.Client) -> None:
    client.save("wf-mix", {"seed": True})
    errors: List[BaseException] = []

    def work(k: int) -> None:
        try:
            for i in range(30):
                m = (k + i) % 4
                if m == 0:
                    client.save("wf-mix", os.urandom(200 + i))
                elif m == 1:
                    client.load(workflow_id="wf-mix")
                elif m == 2:
                    client.list("wf-mix", limit=5)
                else:
                    with pytest.raises(ckptd.CheckpointNotFound):
                        client.load(checkpoint_id="missing-%d" % i)
        except BaseException as e:  # pragma: no cover
            errors.append(e)

    ts = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert not errors, errors


def test_async_client_every_method(ckptd_bin: str, db_path: str) -> None:
    async def main() -> None:
        notes: List[Any] = []

        async def on_note(method: str, params: Dict[str, Any]) -> None:
            notes.append((method, params["seq"]))

        # request_timeout: a daemon that stops answering fails the test with the method's name
        # (see test_concurrent_loads_on_a_fresh_daemon) instead of hanging it
        async with ckptd.AsyncClient(db=db_path, binary=ckptd_bin, events=["checkpoint/saved"], args=["--keep-last", "0"],
                                     on_notification=on_note, request_timeout=60) as c:
            assert c.server_info["serverName"] == "ckptd" and c.capabilities["attachments"]
            results = await asyncio.gather(*[c.save("wf-a", {"i": i, "pad": "p" * i * 50}, step=i) for i in range(100)])
            assert sorted(r["seq"] for r in results) == list(range(1, 101))
            for i, r in enumerate(results):
                enc = ckptd._common.encode_state({"i": i, "pad": "p" * i * 50})[0]
                assert r["sha256"] == hashlib.sha256(enc).hexdigest()
            cps = await asyncio.gather(*[c.load(checkpoint_id=r["checkpointId"]) for r in results])
            assert [cp.state["i"] for cp in cps] == list(range(100))
            raw = os.urandom(200_000)
            r = await c.save("wf-b", raw, phase="before_step", step=1)
            assert (await c.load(workflow_id="wf-b")).state == raw
            assert len(await c.list("wf-a", limit=10)) == 10
            assert {w["workflowId"] for w in await c.workflows()} == {"wf-a", "wf-b"}
            assert (await c.configure("wf-a", keep_last=0))["retention"]["keepLast"] == 0
            await c.put_writes("wf-b", r["checkpointId"], "t", [("ch", 1)])
            assert (await c.load(checkpoint_id=r["checkpointId"])).pending_writes[0]["value"] == 1
            plan = await c.resume_plan("wf-b")
            assert plan.start_step == 1 and plan.retry and plan.state == raw
            assert (await c.prune("wf-a", keep_last=50))["deleted"] == 50
            assert (await c.delete(checkpoint_id=r["checkpointId"]))["deleted"] == 1
            assert (await c.complete("wf-a"))["deleted"] == 50
            assert (await c.stats())["counters"]["saves"] == 101
            with pytest.raises(ckptd.CheckpointNotFound):
                await c.load(workflow_id="wf-b")
            with pytest.raises(ckptd.InvalidParams):
                await c.save("", {})
            with pytest.raises(ckptd.MethodNotFound):
                await c.request("nope")
            await asyncio.sleep(0.1)
        assert len(notes) == 101 and sorted(s for _, s in notes if True)[:3] == [1, 1, 2]
        assert c.returncode == 0

    asyncio.run(main())


def test_async_requests_of_one_turn_written_together(ckptd_bin: str, db_path: str, monkeypatch: Any) -> None:
    """Requests made in one turn of the loop while others are in flight go out in one write; a
    lone request is written at once. Every one is answered, each with its own result."""
    writes: List[int] = []
    real_write = os.write

    async def main() -> None:
        async with ckptd.AsyncClient(db=db_path, binary=ckptd_bin, args=["--keep-last", "0"], request_timeout=60) as c:
            fd = c._proc.stdin.fileno()  # type: ignore[union-attr]

            def counting_write(f: int, data: Any) -> int:
                if f == fd:
                    writes.append(len(data))
                return real_write(f, data)

            monkeypatch.setattr(os, "write", counting_write)
            r = await c.save("wf-lone", {"lone": True})
            assert r["seq"] == 1 and len(writes) == 1, "a lone request: written at once"
            del writes[:]
            results = await asyncio.gather(*[c.save("wf-%d" % (i % 7), {"i": i}, step=i) for i in range(64)])
            for i, r in enumerate(results):
                enc = ckptd._common.encode_state({"i": i})[0]
                assert r["sha256"] == hashlib.sha256(enc).hexdigest()
            assert len(writes) <= 2, writes  # the first frame, then the other 63 together
            monkeypatch.undo()

    asyncio.run(main())


def test_concurrent_loads_on_a_fresh_daemon(ckptd_bin: str, tmp_path: Any) -> None:
    """The hang behind the flaky test_async_client_every_method (its 100 concurrent loads on a
    daemon that has not read anything yet): concurrent loads whose first statement runs long
    enough (a 4 MB state to read and hash) that 4 of them are inside their read transactions
    when they reach the not-yet-prepared pending-writes query. Deadlocked nearly every time
    before the daemon fix; each round uses a fresh daemon (an empty statement cache)."""

    async def round_(db: str) -> None:
        async with ckptd.AsyncClient(db=db, binary=ckptd_bin, request_timeout=20, timeout=5) as c:
            state = os.urandom(4 << 20)
            r = await c.save("wf", state)
            try:
                cps = await asyncio.gather(*[c.load(checkpoint_id=r["checkpointId"]) for _ in range(8)])
            except TimeoutError:
                c.kill()  # a deadlocked daemon would not shut down either
                raise AssertionError("ckptd stopped answering 8 concurrent loads (read-pool deadlock)") from None
            assert all(cp.state == state for cp in cps)

    for i in range(2):
        asyncio.run(round_(str(tmp_path / ("fresh-%d.db" % i))))


def test_async_daemon_killed(ckptd_bin: str, db_path: str) -> None:
    async def main() -> None:
        async with ckptd.AsyncClient(db=db_path, binary=ckptd_bin) as c:
            await c.save("wf", {"a": 1})
            pending = [asyncio.ensure_future(c.save("wf", os.urandom(1 << 20))) for _ in range(20)]
            await asyncio.sleep(0)
            c.kill()
            done = await asyncio.wait_for(asyncio.gather(*pending, return_exceptions=True), 10)
            died = [d for d in done if isinstance(d, ckptd.DaemonDied)]
            assert died and all(isinstance(d, (ckptd.DaemonDied, dict)) for d in done)
            assert died[0].exit_code == -9 and "serving" in died[0].stderr_tail
            with pytest.raises(ckptd.DaemonDied):
                await asyncio.wait_for(c.stats(), 2)

    asyncio.run(main())


def test_async_workflow_helper(ckptd_bin: str, db_path: str) -> None:
    async def main() -> None:
        async with ckptd.AsyncClient(db=db_path, binary=ckptd_bin, args=["--keep-last", "0"]) as c:
            async with c.workflow("awf", initial_state={"n": 0}) as wf:
                assert await wf.resume() is None
                for i in range(3):
                    if not wf.should_run(i):
                        continue
                    async with wf.step("s%d" % i, index=i) as s:
                        s.state = {"n": s.input["n"] + 1}
                with pytest.raises(ValueError):
                    async with wf.step("bad", index=3):
                        raise ValueError("nope")

                async def cancelled_step() -> None:
                    async with wf.step("slow", index=3):
                        await asyncio.sleep(30)

                t = asyncio.ensure_future(cancelled_step())
                await asyncio.sleep(0.2)
                t.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await t
            phases = [(x["step"], x["phase"]) for x in reversed(await c.list("awf"))]
            assert phases == [(0, "before_step"), (0, "completed"), (1, "before_step"), (1, "completed"),
                              (2, "before_step"), (2, "completed"), (3, "before_step"), (3, "failed"),
                              (3, "before_step"), (3, "interrupted")]
            async with c.workflow("awf") as wf2:
                plan = await wf2.resume()
                assert plan is not None and plan.start_step == 3 and plan.retry and wf2.state == {"n": 3}
                assert [wf2.should_run(i) for i in range(5)] == [False, False, False, True, True]

    asyncio.run(main())
