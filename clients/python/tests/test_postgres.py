"""The client on a PostgreSQL database: ``db`` takes a ``postgres://`` URL, which reaches the
daemon through its environment (``CKPTD_DB``), never its command line, and which no reply shows
with its password. Needs the run's throwaway cluster (CKPTD_TEST_PG_URL, see conftest.py)."""

from __future__ import annotations

import asyncio
import os
from urllib.parse import urlsplit, urlunsplit

import ckptd
from ckptd import _common as C

PASSWORD = "py-secret-pw"


def with_password(url: str) -> str:
    """``url`` with PASSWORD (the test cluster's trust authentication accepts any)."""
    p = urlsplit(url)
    netloc = "%s:%s@%s" % (p.username, PASSWORD, p.hostname or "")
    return urlunsplit((p.scheme, netloc, p.path, p.query, p.fragment))


def cmdline(pid: int) -> str:
    with open("/proc/%d/cmdline" % pid, "rb") as f:
        return f.read().replace(b"\0", b" ").decode()


def test_argv_and_env_unit() -> None:
    url = "postgresql://u:pw@h/db"
    assert C.build_argv("ckptd", url, ["--keep-last", "3"]) == ["ckptd", "--keep-last", "3"]
    assert C.build_argv("ckptd", "/tmp/x.db", []) == ["ckptd", "--db", "/tmp/x.db"]
    env = C.spawn_env(url, {"A": "1"})
    assert env == {"A": "1", "CKPTD_DB": url}
    assert C.spawn_env("/tmp/x.db", {"A": "1"}) == {"A": "1"}
    assert C.spawn_env("/tmp/x.db", None) is None
    assert C.spawn_env("POSTGRES://h/db", None)["CKPTD_DB"] == "POSTGRES://h/db"


def test_client_on_postgres(ckptd_bin: str, pg_url: str) -> None:
    url = with_password(pg_url)
    with ckptd.Client(db=url, binary=ckptd_bin) as c:
        assert c.pid is not None
        line = cmdline(c.pid)
        assert "postgres://" not in line and PASSWORD not in line, line
        assert PASSWORD not in c.server_info["dbPath"]
        assert c.server_info["dbPath"].startswith("postgres://")
        saved = c.save("wf", {"step": 1}, step=1)
        assert saved["seq"] == 1
        assert c.load(workflow_id="wf").state == {"step": 1}
        stats = c.stats()
        assert PASSWORD not in repr(stats)
        assert stats["db"]["checkpoints"] == 1
    # a second client (another process) on the same database sees the checkpoint
    with ckptd.Client(db=url, binary=ckptd_bin) as c2:
        assert c2.load(workflow_id="wf")["checkpointId"] == saved["checkpointId"]


def test_async_client_on_postgres(ckptd_bin: str, pg_url: str) -> None:
    async def main() -> None:
        async with ckptd.AsyncClient(db=with_password(pg_url), binary=ckptd_bin) as c:
            assert c.pid is not None
            assert PASSWORD not in cmdline(c.pid)
            await c.save("wf", {"n": 2}, step=2)
            assert (await c.load(workflow_id="wf")).state == {"n": 2}

    asyncio.run(main())


def test_other_process_saves_are_notified(ckptd_bin: str, pg_url: str) -> None:
    """checkpoint/saved of another daemon (LISTEN/NOTIFY) reaches an opted-in client."""
    import threading

    got = []
    seen = threading.Event()

    def on_note(method: str, params: dict) -> None:
        got.append((method, params))
        seen.set()

    with ckptd.Client(db=pg_url, binary=ckptd_bin, events=["checkpoint/saved"], on_notification=on_note) as listener:
        with ckptd.Client(db=pg_url, binary=ckptd_bin) as writer:
            r = writer.save("wf-remote", {"x": 1}, step=3)
        assert seen.wait(10), "no notification of the other process's save"
        assert got[0] == ("checkpoint/saved", {"checkpointId": r["checkpointId"], "workflowId": "wf-remote",
                                               "namespace": "", "seq": 1, "phase": "completed", "step": 3})
        listener.stats()
    assert os.environ.get("CKPTD_DB") is None  # the test's own environment is untouched
