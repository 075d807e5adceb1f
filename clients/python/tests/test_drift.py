"""Source drift against the real daemon ($CKPTD_PATH): sources on save and on the workflow
helper, drift_status, resume_plan's drift problem, drift_watch notifications."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Dict, List

import pytest

import ckptd


def make_src(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    (src / "lib").mkdir(parents=True)
    (src / "agent.py").write_text("def fetch():\n    return 'v1'\n")
    (src / "lib" / "util.py").write_text("def util():\n    pass\n")
    (src / ".gitignore").write_text("*.log\n")
    (src / "debug.log").write_text("ignored\n")
    return src


def test_drift_capability(client: ckptd.Client) -> None:
    assert client.has_capability("drift")


def test_drift_status_and_resume_plan(client: ckptd.Client, tmp_path: Path) -> None:
    src = make_src(tmp_path)
    r = client.save("wf-drift", {"x": 1}, step=0, sources=str(src))
    assert r["sources"]["root"] == str(src) and r["sources"]["files"] == 3
    st = client.drift_status(workflow_id="wf-drift")
    assert st["drifted"] is False and st["checkpointId"] == r["checkpointId"]

    (src / "agent.py").write_text("def fetch():\n    return 'v2'\n")
    (src / "lib" / "new.py").write_text("x = 1\n")
    (src / "lib" / "util.py").unlink()
    (src / "other.log").write_text("still ignored\n")
    st = client.drift_status(checkpoint_id=r["checkpointId"])
    assert st["drifted"] is True
    assert [c["path"] for c in st["changed"]] == ["agent.py"]
    assert [c["path"] for c in st["added"]] == ["lib/new.py"]
    assert [c["path"] for c in st["deleted"]] == ["lib/util.py"]
    assert st["changed"][0]["oldHash"] != st["changed"][0]["newHash"]

    with pytest.raises(ckptd.ResumeValidationError) as ei:
        client.resume_plan("wf-drift")
    assert [p["code"] for p in ei.value.problems] == ["drift"]
    plan = client.resume_plan("wf-drift", drift_as_warning=True)
    assert plan.start_step == 1
    assert [w["code"] for w in plan.warnings] == ["drift"]
    assert plan["drift"]["drifted"] is True


def test_drift_bad_root(client: ckptd.Client, tmp_path: Path) -> None:
    with pytest.raises(ckptd.InvalidParams, match="sources.root"):
        client.save("wf-bad", {}, sources=str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="one root"):
        client.save("wf-bad", {}, sources=[str(tmp_path), str(tmp_path)])


def test_drift_workflow_helper(client: ckptd.Client, tmp_path: Path) -> None:
    src = make_src(tmp_path)
    with client.workflow("wf-helper", sources=[str(src)], initial_state={}) as wf:
        with wf.step("a") as s:
            pass
    assert s.result is not None and s.result["sources"]["files"] == 3
    assert wf.drift_status()["drifted"] is False
    (src / "agent.py").write_text("changed\n")
    with client.workflow("wf-helper", sources=[str(src)], drift_as_warning=True) as wf2:
        plan = wf2.resume()
        assert plan is not None and [w["code"] for w in plan.warnings] == ["drift"]
    with client.workflow("wf-helper", sources=[str(src)]) as wf3:
        with pytest.raises(ckptd.ResumeValidationError):
            wf3.resume()


def test_drift_watch_notifications(client: ckptd.Client, tmp_path: Path) -> None:
    src = make_src(tmp_path)
    client.save("wf-watch", {}, sources=str(src))
    got: List[Dict[str, Any]] = []
    ev = threading.Event()

    def on_change(method: str, params: Dict[str, Any]) -> None:
        got.append(params)
        ev.set()

    w = client.drift_watch(workflow_id="wf-watch", debounce_ms=10, callback=on_change)
    assert w["watchId"]
    (src / "agent.py").write_text("edited\n")
    assert ev.wait(10), "no drift/changed notification"
    assert got[0]["watchId"] == w["watchId"] and got[0]["drifted"] is True
    assert got[0]["changes"] == [{"path": "agent.py", "kind": "changed"}]
    st = client.drift_status(workflow_id="wf-watch")
    assert st["drifted"] is True and st.get("watched") is True
    ev.clear()
    (src / "agent.py").write_text("def fetch():\n    return 'v1'\n")
    assert ev.wait(10)
    assert got[-1]["changes"] == [{"path": "agent.py", "kind": "restored"}] and got[-1]["drifted"] is False
    assert client.drift_unwatch(w["watchId"]) == {}
