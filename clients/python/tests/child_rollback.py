"""Child process for test_saga.py: a workflow whose steps 1-4 each write a file (registering its
compensation first) and whose step 5 fails its validation; the rollback deletes the files.

usage: child_rollback.py DB BINARY OUT LOG MODE

MODE crash: runs the steps, then the rollback, and SIGKILLs itself when the handler is called for
the third action (two are marked done by then). MODE resume: a new process finishes the rollback
the first one left unfinished. Every action the handler runs is appended to LOG (and fsynced), so
the test sees each side effect exactly once.
"""

import json
import os
import signal
import sys

import ckptd

db, binary, out, log, mode = sys.argv[1:6]
WF = "rb-crash"
calls = []


def undo(act: ckptd.CompensationAction) -> None:
    calls.append(act.compensation_id)
    if mode == "crash" and len(calls) == 3:
        os.kill(os.getpid(), signal.SIGKILL)  # 2 of 4 actions are marked done
    path = act.action["path"]
    os.remove(path)  # no "missing is fine": running an action twice fails the test
    with open(log, "a") as f:
        f.write("undo %s\n" % os.path.basename(path))
        f.flush()
        os.fsync(f.fileno())


with ckptd.Client(db=db, binary=binary) as client:
    with client.workflow(WF, initial_state={"files": []}) as wf:
        wf.resume()
        if mode == "crash":
            with wf.step("plan", index=0) as s:
                s.validate(0.99)
            for i in range(1, 5):
                with wf.step("write-%d" % i, index=i) as s:
                    path = os.path.join(out, "f%d.txt" % i)
                    s.compensate({"kind": "delete_file", "path": path}, "remove f%d.txt" % i)
                    with open(path, "w") as f:
                        f.write("side effect %d\n" % i)
                    s.state = {"files": s.input["files"] + [path]}
            with wf.step("check", index=5) as s:
                s.validate(0.1, message="the files disagree")
            assert s.validation["status"] == "failed", s.validation
            assert wf.rollback_recommended
            print("ROLLING BACK", flush=True)
            wf.rollback(undo)
            print("NOT REACHED", flush=True)
        else:
            print(json.dumps({"recommended": wf.rollback_recommended, "unfinished": wf.unfinished_rollback}), flush=True)
            r = wf.rollback(undo)
            print(json.dumps({"ran": [a.compensation_id for a in r["ran"]], "calls": calls, "progress": r["progress"],
                              "pruned": r["pruned"], "startStep": wf.start_step, "state": wf.state,
                              "recommended": wf.rollback_recommended}), flush=True)
