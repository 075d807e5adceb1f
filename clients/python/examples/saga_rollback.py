#!/usr/bin/env python3
"""ckptd validation checkpoints and compensations: three steps write files, the third fails its
validation, and the rollback deletes the files that step wrote before the step runs again.

    python3 saga_rollback.py --db /tmp/saga.db --out /tmp/report

Each step registers how to undo a file write (s.compensate) *before* writing the file, so even a
crash right after the write leaves the undo on record in ckptd, and scores its own result
(s.validate). ckptd classifies the score under the workflow's thresholds: "gather" passes,
"draft" gets a warning, "publish" fails (two dead links on the first attempt). A failed
validation recommends rolling back to the newest checkpoint whose validation did not fail (here
"draft"); wf.rollback(undo) runs the compensations registered since, newest first, marking each
done in ckptd as it goes (a rollback killed half-way picks up where it stopped), and the workflow
resumes after "draft": "publish" runs again, fixed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Dict, List, Tuple

try:
    import ckptd
except ImportError:  # running from a checkout without installing the client
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
    import ckptd

WORKFLOW = "saga-demo"

# name -> the files it writes
STEPS: List[Tuple[str, List[str]]] = [
    ("gather", ["data.json"]),
    ("draft", ["draft.md"]),
    ("publish", ["report.md", "index.html"]),
]


def say(msg: str = "") -> None:
    print(msg, flush=True)


def score(step: str, attempt: int) -> Tuple[float, str]:
    """The step's own check of its result (deterministic, for the demo)."""
    if step == "gather":
        return 0.95, "12 of 12 sources fetched"
    if step == "draft":
        return 0.78, "two claims cite a single source"
    if attempt == 1:
        return 0.31, "2 of 5 links are dead"
    return 0.93, "5 of 5 links resolve"


def listing(out: str) -> str:
    names = sorted(os.listdir(out)) if os.path.isdir(out) else []
    return ", ".join(names) if names else "(empty)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", required=True, help="ckptd database file")
    ap.add_argument("--out", required=True, help="directory the steps write their files to")
    ap.add_argument("--binary", help="ckptd executable (default: $CKPTD_PATH, else ckptd on PATH)")
    args = ap.parse_args()
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)

    def undo(act: ckptd.CompensationAction) -> None:
        """The rollback handler: runs one registered action (only one kind in this demo)."""
        a = act.action
        if a.get("kind") != "delete_file":
            raise ValueError("unknown compensation kind %r" % a.get("kind"))
        try:
            os.remove(a["path"])
        except FileNotFoundError:
            pass  # already undone (the write may never have happened): idempotent
        say("  undo: %s" % act.description)

    with ckptd.Client(db=args.db, binary=args.binary) as client:
        # Thresholds (these are the defaults) and the steps that must register a compensation.
        client.configure(
            WORKFLOW,
            validation={"minConfidence": 0.7, "warningThreshold": 0.85},
            compensation={"required": [name for name, _ in STEPS]},
        )
        with client.workflow(WORKFLOW, initial_state={"files": []}) as wf:
            wf.resume()
            if wf.rollback_recommended:  # a rollback an earlier run did not finish
                say("finishing the rollback an earlier run left unfinished")
                wf.rollback(undo)
            attempt = 1
            while True:
                for i, (name, files) in enumerate(STEPS):
                    if not wf.should_run(i):
                        say("step %d %-8s skipped (done before)" % (i, name))
                        continue
                    with wf.step(name, index=i) as s:
                        for f in files:
                            path = os.path.join(out, f)
                            s.compensate({"kind": "delete_file", "path": path}, "remove " + f)  # before the write
                            with open(path, "w") as fh:
                                fh.write("%s (attempt %d)\n" % (f, attempt))
                        confidence, why = score(name, attempt)
                        s.validate(confidence, message=why)
                        s.state = {"files": list(s.input.get("files", [])) + files}
                    v: Dict[str, Any] = s.validation or {}
                    say("step %d %-8s wrote %s; validation %s (%s: %s)" % (i, name, ", ".join(files), v.get("status"), confidence, why))
                    if wf.rollback_recommended:
                        rec = wf.recommendation or {}
                        if rec.get("kind") == "to_checkpoint":  # the newest whose validation did not fail
                            good = client.load(checkpoint_id=rec["checkpointId"])
                            say("rollback recommended: back to the end of step %d %s (its validation: %s)"
                                % (good.step, good.step_name, (good.get("validation") or {}).get("status")))
                        else:
                            say("rollback recommended: all the way back (no step passed its validation)")
                        r = wf.rollback(undo)
                        say("rolled back %d file writes; files now: %s" % (len(r["ran"]), listing(out)))
                        say("resuming at step %d" % wf.start_step)
                        attempt += 1
                        break
                else:
                    break
            say("done: %s" % listing(out))
            say("state: %s" % json.dumps(wf.state, sort_keys=True))
        for st in ("passed", "warning", "failed"):
            n = len(client.list(WORKFLOW, validation=st))
            say("checkpoints %-7s %d" % (st + ":", n))
    return 0


if __name__ == "__main__":
    sys.exit(main())
