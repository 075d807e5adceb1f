"""examples/crash_resume.py end to end: run 1 dies by SIGKILL in step 3, run 2 resumes at 3."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

from conftest import CLIENT_ROOT, child_env

DEMO = CLIENT_ROOT / "examples" / "crash_resume.py"


def run(db: str, binary: str, sources: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(DEMO), "--db", db, "--binary", binary, "--sources", str(sources), "--step-seconds", "0"],
        capture_output=True, text=True, timeout=60, env=child_env(),
    )


def field(out: str, name: str) -> str:
    m = re.search(r"^\s*%s: (.*)$" % re.escape(name), out, re.M)
    assert m, (name, out)
    return m.group(1).strip()


def test_demo_crash_then_resume(ckptd_bin: str, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "agent.py").write_text("def fetch():\n    return 'v1'\n")
    db = str(tmp_path / "demo.db")

    first = run(db, ckptd_bin, src)
    assert first.returncode == -signal.SIGKILL, (first.returncode, first.stdout, first.stderr)
    assert "simulated crash" in first.stdout
    for i in range(3):
        assert re.search(r"step %d \w+\s+completed" % i, first.stdout), first.stdout
    assert "summary" not in first.stdout

    (src / "agent.py").write_text("def fetch():\n    return 'v2'\n")
    second = run(db, ckptd_bin, src)
    assert second.returncode == 0, (second.stdout, second.stderr)
    out = second.stdout
    assert field(out, "skipped steps") == "0, 1, 2"
    assert field(out, "ran steps") == "3, 4"
    assert field(out, "resumed at step") == "3"
    assert "before_step' of step 3" in out and "(retry)" in out
    for i in range(3):
        assert re.search(r"step %d \w+\s+skipped" % i, out)
        assert not re.search(r"step %d \w+\s+running" % i, out)
    assert "-- drift:" in out  # a drift report, or a clear note that this ckptd has none
    assert "Traceback" not in second.stderr

    third = run(db, ckptd_bin, src)
    assert third.returncode == 0 and "nothing to do" in third.stdout and field(third.stdout, "ran steps") == "none"
