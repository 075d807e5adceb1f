"""Shared fixtures. Tests that need the daemon take the ``ckptd_bin`` fixture, which requires
$CKPTD_PATH and fails (never skips) with a clear message when it is missing."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Iterator

import pytest

HERE = Path(__file__).resolve().parent
CLIENT_ROOT = HERE.parent
REPO_ROOT = CLIENT_ROOT.parent.parent
SRC = CLIENT_ROOT / "src"

# Test the working tree (also when an older ckptd is pip-installed).
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

import ckptd  # noqa: E402

_MISSING = (
    "CKPTD_PATH is not set (or not an executable): the ckptd client tests need the daemon. "
    "Build it and point CKPTD_PATH at it, e.g.\n"
    "  cd {root} && go build -o bin/ckptd ./cmd/ckptd && export CKPTD_PATH=$PWD/bin/ckptd\n"
    "(./scripts/test.sh does this). Only tests/test_framing.py and tests/test_unit.py run without it."
)


@pytest.fixture(scope="session")
def ckptd_bin() -> str:
    path = os.environ.get("CKPTD_PATH", "")
    if not path or not os.path.isfile(path) or not os.access(path, os.X_OK):
        pytest.fail(_MISSING.format(root=REPO_ROOT) + ("\nCKPTD_PATH=%r" % path if path else ""), pytrace=False)
    return os.path.abspath(path)


@pytest.fixture
def db_path(tmp_path: Path) -> str:
    return str(tmp_path / "ckptd.db")


@pytest.fixture
def client(ckptd_bin: str, db_path: str) -> Iterator["ckptd.Client"]:
    # request_timeout: a daemon that stops answering fails the test instead of hanging the run
    c = ckptd.Client(db=db_path, binary=ckptd_bin, args=["--keep-last", "0"], request_timeout=120)
    try:
        yield c
    finally:
        c.close()


def child_env() -> dict:
    """Environment for child Python processes: they import ckptd from this tree."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(SRC) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    return env


_PG_MISSING = (
    "CKPTD_TEST_PG_URL is not set: the PostgreSQL tests need a throwaway cluster. ./scripts/test.sh "
    "starts one (go run ./internal/pgtest/cmd/pgcluster -env FILE, then source FILE)."
)


@pytest.fixture(scope="session")
def pg_base_url() -> str:
    """The URL of the test run's PostgreSQL database (CKPTD_TEST_PG_URL). Without one the test
    skips, or fails under CI=true."""
    url = os.environ.get("CKPTD_TEST_PG_URL", "")
    if not url:
        if os.environ.get("CI") == "true":
            pytest.fail(_PG_MISSING + " (CI=true: required)", pytrace=False)
        pytest.skip(_PG_MISSING)
    return url


def pg_schema_url(base: str) -> str:
    """A URL of ``base`` in a schema of its own: a fresh, empty ckptd database."""
    import uuid

    sep = "&" if "?" in base else "?"
    return "%s%sckptd_schema=t_%s" % (base, sep, uuid.uuid4().hex[:16])


@pytest.fixture
def pg_url(pg_base_url: str) -> str:
    return pg_schema_url(pg_base_url)


# --- LangGraph test groups ----------------------------------------------------------------------
# Without LangGraph installed, each group below is left out of the run and reported in one line
# at the end (instead of a skip line per test). CKPTD_REQUIRE_LANGGRAPH=1 or CI=true keeps them in,
# where they fail naming what to install (test_langgraph_conformance.require).

_LANGGRAPH_GROUPS = {
    "test_langgraph_saver.py": ("LangGraph saver tests", ("langgraph.graph", "langgraph.checkpoint.base")),
    "test_langgraph_fidelity.py": ("LangGraph fidelity tests", ("langgraph.graph", "langgraph.checkpoint.sqlite")),
    "test_langgraph_conformance.py": ("LangGraph conformance suite", (
        "langgraph.checkpoint.base", "langgraph.checkpoint.conformance", "langgraph.checkpoint.sqlite")),
}
_LANGGRAPH_REQUIRED = os.environ.get("CKPTD_REQUIRE_LANGGRAPH") == "1" or os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _missing_modules(names: "tuple[str, ...]") -> "list[str]":
    import importlib.util

    missing = []
    for name in names:
        try:
            found = importlib.util.find_spec(name) is not None
        except Exception:  # a parent package that fails to import
            found = False
        if not found:
            missing.append(name)
    return missing


_skipped_groups = {}  # file name -> the line reported for it
if not _LANGGRAPH_REQUIRED:
    for _file, (_group, _modules) in _LANGGRAPH_GROUPS.items():
        _missing = _missing_modules(_modules)
        if _missing:
            _skipped_groups[_file] = "%s (tests/%s): %s not installed; pip install './clients/python[langgraph,langgraph-test]'" % (
                _group, _file, ", ".join(_missing))


def pytest_collection_modifyitems(config: "pytest.Config", items: "list[pytest.Item]") -> None:
    left_out = [i for i in items if i.path.name in _skipped_groups]
    if left_out:
        items[:] = [i for i in items if i.path.name not in _skipped_groups]
        config.hook.pytest_deselected(items=left_out)


def pytest_terminal_summary(terminalreporter: "pytest.TerminalReporter") -> None:
    for line in _skipped_groups.values():
        terminalreporter.write_line("SKIPPED group: " + line)
