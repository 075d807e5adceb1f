"""Child process for test_workflow.py: runs step 0, then blocks in step 1 until a signal arrives.

usage: child_workflow.py DB BINARY WORKFLOW_ID
"""

import sys
import time

import ckptd

db, binary, wid = sys.argv[1:4]
with ckptd.Client(db=db, binary=binary) as client:
    with client.workflow(wid, initial_state={"n": 0}, workflow_hash="h") as wf:
        wf.resume()
        with wf.step("first", index=0) as s:
            s.state = {"n": 1}
        with wf.step("long", index=1) as s:
            s.completed_tasks = ["task-a"]
            s.pending_tasks = [{"id": "task-b"}]
            s.state = {"n": "partial"}
            print("READY", flush=True)
            time.sleep(60)
        print("NOT REACHED", flush=True)
