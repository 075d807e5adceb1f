"""Claims: the claim helper renews in the background, fences the workflow helpers' saves, and a
worker that loses its lease raises (-32008's data) and stores nothing more. Every test runs on
SQLite and on PostgreSQL (a fresh schema of the run's throwaway cluster, CKPTD_TEST_PG_URL), where
the workers of a fleet on several hosts hand workflows over."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, List

import pytest

import ckptd
from conftest import HERE, child_env, pg_schema_url


@pytest.fixture(params=["sqlite", "postgres"])
def db_path(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The database of one test (conftest's client uses it too): a SQLite file, or a PostgreSQL
    URL of a schema of its own (skips without the run's cluster, fails under CI=true)."""
    if request.param == "postgres":
        return pg_schema_url(request.getfixturevalue("pg_base_url"))
    return str(tmp_path / "ckptd.db")


def other(ckptd_bin: str, db_path: str) -> ckptd.Client:
    return ckptd.Client(db=db_path, binary=ckptd_bin, request_timeout=120)


def test_claim_helper_renews_past_its_lease(client: ckptd.Client, ckptd_bin: str, db_path: str) -> None:
    with other(ckptd_bin, db_path) as rival:
        with client.claim("wf", "worker-a", 1) as c:
            assert c.held and c.fencing_token == 1 and c.owner == "worker-a"
            with client.workflow("wf", claim=c, initial_state=0) as wf:
                deadline = time.monotonic() + 3.5  # 3.5 leases
                i = 0
                while time.monotonic() < deadline:
                    with wf.step("s%d" % i, index=i) as s:
                        s.state = i
                    with pytest.raises(ckptd.Claimed) as ei:
                        rival.claim_workflow("wf", "worker-b", 10)
                    assert ei.value.code == -32008 and ei.value.owner == "worker-a" and ei.value.expires_at
                    # a write without the token is refused while the claim is live
                    with pytest.raises(ckptd.Claimed):
                        rival.save("wf", {"by": "rival"})
                    i += 1
                    time.sleep(0.25)
            assert c.renewals >= 6, c.renewals
            c.check()
        assert c.released and not c.held
        # released: the rival claims it now, under a higher token
        r = rival.claim_workflow("wf", "worker-b", 10)
        assert r["fencingToken"] == 2 and r["owner"] == "worker-b"
    steps = {cp["step"] for cp in client.list("wf", limit=1000)}
    assert steps == set(range(i))


def test_claim_refused_names_the_holder(client: ckptd.Client, ckptd_bin: str, db_path: str) -> None:
    with client.claim("wf", lease_seconds=30) as c:
        assert ":" in c.owner  # host:pid by default
        with other(ckptd_bin, db_path) as rival:
            with pytest.raises(ckptd.Claimed) as ei:
                with rival.claim("wf", "worker-b", 30):
                    pass  # not reached
            e = ei.value
            assert not isinstance(e, ckptd.ClaimLost)
            assert e.owner == c.owner and e.expires_at == c.expires_at and e.workflow_id == "wf"
            assert "claimed by" in e.reason
            # the claim workflows list leaves it out while it is held
            rival.save("free", 1)
            assert [w["workflowId"] for w in rival.workflows(claimable=True)] == ["free"]


def test_workflow_helper_under_a_claim(client: ckptd.Client) -> None:
    with client.claim("wf", "w", 30) as c:
        with client.workflow("wf", claim=c, complete_on_exit=True, preserve_on_complete=True) as wf:
            wf.resume()
            with wf.step("one") as s:
                s.state = {"n": 1}
        with pytest.raises(ValueError, match="claim is on workflow"):
            client.workflow("other", claim=c)
    cps = client.list("wf")
    assert [cp["phase"] for cp in cps] == ["completed", "before_step"]
    assert client.workflows(resumable_only=False)[0]["completed"]


def _run_paused_child(ckptd_bin: str, db_path: str, mode: str) -> List[Any]:
    """Runs child_claim.py, pauses it (SIGSTOP) until its 2 s lease ran out, takes the workflow
    over, resumes the child and returns (its outcome, the take-over's claim)."""
    child = subprocess.Popen(
        [sys.executable, str(HERE / "child_claim.py"), db_path, ckptd_bin, "wf", "2", mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=child_env(),
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        line = child.stdout.readline()
        assert line.startswith("READY"), line
        token = int(line.split()[1])
        os.kill(child.pid, signal.SIGSTOP)  # a worker paused (GC, swap, a laptop lid...)
        with other(ckptd_bin, db_path) as b:
            deadline = time.monotonic() + 20
            while True:
                try:
                    took = b.claim_workflow("wf", "worker-b", 30)
                    break
                except ckptd.Claimed as e:
                    assert e.owner == "child-worker"
                    assert time.monotonic() < deadline, "the paused worker's lease never ran out"
                    time.sleep(0.2)
            assert took["fencingToken"] > token
            os.kill(child.pid, signal.SIGCONT)
            child.stdin.write("go\n")
            child.stdin.flush()
            out = json.loads(child.stdout.readline())
            assert child.wait(timeout=60) == 0
            return [out, took, b.list("wf", limit=100)]
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGCONT)
            child.kill()
            child.wait()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_paused_worker_loses_its_lease_and_raises(ckptd_bin: str, db_path: str, mode: str) -> None:
    out, took, stored = _run_paused_child(ckptd_bin, db_path, mode)
    # the child raised a Claimed (ClaimLost when its renewal noticed first) carrying -32008's data
    assert out["error"] in ("Claimed", "ClaimLost"), out
    assert out["code"] == -32008, out
    assert out["data"]["owner"] == "worker-b" and out["data"]["workflowId"] == "wf", out
    # nothing of step 1 is stored: only step 0's two checkpoints
    assert sorted((cp["step"], cp["phase"]) for cp in stored) == [(0, "before_step"), (0, "completed")]


def test_lost_claim_raises_on_exit(client: ckptd.Client, ckptd_bin: str, db_path: str) -> None:
    c = client.claim("wf", "a", 1)
    c.acquire()
    c._stop.set()  # renewals stop: as if this worker hung
    c._thread.join()  # type: ignore[union-attr]
    time.sleep(1.1)
    with other(ckptd_bin, db_path) as b:
        b.claim_workflow("wf", "b", 30)
    with pytest.raises(ckptd.ClaimLost) as ei:
        c.renew()
    assert ei.value.code == -32008 and ei.value.owner == "b"
    assert c.lost is ei.value and not c.held
    with pytest.raises(ckptd.ClaimLost):
        c.__exit__(None, None, None)
    with pytest.raises(ckptd.ClaimLost):
        client.workflow("wf", claim=c)._token()


def test_async_claim_helper_renews_past_its_lease(ckptd_bin: str, db_path: str) -> None:
    async def main() -> None:
        async with ckptd.AsyncClient(db=db_path, binary=ckptd_bin, args=["--keep-last", "0"], request_timeout=120) as client:
            async with client.claim("wf", "async-a", 1) as c:
                async with client.workflow("wf", claim=c) as wf:
                    for i in range(6):
                        async with wf.step("s%d" % i) as s:
                            s.state = i
                        await asyncio.sleep(0.5)
                        with pytest.raises(ckptd.Claimed):
                            await client.claim_workflow("wf", "async-b", 5)
                assert c.renewals >= 6
            assert c.released
            r = await client.claim_workflow("wf", "async-b", 5)
            assert r["fencingToken"] == 2
            assert len(await client.list("wf", limit=100)) == 12

    asyncio.run(main())


def test_resume_on_another_machine(client: ckptd.Client, tmp_path: Path) -> None:
    """sources_root: the recorded sources compared with the same tree checked out elsewhere."""
    here, there = tmp_path / "host-a", tmp_path / "host-b"
    for d in (here, there):
        (d / "pkg").mkdir(parents=True)
        (d / "pkg" / "agent.py").write_text("print('v1')\n")
    with client.workflow("wf", sources=str(here)) as wf:
        with wf.step("one") as s:
            s.state = 1
    (here / "pkg" / "agent.py").write_text("print('v2: drifted here only')\n")
    with client.workflow("wf", sources_root=str(there)) as wf:
        plan = wf.resume()
        assert plan is not None and plan.start_step == 1
        assert plan["drift"]["drifted"] is False and plan["drift"]["root"] == str(there)
        assert plan["drift"]["recordedRoot"] == str(here)
    st = client.drift_status(workflow_id="wf", sources_root=str(there))
    assert st["drifted"] is False
    with pytest.raises(ckptd.ResumeValidationError):
        client.resume_plan("wf")
    with pytest.raises(ckptd.InvalidParams) as ei:
        client.drift_status(workflow_id="wf", sources_root=str(tmp_path / "missing"))
    assert ei.value.data["field"] == "sourcesRoot"
