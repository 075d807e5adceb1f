"""Validation checkpoints and the compensation log through the real daemon: classification,
the list filter, -32602 for NaN, required compensations, a rollback killed half-way and resumed
(each action exactly once, in reverse registration order), the async helper, and
examples/saga_rollback.py. Every test that stores something runs on SQLite and on PostgreSQL
(a fresh schema of the run's throwaway cluster, CKPTD_TEST_PG_URL)."""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

import ckptd
from ckptd import _common as C
from conftest import CLIENT_ROOT, HERE, child_env, pg_schema_url

EXAMPLE = CLIENT_ROOT / "examples" / "saga_rollback.py"


@pytest.fixture(params=["sqlite", "postgres"])
def db_path(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The database of one test (conftest's client uses it too): a SQLite file, or a PostgreSQL
    URL of a schema of its own (skips without the run's cluster, fails under CI=true)."""
    if request.param == "postgres":
        return pg_schema_url(request.getfixturevalue("pg_base_url"))
    return str(tmp_path / "ckptd.db")


def test_validation_param_is_json() -> None:
    # JSON has no number for NaN / infinities: they go as strings the daemon names in -32602
    assert C.validation_param({"confidence": float("nan")}) == {"confidence": "NaN"}
    assert C.validation_param({"confidence": float("inf"), "message": "m"}) == {"confidence": "Infinity", "message": "m"}
    assert C.validation_param({"confidence": -math.inf, "details": {"a": 1}}) == {"confidence": "-Infinity", "details": {"a": 1}}
    assert C.validation_param({"confidence": 0.5, "message": None}) == {"confidence": 0.5}
    with pytest.raises(ValueError):
        C.validation_param({"confidence": 0.5, "score": 1})  # only the names the daemon knows
    with pytest.raises(ValueError):
        C.validation_param({"message": "x"})
    with pytest.raises(ValueError):
        C.rollback_plan_params("wf", None, "c-1", True)


def test_validation_classified_stored_and_filtered(client: ckptd.Client) -> None:
    r = client.configure("wf", validation={"minConfidence": 0.6, "steps": {"search": {"minConfidence": 0.3, "warningThreshold": 0.5}}})
    assert r["validation"]["minConfidence"] == 0.6 and r["validation"]["warningThreshold"] == 0.85
    with client.workflow("wf") as wf:
        results: Dict[str, Any] = {}
        for i, (name, conf) in enumerate([("plan", 0.85), ("search", 0.3), ("edit", 0.59)]):
            with wf.step(name, index=i) as s:
                s.validate(conf, message="scored %s" % name, details={"i": i})
            results[name] = s.validation
        assert results["plan"] == {"status": "passed", "confidence": 0.85, "thresholds": {"min": 0.6, "warning": 0.85}}
        assert results["search"]["status"] == "warning"  # exactly at the step's own minimum
        assert results["edit"]["status"] == "failed"
        assert wf.rollback_recommended
        assert wf.recommendation == {"kind": "to_checkpoint", "checkpointId": client.list("wf", validation="warning")[0]["checkpointId"]}
        # a completed step without a validation clears the recommendation (the loop went on)
        with wf.step("note", index=3):
            pass
        assert not wf.rollback_recommended and wf.last_validation is None

    assert [c["stepName"] for c in client.list("wf", validation="failed")] == ["edit"]
    assert [c["stepName"] for c in client.list("wf", validation="passed")] == ["plan"]
    cp = client.load(checkpoint_id=client.list("wf", validation="failed")[0]["checkpointId"])
    assert cp["validation"]["message"] == "scored edit" and cp["validation"]["details"] == {"i": 2}

    # a resumed workflow sees the failed validation of its latest checkpoint... once the note
    # step is gone: plan from the failed one
    plan = client.resume_plan("wf", checkpoint_id=cp.checkpoint_id)
    assert plan.validation is not None and plan.validation["status"] == "failed"
    assert plan.validation["recommendation"]["kind"] == "to_checkpoint"


def test_bad_confidence_is_invalid_params_naming_the_field(client: ckptd.Client) -> None:
    for bad, reason in [(float("nan"), "NaN is not a number in [0, 1]"), (1.5, "1.5 is out of range [0, 1]"),
                        (-0.1, "-0.1 is out of range [0, 1]"), (float("inf"), "Infinity is not a number in [0, 1]")]:
        with client.workflow("wf-bad") as wf:
            with pytest.raises(ckptd.InvalidParams) as ei:
                with wf.step("s", index=0) as s:
                    s.validate(bad)
        assert ei.value.data == {"field": "validation.confidence", "reason": reason}
    # nothing completed was stored; the daemon is fine
    assert [c["phase"] for c in client.list("wf-bad")] == ["before_step"] * 4
    with pytest.raises(ckptd.InvalidParams) as ei:
        client.list(validation="great")
    assert ei.value.data["field"] == "validation"


def test_required_compensation(client: ckptd.Client) -> None:
    client.configure("wf-req", compensation={"required": ["write"]})
    with client.workflow("wf-req") as wf:
        with pytest.raises(ckptd.ResumeValidationError) as ei:
            with wf.step("write", index=0):
                pass  # forgot s.compensate
        assert ei.value.code == -32005
        assert ei.value.problems == [{"code": "compensation_required", "stepName": "write",
                                      "message": ei.value.problems[0]["message"]}]
        assert '"write"' in ei.value.problems[0]["message"]
        with wf.step("write", index=0) as s:
            r = s.compensate({"kind": "noop"}, "nothing to undo")
        assert r["seq"] == 1 and s.compensations == [r]
        with wf.step("read", index=1):
            pass  # not required


def run_child(db: str, binary: str, out: Path, log: Path, mode: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(HERE / "child_rollback.py"), db, binary, str(out), str(log), mode],
        capture_output=True, text=True, timeout=120, env=child_env(),
    )


def read_log(log: Path) -> List[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_rollback_killed_half_way_resumes_each_action_exactly_once(ckptd_bin: str, db_path: str, tmp_path: Path) -> None:
    db = db_path
    out = tmp_path / "out"
    out.mkdir()
    log = tmp_path / "undo.log"

    first = run_child(db, ckptd_bin, out, log, "crash")
    assert first.returncode == -signal.SIGKILL, (first.returncode, first.stdout, first.stderr)
    assert "ROLLING BACK" in first.stdout and "NOT REACHED" not in first.stdout
    # newest registration first; the third action never started
    assert read_log(log) == ["undo f4.txt", "undo f3.txt"]
    assert sorted(os.listdir(out)) == ["f1.txt", "f2.txt"]
    with ckptd.Client(db=db, binary=ckptd_bin) as c:
        plan = c.resume_plan("rb-crash")
        assert plan.rollback is not None and plan.rollback["rollbackId"], "the unfinished rollback is on record"
        assert [a["description"] for a in plan.rollback["actions"]] == ["remove f2.txt", "remove f1.txt"]

    second = run_child(db, ckptd_bin, out, log, "resume")
    assert second.returncode == 0, (second.stdout, second.stderr)
    before, after = [json.loads(line) for line in second.stdout.splitlines()]
    assert before["recommended"] is True and before["unfinished"] == plan.rollback["rollbackId"]
    assert after["ran"] == after["calls"] and len(after["ran"]) == 2
    assert after["progress"] == {"total": 4, "done": 4, "failed": 0, "pending": 0}
    assert after["startStep"] == 1 and after["state"] == {"files": []} and after["recommended"] is False
    assert after["pruned"] == 10  # every checkpoint after step 0's completed one
    # each action exactly once, in reverse registration order, across both processes
    assert read_log(log) == ["undo f4.txt", "undo f3.txt", "undo f2.txt", "undo f1.txt"]
    assert os.listdir(out) == []

    # a third run has nothing left to do, and the workflow resumes after step 0
    with ckptd.Client(db=db, binary=ckptd_bin) as c:
        plan = c.resume_plan("rb-crash")
        assert plan.rollback is None and plan.start_step == 1 and plan.step_name == "plan"
        again = c.rollback_plan("rb-crash")
        assert again["actions"] == [] and again["rollbackId"] != before["unfinished"]
        c.rollback_complete(again["rollbackId"])


def test_rollback_handler_failure_is_recorded_and_retried(client: ckptd.Client, tmp_path: Path) -> None:
    paths = [tmp_path / ("g%d" % i) for i in range(3)]
    with client.workflow("wf-fail", initial_state={}) as wf:
        with wf.step("ok", index=0) as s:
            s.validate(0.9)
        with wf.step("write", index=1) as s:
            for p in paths:
                s.compensate({"path": str(p)}, "remove " + p.name)
                p.write_text("x")
            s.validate(0.2)
        assert wf.rollback_recommended
        broken = {"g1"}

        def undo(act: ckptd.CompensationAction) -> None:
            name = Path(act.action["path"]).name
            if name in broken:
                raise PermissionError("read-only file system")
            os.remove(act.action["path"])

        with pytest.raises(ckptd.RollbackFailed) as ei:
            wf.rollback(undo)
        assert ei.value.action.description == "remove g1" and isinstance(ei.value.error, PermissionError)
        assert [p.exists() for p in paths] == [True, True, False]
        plan = client.rollback_plan("wf-fail")
        assert plan["rollbackId"] == ei.value.rollback_id
        assert [(a.description, a.status) for a in plan["actions"]] == [("remove g1", "failed"), ("remove g0", "pending")]
        assert "read-only" in (plan["actions"][0].error or "")
        broken.clear()
        r = wf.rollback(undo)
        assert [a.description for a in r["ran"]] == ["remove g1", "remove g0"]
        assert not any(p.exists() for p in paths)
        assert wf.start_step == 1 and not wf.rollback_recommended


def test_async_workflow_rollback(ckptd_bin: str, db_path: str, tmp_path: Path) -> None:
    async def main() -> Dict[str, Any]:
        async with ckptd.AsyncClient(db=db_path, binary=ckptd_bin) as c:
            async with c.workflow("wf-async", initial_state={"n": 0}) as wf:
                for i in range(2):
                    async with wf.step("s%d" % i, index=i) as s:
                        p = tmp_path / ("a%d" % i)
                        await s.compensate({"path": str(p)}, "remove a%d" % i)
                        p.write_text("x")
                        s.validate(0.9 if i == 0 else 0.1)
                        s.state = {"n": i + 1}
                assert wf.rollback_recommended and s.validation["status"] == "failed"

                async def undo(act: ckptd.CompensationAction) -> None:
                    await asyncio.sleep(0)
                    os.remove(act.action["path"])

                r = await wf.rollback(undo)
                return {"ran": [a.description for a in r["ran"]], "start": wf.start_step, "state": wf.state}

    got = asyncio.run(main())
    # the compensation of step 0 was registered before its checkpoint passed: not rolled back
    assert got == {"ran": ["remove a1"], "start": 1, "state": {"n": 1}}
    assert (tmp_path / "a0").exists() and not (tmp_path / "a1").exists()


def test_example_saga_rollback(ckptd_bin: str, db_path: str, tmp_path: Path) -> None:
    out = tmp_path / "report"
    r = subprocess.run([sys.executable, str(EXAMPLE), "--db", db_path, "--out", str(out), "--binary", ckptd_bin],
                       capture_output=True, text=True, timeout=120, env=child_env())
    assert r.returncode == 0, (r.stdout, r.stderr)
    lines = r.stdout.splitlines()
    assert lines[:4] == [
        "step 0 gather   wrote data.json; validation passed (0.95: 12 of 12 sources fetched)",
        "step 1 draft    wrote draft.md; validation warning (0.78: two claims cite a single source)",
        "step 2 publish  wrote report.md, index.html; validation failed (0.31: 2 of 5 links are dead)",
        "rollback recommended: back to the end of step 1 draft (its validation: warning)",
    ]
    # the file writes of the failed step are rolled back, newest first, then the step runs again
    assert lines[4:8] == [
        "  undo: remove index.html",
        "  undo: remove report.md",
        "rolled back 2 file writes; files now: data.json, draft.md",
        "resuming at step 2",
    ]
    assert "step 2 publish  wrote report.md, index.html; validation passed (0.93: 5 of 5 links resolve)" in lines
    assert "done: data.json, draft.md, index.html, report.md" in lines
    assert lines[-3:] == ["checkpoints passed: 2", "checkpoints warning: 1", "checkpoints failed: 0"]
    assert (out / "report.md").read_text() == "report.md (attempt 2)\n"
    assert not re.search("Traceback", r.stderr)
