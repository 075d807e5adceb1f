"""The daemon dies under the client: pending and later calls fail fast with DaemonDied."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import List

import ckptd


def test_daemon_killed_pending_and_later_calls_fail_fast(ckptd_bin: str, db_path: str) -> None:
    c = ckptd.Client(db=db_path, binary=ckptd_bin)
    try:
        c.save("wf", {"a": 1})
        outcomes: List[BaseException] = []
        started = threading.Barrier(5)

        def saver() -> None:
            started.wait()
            try:
                for _ in range(1000):
                    c.save("wf", os.urandom(256 * 1024))
            except BaseException as e:
                outcomes.append(e)

        ts = [threading.Thread(target=saver) for _ in range(4)]
        for t in ts:
            t.start()
        started.wait()
        time.sleep(0.05)
        t0 = time.monotonic()
        os.kill(c.pid, signal.SIGKILL)
        for t in ts:
            t.join(10)
        assert not any(t.is_alive() for t in ts), "a call hung after the daemon died"
        assert time.monotonic() - t0 < 5
        assert len(outcomes) == 4 and all(isinstance(e, ckptd.DaemonDied) for e in outcomes), outcomes
        e = outcomes[0]
        assert isinstance(e, ckptd.DaemonDied)
        assert e.exit_code == -signal.SIGKILL and "SIGKILL" in str(e)
        assert "serving" in e.stderr_tail and "serving" in str(e)  # the daemon's log lines
        t1 = time.monotonic()
        for call in (lambda: c.stats(), lambda: c.save("wf", {"b": 2}), lambda: c.load(workflow_id="wf")):
            try:
                call()
            except ckptd.DaemonDied as later:
                assert later.exit_code == -signal.SIGKILL
            else:  # pragma: no cover
                raise AssertionError("call after death did not raise")
        assert time.monotonic() - t1 < 0.5
    finally:
        c.close(timeout=2)
    assert c.closed
    # every acknowledged save survived
    with ckptd.Client(db=db_path, binary=ckptd_bin) as c2:
        assert c2.list("wf", limit=1)


def test_daemon_exits_between_calls(ckptd_bin: str, db_path: str) -> None:
    c = ckptd.Client(db=db_path, binary=ckptd_bin)
    try:
        os.kill(c.pid, signal.SIGTERM)  # the daemon's clean shutdown on SIGTERM: exit 0
        deadline = time.monotonic() + 5
        while c.returncode is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert c.returncode == 0
        t0 = time.monotonic()
        try:
            c.save("wf", {"a": 1})
        except ckptd.DaemonDied as e:
            assert e.exit_code == 0 and "exit code 0" in str(e)
        else:  # pragma: no cover
            raise AssertionError("save to an exited daemon did not raise")
        assert time.monotonic() - t0 < 3
    finally:
        c.close(timeout=2)
