"""WSGI app for tests/test_fork.py: ``gunicorn --preload`` imports it once, in the master, whose
``ckptd.Client`` (created and used here, before the workers are forked) every worker then uses.

GET /?wf=ID&n=N saves {"wf", "n", "worker"} to workflow ID, loads ID's latest checkpoint and
answers with both, the worker's pid and the pid of the daemon that served it.
"""

import json
import os
from typing import Any, Callable, Dict, Iterable, List, Tuple
from urllib.parse import parse_qs

import ckptd

client = ckptd.Client(db=os.environ["CKPTD_TEST_DB"], args=["--durability", "normal"], request_timeout=60)
client.save("master", {"pid": os.getpid()})
MASTER_DAEMON = client.pid


def app(environ: Dict[str, Any], start_response: Callable[[str, List[Tuple[str, str]]], Any]) -> Iterable[bytes]:
    q = parse_qs(environ.get("QUERY_STRING", ""))
    wf, n = q["wf"][0], int(q["n"][0])
    state = {"wf": wf, "n": n, "worker": os.getpid()}
    saved = client.save(wf, state, step=n)
    loaded = client.load(workflow_id=wf)
    body = json.dumps(
        {
            "worker": os.getpid(),
            "daemon": client.pid,
            "masterDaemon": MASTER_DAEMON,
            "saved": saved,
            "loadedId": loaded["checkpointId"],
            "state": loaded.state,
        }
    ).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]
