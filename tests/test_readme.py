"""The READMEs' commands and examples, run as printed, and what they claim (#19 points 6 and 8;
the client quick starts run from the installed packages in test_dist_python.py / test_dist_npm.py)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

from conftest import ROOT, need, readme_block, run, venv

PY = ROOT / "clients" / "python"


def test_root_readme_demo_command_runs_as_printed_and_does_what_it_says() -> None:
    need("go", shutil.which("go") is not None, "Go")
    block = readme_block(ROOT / "README.md", "## Two commands", "sh")
    assert block.strip() == "./scripts/demo.sh"
    p = run(["bash", "-c", block], cwd=ROOT, timeout=900)
    out = p.stdout
    lines = out.splitlines()
    # it says what it is doing before the (first: ~100 s) build starts, and when the build is done
    assert lines[0].startswith("### building ckptd: go build") and "100 s" in lines[0] + lines[1], lines[:3]
    assert re.match(r"### built bin/ckptd in \d+ s: ckptd ", lines[2]), lines[:3]
    # "runs a 5-step workflow that kills itself in step 3"
    run1 = out[out.index("### run 1"):out.index("### run 2")]
    assert "simulated crash" in run1 and "run 1 exited with status 137 (killed, as planned)" in run1
    for i in range(3):
        assert re.search(r"step %d \w+\s+completed" % i, run1)
    # "then resumes it at step 3 without re-running steps 0-2, reporting source drift"
    run2 = out[out.index("### run 2"):]
    assert re.search(r"^\s+resumed at step: 3$", run2, re.M) and re.search(r"^\s+skipped steps: 0, 1, 2$", run2, re.M)
    assert re.search(r"^\s+ran steps: 3, 4$", run2, re.M)
    assert not re.search(r"step [012] \w+\s+running", run2)
    assert re.search(r"-- drift: 1 source file\(s\) changed .*\n\s+changed\s+agent\.py", run2)
    assert re.search(r"^crash-resume-demo\s+10\s+step 4 \(completed\)", run2, re.M), run2


def test_python_tests_without_langgraph_print_one_line_per_skipped_group(tmp_path: Path) -> None:
    """./scripts/test.sh outside CI on a machine without LangGraph: one line per left-out group."""
    hidden = tmp_path / "hide"
    (hidden / "langgraph").mkdir(parents=True)
    (hidden / "langgraph" / "__init__.py").write_text('raise ImportError("LangGraph hidden by this test")\n')
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "CKPTD_REQUIRE_LANGGRAPH")}
    env["PYTHONPATH"] = str(hidden)
    p = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_langgraph_saver.py",
             "tests/test_langgraph_conformance.py", "tests/test_framing.py"], cwd=PY, env=env, check=False, timeout=600)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    mentions = [l for l in out.splitlines() if "langgraph" in l.lower()]
    assert len(mentions) == 3, "\n".join(mentions)
    assert mentions[0].startswith("SKIPPED group: LangGraph saver tests (tests/test_langgraph_saver.py)")
    assert mentions[1].startswith("SKIPPED group: LangGraph fidelity tests (tests/test_langgraph_fidelity.py)")
    assert mentions[2].startswith("SKIPPED group: LangGraph conformance suite (tests/test_langgraph_conformance.py)")
    assert all("pip install './clients/python[langgraph,langgraph-test]'" in l for l in mentions)
    assert re.search(r"\d+ passed, \d+ deselected", out)

    # in CI (CI=true) the same run fails: a missing component is never skipped there
    env["CI"] = "true"
    p = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_langgraph_conformance.py"],
            cwd=PY, env=env, check=False, timeout=600)
    assert p.returncode == 1 and "required" in p.stdout


def test_pip_install_langgraph_extra_gives_what_the_readme_example_needs(tmp_path: Path) -> None:
    """#19 point 6: `pip install './clients/python[langgraph]'` into a fresh venv (from PyPI, with Go
    building the binary), then the README's CkptdSaver example as printed."""
    need("go", shutil.which("go") is not None, "Go")
    readme = (PY / "README.md").read_text()
    assert "pip install './clients/python[langgraph]'" in readme
    py = venv(tmp_path / "venv")
    env = {k: v for k, v in os.environ.items() if k not in ("CKPTD_PATH", "PYTHONPATH", "VIRTUAL_ENV")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    run([py, "-m", "pip", "install", "-q", "./clients/python[langgraph]"], cwd=ROOT, env=env, timeout=1200)
    example = readme_block(PY / "README.md", "## LangGraph", "python")
    work = tmp_path / "work"
    work.mkdir()
    (work / "example.py").write_text(example)
    out = run([py, "example.py"], cwd=work, env=env).stdout
    assert out == "{'steps': ['plan', 'write']}\n{'steps': ['plan', 'write']}\n4\n", out
    threads = run([py.parent / "ckptd", "threads", "--db", "agent.db"], cwd=work, env=env).stdout
    assert re.search(r"^t-1\s+4\s", threads, re.M), threads


def test_ts_readme_names_the_langchain_versions_the_tests_use() -> None:
    lock = json.loads((ROOT / "clients" / "ts" / "package-lock.json").read_text())["packages"]
    pkg = json.loads((ROOT / "clients" / "ts" / "package.json").read_text())
    readme = (ROOT / "clients" / "ts" / "README.md").read_text()
    text = re.sub(r"\s+", " ", readme)
    for name in ("@langchain/langgraph", "@langchain/langgraph-checkpoint", "@langchain/core"):
        assert "%s %s" % (name, lock["node_modules/" + name]["version"]) in text, name
    for name, rng in pkg["peerDependencies"].items():
        assert "`%s %s`" % (name, rng) in text, name


# --- LangGraph retention (#24): the root README's flags, the Python README's example ----------------


@pytest.fixture(scope="module")
def ckptd_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """$CKPTD_PATH (./scripts/test.sh builds it), else a ckptd built from this checkout."""
    given = os.environ.get("CKPTD_PATH", "")
    if given and os.access(given, os.X_OK):
        return Path(given).resolve()
    need("go", shutil.which("go") is not None, "Go")
    out = tmp_path_factory.mktemp("bin") / "ckptd"
    run(["go", "build", "-o", out, "./cmd/ckptd"], cwd=ROOT, env=dict(os.environ, CGO_ENABLED="0"), timeout=900)
    return out


def _frames(data: bytes) -> List[Dict[str, Any]]:
    out = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        n = int(re.search(rb"Content-Length: (\d+)", head).group(1))  # type: ignore[union-attr]
        out.append(json.loads(rest[:n]))
        data = rest[n:]
    return out


def test_root_readme_lg_retention_flags_run_as_printed(ckptd_bin: Path, tmp_path: Path) -> None:
    """The command under "## Flags" starts a daemon whose default retention for LangGraph threads is
    what the text says: the newest 20 checkpoints, idle threads deleted after 30 days."""
    block = readme_block(ROOT / "README.md", "## Flags", "sh")
    assert block.strip() == "ckptd serve --db agent.db --lg-keep-last 20 --lg-idle-ttl 30d", block
    frame = lambda o: b"Content-Length: %d\r\n\r\n%s" % (len(json.dumps(o)), json.dumps(o).encode())  # noqa: E731
    stdin = frame({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}) + \
        frame({"jsonrpc": "2.0", "id": 2, "method": "lg/configure", "params": {"threadId": "t"}})
    path = tmp_path / "bin"  # `ckptd` on PATH is the binary under test
    path.mkdir()
    (path / "ckptd").symlink_to(ckptd_bin)
    env = dict(os.environ, PATH="%s%s%s" % (path, os.pathsep, os.environ.get("PATH", "")))
    p = subprocess.run(["bash", "-c", block], cwd=tmp_path, input=stdin, capture_output=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr.decode()
    replies = {r["id"]: r for r in _frames(p.stdout)}
    assert replies[2]["result"] == {"threadId": "t", "retention": {"keepLast": 20, "maxAgeSeconds": 0, "keepFirst": False,
                                                                  "idleTtlSeconds": 30 * 86400}, "source": "daemon"}, replies
    assert (tmp_path / "agent.db").is_file()
    readme = re.sub(r"\s+", " ", (ROOT / "README.md").read_text())
    assert "`ckptd threads --idle 30d` lists those threads" in readme


def test_python_readme_retention_example_runs_as_printed(ckptd_bin: Path, tmp_path: Path) -> None:
    """The Python README's "### Retention": the example prints what its comments say; a month later
    (the test moves the thread's last put back 30 days and an hour) `ckptd threads --idle 30d`
    prints what the README shows, and the next sweep of a daemon deletes the thread."""
    need("langgraph", importlib.util.find_spec("langgraph") is not None, "pip install './clients/python[langgraph]'")
    readme = PY / "README.md"
    example = readme_block(readme, "### Retention", "python")
    env = dict(os.environ, PYTHONPATH=str(PY / "src"), CKPTD_PATH=str(ckptd_bin))
    (tmp_path / "example.py").write_text(example)
    out = run([sys.executable, "example.py"], cwd=tmp_path, env=env, timeout=600).stdout.splitlines()
    want = ["{'threadId': 'chat-1', 'retention': {'keepLast': 20, 'maxAgeSeconds': 0, 'keepFirst': False, 'idleTtlSeconds': 2592000}, "
            "'source': 'daemon'}", "200", "21", "thread", "50"]
    assert out == want, out
    for line in want:
        assert "# " + line in example, line  # what the comments say

    # a month later
    db = tmp_path / "chat.db"
    month = (30 * 86400 + 3600) * 10**6
    with sqlite3.connect(str(db)) as conn:
        assert conn.execute("UPDATE lg_threads SET updated_at = updated_at - ?, expires_at = expires_at - ?", (month, month)).rowcount == 1
    conn.close()
    console = readme_block(readme, "### Retention", "console").splitlines()
    assert console[0] == "$ ckptd threads --idle 30d --db chat.db", console
    p = run([ckptd_bin] + console[0].split()[2:], cwd=tmp_path)
    stamp = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
    assert [stamp.sub("T", l) for l in p.stdout.splitlines() + p.stderr.splitlines()] == [stamp.sub("T", l) for l in console[1:]], p
    # the next sweep (here: the one at start) deletes it
    sweep = ("from ckptd.langgraph import CkptdSaver\n"
             "with CkptdSaver(db='chat.db', args=['--sweep-interval', '100ms']) as s:\n"
             "    import time\n"
             "    deadline = time.time() + 30\n"
             "    while s.get_tuple({'configurable': {'thread_id': 'chat-1'}}) is not None:\n"
             "        assert time.time() < deadline, 'chat-1 was not deleted'\n"
             "        time.sleep(0.1)\n")
    run([sys.executable, "-c", sweep], cwd=tmp_path, env=env, timeout=120)
    assert "no LangGraph thread idle" in run([ckptd_bin, "threads", "--idle", "30d", "--db", "chat.db"], cwd=tmp_path).stderr
