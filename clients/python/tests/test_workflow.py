"""The workflow/step helper: phases, retryability, task lists, signals (in-process and a REAL
SIGINT/SIGTERM sent to a child process)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any, List, Tuple

import pytest

import ckptd
from conftest import HERE, child_env


def phases(client: ckptd.Client, wid: str) -> List[Tuple[int, str]]:
    return [(c["step"], c["phase"]) for c in reversed(client.list(wid, limit=1000))]


def test_steps_save_before_and_completed_and_carry_state(client: ckptd.Client) -> None:
    with client.workflow("wf", initial_state={"n": 0}, workflow_hash="h1", metadata={"run": 1}) as wf:
        assert wf.resume() is None and wf.start_step == 0 and wf.state == {"n": 0}
        with wf.step("one") as s:
            assert s.index == 0 and s.input == {"n": 0} and not s.retry
            s.state = {"n": 1}
        assert s.phase == "completed" and s.result is not None and wf.state == {"n": 1}
        with wf.step("two") as s2:  # state not set: carries the previous state
            assert s2.index == 1
        assert wf.state == {"n": 1}
    assert phases(client, "wf") == [(0, "before_step"), (0, "completed"), (1, "before_step"), (1, "completed")]
    cps = [client.load(checkpoint_id=c["checkpointId"]) for c in reversed(client.list("wf"))]
    assert [cp.state for cp in cps] == [{"n": 0}, {"n": 1}, {"n": 1}, {"n": 1}]
    assert [cp.step_name for cp in cps] == ["one", "one", "two", "two"]
    assert all(cp["workflowHash"] == "h1" and cp.metadata == {"run": 1} for cp in cps)
    # each checkpoint's parent is the one saved before it
    assert [cp["parentId"] for cp in cps[1:]] == [cp.checkpoint_id for cp in cps[:-1]]


class Flaky(Exception):
    retryable = True


class Fatal(ConnectionError):
    retryable = False


@pytest.mark.parametrize(
    "exc,retryable",
    [
        (ValueError("bad input"), False),
        (TimeoutError("slow"), True),
        (ConnectionResetError("reset"), True),
        (FileNotFoundError("gone"), True),
        (Flaky("try again"), True),
        (Fatal("never"), False),
    ],
)
def test_failed_step(client: ckptd.Client, exc: Exception, retryable: bool) -> None:
    with client.workflow("wf", initial_state={"items": [1]}) as wf:
        with pytest.raises(type(exc)) as ei:
            with wf.step("work", index=0) as s:
                s.state["items"].append(2)  # mutated in place, then the step fails
                raise exc
        assert ei.value is exc and s.phase == "failed"
    cp = client.load(workflow_id="wf")
    assert cp.phase == "failed" and cp.step == 0
    assert cp.error == {"message": "%s: %s" % (type(exc).__name__, exc), "retryable": retryable}
    assert cp.state == {"items": [1]}  # the step's input, not the half-done state
    if retryable:
        plan = client.resume_plan("wf")
        assert plan.start_step == 0 and plan.retry
    else:
        with pytest.raises(ckptd.ResumeValidationError) as ei2:
            client.resume_plan("wf")
        assert [p["code"] for p in ei2.value.problems] == ["not_retryable"]


def test_custom_retryable_tuple(client: ckptd.Client) -> None:
    with client.workflow("wf", retryable=(KeyError,)) as wf:
        with pytest.raises(KeyError):
            with wf.step("k", index=0):
                raise KeyError("k")
        with pytest.raises(OSError):
            with wf.step("o", index=1):
                raise OSError("o")
    errs = [c["error"] for c in reversed(client.list("wf", phase="failed"))]
    assert [e["retryable"] for e in errs] == [True, False]


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), SystemExit(3), ckptd.Interrupted(15)])
def test_interrupted_step(client: ckptd.Client, exc: BaseException) -> None:
    with client.workflow("wf", initial_state="in") as wf:
        with pytest.raises(type(exc)):
            with wf.step("s", index=4) as s:
                s.state = "half"
                raise exc
    assert phases(client, "wf") == [(4, "before_step"), (4, "interrupted")]
    cp = client.load(workflow_id="wf")
    assert cp.state == "in" and cp.error is None
    plan = client.resume_plan("wf")
    assert plan.start_step == 4 and plan.retry


def test_sigterm_in_step_saves_interrupted_and_restores_handler(client: ckptd.Client) -> None:
    hits: List[int] = []

    def mine(signum: int, frame: Any) -> None:
        hits.append(signum)

    prev = signal.signal(signal.SIGTERM, mine)
    try:
        with client.workflow("wf") as wf:
            with pytest.raises(ckptd.Interrupted) as ei:
                with wf.step("s", index=0):
                    assert signal.getsignal(signal.SIGTERM) is not mine
                    os.kill(os.getpid(), signal.SIGTERM)
                    for _ in range(100):  # the handler runs between bytecodes
                        time.sleep(0.01)
                    raise AssertionError("SIGTERM did not interrupt the step")
            assert ei.value.signum == signal.SIGTERM
            assert signal.getsignal(signal.SIGTERM) is mine
            with wf.step("t", index=1):  # handler installed again for the next step, then restored
                pass
            assert signal.getsignal(signal.SIGTERM) is mine
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        assert hits == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, prev)
    assert phases(client, "wf") == [(0, "before_step"), (0, "interrupted"), (1, "before_step"), (1, "completed")]


def test_resume_skips_done_steps_and_restores_tasks(client: ckptd.Client) -> None:
    with client.workflow("dag", initial_state={"n": 0}) as wf:
        wf.resume()
        with wf.step("a", index=0) as s:
            s.state = {"n": 1}
        with pytest.raises(TimeoutError):
            with wf.step("b", index=1) as s:
                s.completed_tasks = ["t1", "t2"]
                s.pending_tasks = [{"id": "t3"}]
                raise TimeoutError("llm timeout")
    with client.workflow("dag") as wf2:
        plan = wf2.resume()
        assert plan is not None and plan.start_step == 1 and plan.retry
        assert [wf2.should_run(i) for i in range(3)] == [False, True, True]
        assert wf2.state == {"n": 1}
        assert wf2.completed_tasks == ["t1", "t2"] and wf2.pending_tasks == [{"id": "t3"}]
        with wf2.step("b", index=1) as s:
            assert s.retry and s.completed_tasks == ["t1", "t2"] and s.pending_tasks == [{"id": "t3"}]
            s.completed_tasks.append("t3")
            s.pending_tasks = []
            s.state = {"n": 2}
        with wf2.step("c", index=2) as s:
            assert not s.retry and s.completed_tasks == [] and s.input == {"n": 2}
        assert wf2.skipped == [0] and wf2.ran == [1, 2]
    cp = client.list("dag", phase="completed")[1]
    assert cp["step"] == 1 and cp["completedTaskCount"] == 3 and cp["pendingTaskCount"] == 0


def test_workflow_hash_mismatch_blocks_resume_unless_forced(client: ckptd.Client) -> None:
    with client.workflow("wf", workflow_hash="v1") as wf:
        with wf.step("a", index=0):
            pass
    with pytest.raises(ckptd.ResumeValidationError):
        client.workflow("wf", workflow_hash="v2").resume()
    wf = client.workflow("wf", workflow_hash="v2", force=True)
    plan = wf.resume()
    assert plan is not None and plan.start_step == 1
    assert [w["code"] for w in plan.warnings] == ["workflow_hash_mismatch"]


def test_complete_on_exit(client: ckptd.Client) -> None:
    with client.workflow("wf", complete_on_exit=True, preserve_on_complete=True) as wf:
        with wf.step("a"):
            pass
    info = {w["workflowId"]: w for w in client.workflows()}["wf"]
    assert info["completed"] is True and info["resumable"] is False
    with pytest.raises(ValueError):
        with client.workflow("wf2", complete_on_exit=True) as wf:
            with wf.step("a"):
                pass
            raise ValueError("not completed")
    assert {w["workflowId"]: w for w in client.workflows()}["wf2"]["completed"] is False


def test_step_save_failure_does_not_hide_the_step_error(ckptd_bin: str, db_path: str) -> None:
    c = ckptd.Client(db=db_path, binary=ckptd_bin)
    try:
        with c.workflow("wf") as wf:
            with pytest.raises(ValueError, match="original"):
                with wf.step("a", index=0):
                    c.kill()
                    time.sleep(0.2)
                    raise ValueError("original")
    finally:
        c.close(timeout=2)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_real_signal_to_child_saves_interrupted(ckptd_bin: str, db_path: str, sig: int) -> None:
    wid = "child-%d" % sig
    p = subprocess.Popen([sys.executable, str(HERE / "child_workflow.py"), db_path, ckptd_bin, wid],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env())
    try:
        assert p.stdout is not None
        line = p.stdout.readline()
        assert line.strip() == b"READY", (line, p.stderr.read() if p.stderr else b"")
        p.send_signal(sig)
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert b"NOT REACHED" not in out
    assert p.returncode != 0
    assert (b"KeyboardInterrupt" in err) if sig == signal.SIGINT else (b"Interrupted" in err or p.returncode == -signal.SIGINT), err
    with ckptd.Client(db=db_path, binary=ckptd_bin) as c:
        assert phases(c, wid) == [(0, "before_step"), (0, "completed"), (1, "before_step"), (1, "interrupted")]
        last = c.load(workflow_id=wid)
        assert last.state == {"n": 1}  # the input of step 1
        assert last.completed_tasks == ["task-a"] and last.pending_tasks == [{"id": "task-b"}]
        plan = c.resume_plan(wid, workflow_hash="h")
        assert plan.start_step == 1 and plan.retry and plan.state == {"n": 1}
