"""Clients where agent services really run them: in processes forked after the client started
(multiprocessing's fork pool, gunicorn --preload), and across event loops (an AsyncClient started
under one asyncio.run and used under another). Each test hangs or fails on a client that shares
the parent's pipes with its children, or whose daemon dies with its first event loop.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import operator
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Annotated, Any, Dict, List, TypedDict

import pytest

import ckptd
from conftest import HERE, SRC, child_env
from test_langgraph_conformance import require

FORK = multiprocessing.get_context("fork")
N_WORKERS = 8
ROUNDS = 200

#: What the pool workers use: set by a test before it forks the pool.
_shared: Dict[str, Any] = {}


def _gone(pid: int) -> bool:
    """True once process ``pid`` has exited (a zombie counts: it has exited)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True
    except OSError:  # no /proc
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False


def _wait_gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not _gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


# ---------------------------------------------------------------------------------------------
# Client in a multiprocessing fork pool


def _worker_roundtrips(w: int) -> Dict[str, Any]:
    client: ckptd.Client = _shared["client"]
    wf = "worker-%d" % w
    rounds = []
    for k in range(ROUNDS):
        saved = client.save(wf, {"worker": w, "k": k, "pid": os.getpid()}, step=k)
        cp = client.load(workflow_id=wf)
        rounds.append((saved["seq"], saved["checkpointId"], cp["checkpointId"], cp.state))
    return {"worker": w, "pid": os.getpid(), "daemon": client.pid, "rounds": rounds}


@pytest.mark.timeout(300)
def test_fork_pool_workers_get_their_own_answers(ckptd_bin: str, db_path: str) -> None:
    client = ckptd.Client(db=db_path, binary=ckptd_bin, args=["--keep-last", "0", "--durability", "normal"],
                          request_timeout=60)
    _shared["client"] = client
    try:
        client.save("parent", {"before": True})
        parent_daemon = client.pid
        pool = FORK.Pool(N_WORKERS)
        try:
            results = pool.map_async(_worker_roundtrips, range(N_WORKERS), chunksize=1).get(timeout=240)
            pool.close()  # the workers exit normally, and close their clients on the way out
            pool.join()
        finally:
            pool.terminate()
        daemon_of: Dict[int, int] = {}
        for res in results:
            w, pid = res["worker"], res["pid"]
            # a worker's own daemon (one per worker process), never the parent's
            assert res["daemon"] is not None and res["daemon"] != parent_daemon
            assert daemon_of.setdefault(pid, res["daemon"]) == res["daemon"]
            assert len(res["rounds"]) == ROUNDS
            for k, (seq, saved_id, loaded_id, state) in enumerate(res["rounds"]):
                assert state == {"worker": w, "k": k, "pid": pid}, (w, k)
                assert loaded_id == saved_id and seq == k + 1, (w, k)
        assert len(set(daemon_of.values())) == len(daemon_of)
        for daemon in daemon_of.values():
            assert _wait_gone(daemon), "a worker's daemon outlived its worker"
        # the parent's client still works, on its own daemon, and sees what the workers saved
        assert client.pid == parent_daemon and client.returncode is None
        assert client.load(workflow_id="parent").state == {"before": True}
        for w in range(N_WORKERS):
            cp = client.load(workflow_id="worker-%d" % w)
            assert cp.state["k"] == ROUNDS - 1 and cp["seq"] == ROUNDS
        assert client.save("parent", {"after": True})["seq"] == 2
    finally:
        _shared.clear()
        client.close()
    assert client.returncode == 0


def _worker_while_parent_busy(w: int) -> List[Any]:
    client: ckptd.Client = _shared["client"]
    out = []
    for k in range(20):
        client.save("child-%d" % w, {"w": w, "k": k})
        out.append(client.load(workflow_id="child-%d" % w).state)
    return out


@pytest.mark.timeout(300)
def test_fork_while_parent_threads_are_mid_call(ckptd_bin: str, db_path: str) -> None:
    """Forks while other threads of the parent hold the client's locks and wait for answers: the
    children must not inherit those locks held (they would wait forever), nor those calls."""
    client = ckptd.Client(db=db_path, binary=ckptd_bin, args=["--keep-last", "0", "--durability", "normal"],
                          request_timeout=60)
    _shared["client"] = client
    stop = threading.Event()
    errors: List[BaseException] = []
    counts = [0] * 4

    def hammer(t: int) -> None:
        try:
            while not stop.is_set():
                counts[t] += 1
                r = client.save("busy-%d" % t, {"t": t, "n": counts[t]})
                assert r["seq"] == counts[t]
                assert client.load(checkpoint_id=r["checkpointId"]).state == {"t": t, "n": counts[t]}
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=hammer, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    try:
        for rnd in range(3):
            with FORK.Pool(4) as pool:
                results = pool.map_async(_worker_while_parent_busy, range(rnd * 4, rnd * 4 + 4)).get(timeout=120)
            for w, states in zip(range(rnd * 4, rnd * 4 + 4), results):
                assert states == [{"w": w, "k": k} for k in range(20)]
    finally:
        stop.set()
        for th in threads:
            th.join(60)
        _shared.clear()
    assert not errors, errors
    assert all(n > 0 for n in counts)
    client.close()
    assert client.returncode == 0


def _child_on_fork_error(conn: Any) -> None:
    client: ckptd.Client = _shared["client"]
    try:
        client.load(workflow_id="wf")
        conn.send(("no error", None))
    except ckptd.ClientForked as e:
        conn.send(("ClientForked", str(e)))
    except BaseException as e:
        conn.send(("other", repr(e)))
    client.close()  # must not stop the parent's daemon either
    conn.close()


@pytest.mark.timeout(60)
def test_on_fork_error_raises_client_forked(ckptd_bin: str, db_path: str) -> None:
    with ckptd.Client(db=db_path, binary=ckptd_bin, on_fork="error", request_timeout=30) as client:
        client.save("wf", {"x": 1})
        _shared["client"] = client
        try:
            here, there = FORK.Pipe()
            p = FORK.Process(target=_child_on_fork_error, args=(there,))
            p.start()
            kind, msg = here.recv() if here.poll(30) else ("timeout", None)
            p.join(30)
        finally:
            _shared.clear()
        assert kind == "ClientForked", (kind, msg)
        assert "process %d" % os.getpid() in msg and "on_fork" in msg
        assert p.exitcode == 0
        assert client.load(workflow_id="wf").state == {"x": 1}  # the parent's daemon is untouched
    with pytest.raises(ValueError, match="on_fork"):
        ckptd.Client(db=db_path, binary=ckptd_bin, on_fork="ignore")


@pytest.mark.timeout(60)
def test_forked_child_exiting_normally_leaves_parent_daemon_alone(ckptd_bin: str, tmp_path: Path) -> None:
    """A child that exits through sys.exit runs the atexit hooks, which close live clients: the
    inherited client must not send `shutdown` (or anything) to the parent's daemon."""
    script = textwrap.dedent(
        """
        import os, sys
        import ckptd
        c = ckptd.Client(db=sys.argv[1], request_timeout=20)
        c.save("wf", {"n": 1})
        daemon = c.pid
        pid = os.fork()
        if pid == 0:
            sys.exit(0)          # atexit: closes the inherited client
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert c.save("wf", {"n": 2})["seq"] == 2, "parent's daemon stopped"
        assert c.pid == daemon and c.returncode is None
        c.close()
        print("ok", c.returncode)
        """
    )
    env = child_env()
    env["CKPTD_PATH"] = ckptd_bin
    p = subprocess.run([sys.executable, "-c", script, str(tmp_path / "x.db")], env=env, capture_output=True,
                       text=True, timeout=50)
    assert p.returncode == 0 and p.stdout.split() == ["ok", "0"], (p.stdout, p.stderr)


# ---------------------------------------------------------------------------------------------
# CkptdSaver in a multiprocessing fork pool, one LangGraph graph per worker


class _State(TypedDict, total=False):
    seen: Annotated[List[int], operator.add]
    turns: int


def _graph(saver: Any) -> Any:
    from langgraph.graph import END, START, StateGraph

    State = _State

    def step(state: _State) -> Dict[str, Any]:
        return {"turns": state.get("turns", 0) + 1}

    g = StateGraph(State)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_edge("step", END)
    return g.compile(checkpointer=saver)


def _lg_worker(w: int) -> Dict[str, Any]:
    saver = _shared["saver"]
    graph = _graph(saver)  # this worker's graph, on the saver created before the fork
    config = {"configurable": {"thread_id": "thread-%d" % w}}
    turns = []
    for _ in range(ROUNDS):
        out = graph.invoke({"seen": [w]}, config)  # loads the thread's latest, saves 2 checkpoints
        turns.append((out["turns"], out["seen"].count(w), len(out["seen"])))
    return {"worker": w, "pid": os.getpid(), "daemon": saver.client.pid, "turns": turns}


@pytest.mark.timeout(300)
def test_fork_pool_langgraph_saver_per_worker_graphs(ckptd_bin: str, db_path: str) -> None:
    require("langgraph.graph", "langgraph.checkpoint.base", "ckptd.langgraph")
    from ckptd.langgraph import CkptdSaver

    saver = CkptdSaver(db=db_path, binary=ckptd_bin, args=["--durability", "normal"], request_timeout=60)
    _shared["saver"] = saver
    try:
        parent_graph = _graph(saver)
        parent_cfg = {"configurable": {"thread_id": "parent"}}
        assert parent_graph.invoke({"seen": [-1]}, parent_cfg)["turns"] == 1
        parent_daemon = saver.client.pid
        with FORK.Pool(N_WORKERS) as pool:
            results = pool.map_async(_lg_worker, range(N_WORKERS), chunksize=1).get(timeout=240)
        for res in results:
            w = res["worker"]
            assert res["daemon"] is not None and res["daemon"] != parent_daemon
            # every turn saw this worker's thread only, in order
            assert res["turns"] == [(i + 1, i + 1, i + 1) for i in range(ROUNDS)], w
        # the parent's saver still works and reads every worker's thread from the same database
        assert saver.client.pid == parent_daemon and saver.client.returncode is None
        for w in range(N_WORKERS):
            values = parent_graph.get_state({"configurable": {"thread_id": "thread-%d" % w}}).values
            assert values == {"seen": [w] * ROUNDS, "turns": ROUNDS}
        assert parent_graph.invoke({"seen": [-1]}, parent_cfg) == {"seen": [-1, -1], "turns": 2}
    finally:
        _shared.clear()
        saver.close()
    assert saver.client.returncode == 0


# ---------------------------------------------------------------------------------------------
# gunicorn --preload


def _require_gunicorn() -> None:
    try:
        import gunicorn  # noqa: F401
    except ImportError as e:
        msg = "gunicorn is missing (%s): pip install gunicorn (a test-only dependency)" % e
        if os.environ.get("CI") == "true":
            pytest.fail(msg + " (CI=true: required)", pytrace=False)
        pytest.skip(msg)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(base: str, wf: str, n: int, timeout: float = 30) -> Dict[str, Any]:
    with urllib.request.urlopen("%s?wf=%s&n=%d" % (base, wf, n), timeout=timeout) as r:
        assert r.status == 200
        body: Dict[str, Any] = json.loads(r.read())
    body["asked"] = {"wf": wf, "n": n}
    return body


@pytest.mark.timeout(300)
def test_gunicorn_preload_workers_serve_saves(ckptd_bin: str, tmp_path: Path) -> None:
    _require_gunicorn()
    db = str(tmp_path / "web.db")
    port = _free_port()
    env = child_env()
    env.update(CKPTD_PATH=ckptd_bin, CKPTD_TEST_DB=db, PYTHONPATH=str(HERE) + os.pathsep + env["PYTHONPATH"])
    log_path = tmp_path / "gunicorn.log"
    argv = [sys.executable, "-m", "gunicorn", "--preload", "--workers", "4", "--bind", "127.0.0.1:%d" % port,
            "--timeout", "90", "--graceful-timeout", "30"]
    helptext = subprocess.run(argv[:3] + ["--help"], capture_output=True, text=True, timeout=60).stdout
    if "--no-control-socket" in helptext:  # gunicorn >= 27: not the shared ~/.gunicorn/gunicorn.ctl
        argv.append("--no-control-socket")
    with open(log_path, "wb") as log:
        server = subprocess.Popen(
            argv + ["gunicorn_app:app"],
            cwd=str(HERE), env=env, stdout=log, stderr=subprocess.STDOUT,
        )
    base = "http://127.0.0.1:%d/" % port
    responses: List[Dict[str, Any]] = []
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                responses.append(_get(base, "probe", 0, timeout=5))
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise AssertionError("gunicorn did not come up:\n" + log_path.read_text())
                time.sleep(0.1)
        # real HTTP requests, 16 at a time, until all 4 workers have served some (at least 200)
        i = 0
        with ThreadPoolExecutor(16) as ex:
            while i < 2000:
                batch = [ex.submit(_get, base, "req-%d" % j, j) for j in range(i, i + 100)]
                responses.extend(f.result(timeout=120) for f in batch)
                i += 100
                if i >= 200 and len({r["worker"] for r in responses}) == 4:
                    break
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:  # pragma: no cover
            server.kill()
            server.wait()
    log_text = log_path.read_text()
    assert server.returncode == 0, log_text
    master_daemon = responses[0]["masterDaemon"]
    daemon_of: Dict[int, int] = {}
    for r in responses:
        asked = r["asked"]
        assert r["state"] == {"wf": asked["wf"], "n": asked["n"], "worker": r["worker"]}, r  # its own save
        assert r["loadedId"] == r["saved"]["checkpointId"] and r["saved"]["seq"] == 1
        assert r["daemon"] != master_daemon
        assert daemon_of.setdefault(r["worker"], r["daemon"]) == r["daemon"]
    assert len(daemon_of) == 4 and len(set(daemon_of.values())) == 4, daemon_of
    # every worker's daemon and the master's ended with gunicorn
    for pid in list(daemon_of.values()) + [master_daemon]:
        assert _wait_gone(pid), "daemon %d still running\n%s" % (pid, log_text)
    # and everything acknowledged is in the database
    with ckptd.Client(db=db, binary=ckptd_bin) as c:
        names = {w["workflowId"] for w in c.workflows()}
    assert names == {"master", "probe"} | {"req-%d" % j for j in range(i)}


# ---------------------------------------------------------------------------------------------
# AsyncClient across event loops


@pytest.mark.timeout(120)
def test_async_client_follows_asyncio_run(ckptd_bin: str, db_path: str) -> None:
    client = ckptd.AsyncClient(db=db_path, binary=ckptd_bin, args=["--keep-last", "0"], request_timeout=30)

    async def first() -> int:
        await client.start()
        for i in range(20):
            await client.save("wf", {"i": i}, step=i)

        async def stuck_step() -> None:
            async with client.workflow("wf-step") as wf:
                async with wf.step("wait", 0):
                    await asyncio.sleep(3600)

        # still running when asyncio.run ends: cancelled, and its step saves `interrupted`
        # before the daemon stops
        asyncio.get_running_loop().create_task(stuck_step())
        await asyncio.sleep(0.2)
        assert client.pid is not None
        return client.pid

    pid1 = asyncio.run(first())
    assert client.returncode == 0  # the first daemon ended with its loop, cleanly
    assert _wait_gone(pid1)

    async def second() -> None:
        # a new daemon, in this loop, same database; the first calls come from 10 tasks at once
        cps = await asyncio.gather(*(client.load(workflow_id="wf") for _ in range(10)))
        assert all(cp.state == {"i": 19} and cp["seq"] == 20 for cp in cps)
        assert client.pid is not None and client.pid != pid1
        assert (await client.load(workflow_id="wf-step"))["phase"] == "interrupted"
        assert (await client.save("wf", {"i": 20}))["seq"] == 21

    asyncio.run(second())
    assert client.returncode == 0

    async def third() -> None:
        assert (await client.load(workflow_id="wf")).state == {"i": 20}
        await client.close()

    asyncio.run(third())
    assert client.returncode == 0 and client.closed


@pytest.mark.timeout(120)
def test_async_client_moves_to_a_second_loop_of_the_same_thread(ckptd_bin: str, db_path: str) -> None:
    client = ckptd.AsyncClient(db=db_path, binary=ckptd_bin, request_timeout=20)
    loop1 = asyncio.new_event_loop()
    loop2 = asyncio.new_event_loop()
    loop3 = asyncio.new_event_loop()
    try:
        loop1.run_until_complete(client.start())
        loop1.run_until_complete(client.save("wf", {"n": 1}))
        pid = client.pid

        async def use(n: int) -> Any:
            cp = await client.load(workflow_id="wf")
            await client.save("wf", {"n": n})
            return cp.state

        assert loop2.run_until_complete(use(2)) == {"n": 1}  # loop1 open, not running: moved
        assert loop1.run_until_complete(use(3)) == {"n": 2}  # and back
        loop1.close()  # closed without shutdown_asyncgens: the daemon lives on
        assert loop3.run_until_complete(use(4)) == {"n": 3}
        assert client.pid == pid and client.returncode is None
        loop3.run_until_complete(client.close())
        assert client.returncode == 0
    finally:
        for lp in (loop1, loop2, loop3):
            lp.close()


@pytest.mark.timeout(120)
def test_async_client_from_a_loop_while_its_loop_runs_in_another_thread(ckptd_bin: str, db_path: str) -> None:
    client = ckptd.AsyncClient(db=db_path, binary=ckptd_bin, request_timeout=20)
    home = asyncio.new_event_loop()
    t = threading.Thread(target=home.run_forever, daemon=True)
    t.start()
    try:
        asyncio.run_coroutine_threadsafe(client.start(), home).result(30)
        asyncio.run_coroutine_threadsafe(client.save("wf", {"n": 1}), home).result(30)

        async def elsewhere() -> None:
            with pytest.raises(ckptd.WrongEventLoop) as ei:
                await client.load(workflow_id="wf")
            assert repr(home) in str(ei.value) and repr(asyncio.get_running_loop()) in str(ei.value)
            await client.close()  # closing is allowed: it runs in the client's loop

        asyncio.run(elsewhere())
        assert client.returncode == 0
    finally:
        home.call_soon_threadsafe(home.stop)
        t.join(10)
        home.close()


def _child_uses_async_client(conn: Any) -> None:
    client: ckptd.AsyncClient = _shared["aclient"]

    async def use() -> Any:
        await client.save("child", {"pid": os.getpid()})
        cp = await client.load(workflow_id="child")
        pid = client.pid
        await client.close()
        return cp.state, pid, client.returncode

    try:
        conn.send(("ok", asyncio.run(use())))
    except BaseException as e:
        conn.send(("error", repr(e)))
    conn.close()


@pytest.mark.timeout(60)
def test_async_client_in_a_forked_child(ckptd_bin: str, db_path: str) -> None:
    client = ckptd.AsyncClient(db=db_path, binary=ckptd_bin, request_timeout=20)
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(client.start())
        loop.run_until_complete(client.save("parent", {"n": 1}))
        parent_daemon = client.pid
        _shared["aclient"] = client
        here, there = FORK.Pipe()
        p = FORK.Process(target=_child_uses_async_client, args=(there,))
        p.start()
        kind, value = here.recv() if here.poll(40) else ("timeout", None)
        p.join(30)
        assert kind == "ok", value
        state, child_daemon, code = value
        assert state == {"pid": p.pid} and child_daemon != parent_daemon and code == 0
        # the parent's client still works on its own daemon
        assert loop.run_until_complete(client.load(workflow_id="child")).state == {"pid": p.pid}
        assert client.pid == parent_daemon
        loop.run_until_complete(client.close())
        assert client.returncode == 0
    finally:
        _shared.clear()
        loop.close()


class _NoPipeWatchLoop(asyncio.SelectorEventLoop):
    """A loop like Windows' proactor loop: it cannot watch pipes."""

    def add_reader(self, *args: Any) -> None:  # type: ignore[override]
        raise NotImplementedError

    def add_writer(self, *args: Any) -> None:  # type: ignore[override]
        raise NotImplementedError


def _run_and_shut_down(loop: asyncio.AbstractEventLoop, coro: Any) -> Any:
    """What asyncio.run does with a loop: run, cancel leftovers, shutdown_asyncgens, close."""
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


@pytest.mark.timeout(120)
def test_async_client_on_a_loop_that_cannot_watch_pipes(ckptd_bin: str, db_path: str) -> None:
    client = ckptd.AsyncClient(db=db_path, binary=ckptd_bin, request_timeout=20)

    async def first() -> int:
        await client.start()
        big = os.urandom(3 << 20)  # more than a pipe holds: written while the daemon reads
        results = await asyncio.gather(*(client.save("wf-%d" % i, {"i": i}) for i in range(50)),
                                       client.save("big", big))
        assert [r["seq"] for r in results] == [1] * 51
        assert (await client.load(workflow_id="big")).state == big
        assert client.pid is not None
        return client.pid

    pid1 = _run_and_shut_down(_NoPipeWatchLoop(), first())
    assert client.returncode == 0 and _wait_gone(pid1)

    async def second() -> None:
        assert (await client.load(workflow_id="wf-7")).state == {"i": 7}
        assert client.pid != pid1
        client.kill()  # the reader thread reports the death to the loop
        with pytest.raises(ckptd.DaemonDied, match="SIGKILL"):
            await client.load(workflow_id="wf-7")
        await client.close()

    _run_and_shut_down(_NoPipeWatchLoop(), second())
