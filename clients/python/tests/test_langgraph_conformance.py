"""LangGraph's official checkpointer conformance suite (``langgraph-checkpoint-conformance``) against
``ckptd.langgraph.CkptdSaver``: every capability the installed suite knows (base and extended) must
be detected and pass, nothing skipped, on SQLite and on PostgreSQL (the run's throwaway cluster,
CKPTD_TEST_PG_URL). A fresh daemon and database per capability suite.

Also runs the suite against the reference savers of ``langgraph-checkpoint-sqlite`` and prints their
reports (the sync ``SqliteSaver`` has no async methods, which the suite calls, so it is measured
both as is and through a thin async shim; ``AsyncSqliteSaver`` as is).

Needs the ``langgraph`` and ``langgraph-test`` extras. Without them the tests skip, unless
``CKPTD_REQUIRE_LANGGRAPH=1`` (CI), which turns the skip into a failure.
"""

from __future__ import annotations

import asyncio
import importlib
import os
from pathlib import Path
from typing import Any, Dict

import pytest

INSTALL = (
    "pip install 'langgraph==1.2.22' 'langgraph-checkpoint==4.3.2' 'langgraph-checkpoint-sqlite==3.1.2' "
    "'langgraph-checkpoint-conformance==0.0.2'   (or: pip install './clients/python[langgraph,langgraph-test]')"
)


def require(*modules: str) -> None:
    """Imports modules or skips (fails with CKPTD_REQUIRE_LANGGRAPH=1) naming what is missing."""
    missing = []
    for m in modules:
        try:
            importlib.import_module(m)
        except ImportError as e:
            missing.append("%s (%s)" % (m, e))
    if missing:
        msg = "LangGraph packages missing: %s. Install them with:\n  %s" % (", ".join(missing), INSTALL)
        if os.environ.get("CKPTD_REQUIRE_LANGGRAPH") == "1" or os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(msg + "\n(CKPTD_REQUIRE_LANGGRAPH=1 or CI=true: required)", pytrace=False)
        pytest.skip(msg)


def _results(report: Any) -> Dict[str, Any]:
    return {
        name: {
            "detected": r.detected,
            "passed": r.passed,
            "tests_passed": r.tests_passed,
            "tests_failed": r.tests_failed,
            "tests_skipped": r.tests_skipped,
        }
        for name, r in report.results.items()
    }


def _print(report: Any) -> None:
    report.print_report()
    for name, r in sorted(report.results.items()):
        print("  %-16s detected=%-5s passed=%-5s %d passed, %d failed, %d skipped"
              % (name, r.detected, r.passed, r.tests_passed, r.tests_failed, r.tests_skipped))
        for f in r.failures[:2]:
            print("    FAIL", f.strip().splitlines()[0][:300])
        if len(r.failures) > 2:
            print("    ... %d more failures" % (len(r.failures) - 2))


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_conformance_ckptd_saver(ckptd_bin: str, tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> None:
    require("langgraph.checkpoint.conformance", "ckptd.langgraph")
    if backend == "postgres":
        from conftest import pg_schema_url

        base = request.getfixturevalue("pg_base_url")
    from langgraph.checkpoint.conformance import checkpointer_test, validate
    from langgraph.checkpoint.conformance.capabilities import (
        BASE_CAPABILITIES,
        EXTENDED_CAPABILITIES,
        Capability,
    )

    from ckptd.langgraph import CkptdSaver

    dbs = []

    @checkpointer_test(name="CkptdSaver (%s)" % backend)
    async def ckptd_saver() -> Any:
        # a fresh database per capability suite: a file, or a schema of the test database
        db = str(tmp_path / ("suite-%d.db" % len(dbs))) if backend == "sqlite" else pg_schema_url(base)
        dbs.append(db)
        saver = CkptdSaver(db=db, binary=ckptd_bin)
        try:
            yield saver
        finally:
            saver.close()

    report = asyncio.run(validate(ckptd_saver))
    _print(report)
    results = _results(report)
    everything = {c.value for c in Capability} | {c.value for c in BASE_CAPABILITIES | EXTENDED_CAPABILITIES}
    assert set(results) == everything, results
    bad = {k: v for k, v in results.items() if not (v["detected"] and v["passed"] is True and v["tests_skipped"] == 0)}
    assert not bad, "capabilities not fully passing: %s\n%s" % (
        bad, "\n".join(f for r in report.results.values() for f in r.failures))
    assert report.passed_all_base()
    assert report.passed_all()
    assert report.conformance_level() == "FULL"
    assert sum(v["tests_passed"] for v in results.values()) > 0
    assert len(dbs) == len(results)


def test_conformance_sqlite_reference(tmp_path: Path) -> None:
    """The same suite against LangGraph's own SQLite savers, for comparison (printed with -s)."""
    require("langgraph.checkpoint.conformance", "langgraph.checkpoint.sqlite", "aiosqlite")
    from langgraph.checkpoint.conformance import checkpointer_test, validate
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    class ShimmedSqliteSaver(SqliteSaver):
        """SqliteSaver's sync methods behind the async names the suite calls."""

        async def aget_tuple(self, config: Any) -> Any:
            return self.get_tuple(config)

        async def alist(self, config: Any, **kw: Any) -> Any:
            for t in self.list(config, **kw):
                yield t

        async def aput(self, *a: Any) -> Any:
            return self.put(*a)

        async def aput_writes(self, *a: Any, **kw: Any) -> Any:
            return self.put_writes(*a, **kw)

        async def adelete_thread(self, thread_id: str) -> None:
            self.delete_thread(thread_id)

    n = [0]

    def path() -> str:
        n[0] += 1
        return str(tmp_path / ("ref-%d.db" % n[0]))

    @checkpointer_test(name="SqliteSaver (as is)")
    async def sqlite_plain() -> Any:
        with SqliteSaver.from_conn_string(path()) as s:
            yield s

    @checkpointer_test(name="SqliteSaver (async shim)")
    async def sqlite_shim() -> Any:
        with ShimmedSqliteSaver.from_conn_string(path()) as s:
            yield s

    @checkpointer_test(name="AsyncSqliteSaver")
    async def sqlite_async() -> Any:
        async with AsyncSqliteSaver.from_conn_string(path()) as s:
            yield s

    reports = {}
    for reg in (sqlite_plain, sqlite_shim, sqlite_async):
        reports[reg.name] = asyncio.run(validate(reg))
        _print(reports[reg.name])
    # the suite itself works here: the async reference saver passes the base capabilities
    assert reports["AsyncSqliteSaver"].passed_all_base()
    assert reports["SqliteSaver (async shim)"].passed_all_base()


# With retention the suite's history tests (several checkpoints of one thread put, then listed,
# copied or deleted by run) see fewer checkpoints than they put; nothing else may differ.
_HISTORY_TESTS_KEEP_LAST_1 = {
    "copy_thread": {"test_copy_thread_basic"},
    "delete_for_runs": {"test_delete_for_runs_multiple", "test_delete_for_runs_preserves_other_runs"},
    "list": {"test_list_all", "test_list_by_thread", "test_list_ordering", "test_list_metadata_filter_single_key",
             "test_list_metadata_filter_step", "test_list_metadata_custom_keys", "test_list_before",
             "test_list_combined_thread_and_filter"},
    "put": {"test_put_multiple_checkpoints_same_thread"},
}
# keep_last=3: the list tests that put four checkpoints in a thread (keep_last=4 and more: none)
_HISTORY_TESTS_KEEP_LAST_3 = {
    "list": {"test_list_all", "test_list_by_thread", "test_list_ordering", "test_list_metadata_filter_single_key",
             "test_list_before"},
}
_HISTORY_TESTS = {20: {}, 3: _HISTORY_TESTS_KEEP_LAST_3, 1: _HISTORY_TESTS_KEEP_LAST_1}


@pytest.mark.parametrize("keep_last", [20, 3, 1])
def test_conformance_with_retention(ckptd_bin: str, tmp_path: Path, keep_last: int) -> None:
    """keep_last=20 (more than any test of the suite puts in a thread): everything passes;
    keep_last=3 and 1: only the history tests listed above fail (the list is in
    bench/results/2026-11-27-lg-retention-conformance.md)."""
    require("langgraph.checkpoint.conformance", "ckptd.langgraph")
    from langgraph.checkpoint.conformance import checkpointer_test, validate

    from ckptd.langgraph import CkptdSaver

    n = [0]

    @checkpointer_test(name="CkptdSaver keep_last=%d" % keep_last)
    async def ckptd_saver() -> Any:
        n[0] += 1
        saver = CkptdSaver(db=str(tmp_path / ("suite-%d.db" % n[0])), binary=ckptd_bin, retention={"keep_last": keep_last})
        try:
            yield saver
        finally:
            saver.close()

    report = asyncio.run(validate(ckptd_saver))
    _print(report)
    failed = {name: {f.split(":", 1)[0].strip() for f in r.failures} for name, r in report.results.items() if r.failures}
    assert all(r.detected and r.tests_skipped == 0 for r in report.results.values())
    assert failed == _HISTORY_TESTS[keep_last], failed
    assert sum(r.tests_passed + r.tests_failed for r in report.results.values()) > 0
