"""Child process for test_claim.py: a worker that claims a workflow, runs step 0 under the claim,
says READY, waits for a line on stdin (the test pauses it with SIGSTOP meanwhile, so its lease
runs out without a renewal), then tries step 1. Prints one JSON line: what happened.

usage: child_claim.py DB BINARY WORKFLOW_ID LEASE_SECONDS sync|async
"""

import asyncio
import json
import sys

import ckptd

db, binary, wid, lease, mode = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]


def outcome(e: BaseException) -> str:
    d = {"error": type(e).__name__}
    if isinstance(e, ckptd.CkptdError):
        d.update(code=e.code, data=e.data, message=str(e))
    return json.dumps(d)


def run_sync() -> str:
    with ckptd.Client(db=db, binary=binary) as client:
        try:
            with client.claim(wid, "child-worker", lease) as c:
                with client.workflow(wid, claim=c, initial_state={"n": 0}) as wf:
                    wf.resume()
                    with wf.step("first", index=0) as s:
                        s.state = {"n": 1}
                    print("READY %d" % c.fencing_token, flush=True)
                    sys.stdin.readline()
                    with wf.step("second", index=1) as s:
                        s.state = {"n": 2}
            return json.dumps({"error": None})
        except Exception as e:  # noqa: BLE001 - reported to the test
            return outcome(e)


async def run_async() -> str:
    async with ckptd.AsyncClient(db=db, binary=binary) as client:
        try:
            async with client.claim(wid, "child-worker", lease) as c:
                async with client.workflow(wid, claim=c, initial_state={"n": 0}) as wf:
                    await wf.resume()
                    async with wf.step("first", index=0) as s:
                        s.state = {"n": 1}
                    print("READY %d" % c.fencing_token, flush=True)
                    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
                    async with wf.step("second", index=1) as s:
                        s.state = {"n": 2}
            return json.dumps({"error": None})
        except Exception as e:  # noqa: BLE001
            return outcome(e)


print(run_sync() if mode == "sync" else asyncio.run(run_async()), flush=True)
