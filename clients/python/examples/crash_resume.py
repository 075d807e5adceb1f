#!/usr/bin/env python3
"""ckptd crash/resume demo: a 5-step workflow that dies in step 3, then resumes there.

Run it twice with the same --db:

    python3 crash_resume.py --db /tmp/demo.db --sources ./src   # run 1: SIGKILLs itself in step 3
    python3 crash_resume.py --db /tmp/demo.db --sources ./src   # run 2: skips 0-2, resumes at 3

Every step is checkpointed through ckptd: "before_step" when it starts, "completed" (with the new
state) when it ends. The first run kills itself with SIGKILL in the middle of step 3, so nothing
in this process gets a chance to clean up; the second run asks ckptd for a resume plan, skips
the steps that completed, and retries step 3 with the state step 2 produced. If --sources is
given and ckptd offers drift detection, every checkpoint records a fingerprint of that tree and
run 2 reports which source files changed since the checkpoint was taken (as a warning of the
resume plan: the demo resumes anyway).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import signal
import sys
import time
from typing import Any, Dict, List

try:
    import ckptd
except ImportError:  # running from a checkout without installing the client
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
    import ckptd

STEPS = ["fetch", "parse", "analyze", "summarize", "publish"]
CRASH_STEP = 3


def say(msg: str = "") -> None:
    print(msg, flush=True)


def run_step(index: int, state: Dict[str, Any], sources: List[str]) -> Dict[str, Any]:
    """The "work" of each step: deterministic, small, and visible in the state."""
    state = dict(state)
    log = list(state.get("log", []))
    if index == 0:
        files: List[str] = []
        for src in sources:
            for root, _, names in os.walk(src):
                files.extend(os.path.relpath(os.path.join(root, n), src) for n in sorted(names))
        state["documents"] = files or ["(no --sources given)"]
    elif index == 1:
        state["tokens"] = sum(len(d) for d in state.get("documents", []))
    elif index == 2:
        state["score"] = state.get("tokens", 0) % 7
    elif index == 3:
        state["summary"] = "%d document(s), score %s" % (len(state.get("documents", [])), state.get("score"))
    elif index == 4:
        state["published"] = True
    log.append("step %d (%s) done at %s" % (index, STEPS[index], time.strftime("%H:%M:%S")))
    state["log"] = log
    return state


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", required=True, help="ckptd database file (use the same one for both runs)")
    ap.add_argument("--binary", help="ckptd executable (default: $CKPTD_PATH, else ckptd on PATH)")
    ap.add_argument("--sources", help="a directory of source files whose drift ckptd should watch")
    ap.add_argument("--workflow-id", default="crash-resume-demo")
    ap.add_argument("--step-seconds", type=float, default=0.1, help="pretend work per step")
    ap.add_argument("--reset", action="store_true", help="delete the workflow's checkpoints first")
    args = ap.parse_args()

    sources = [os.path.abspath(args.sources)] if args.sources else []
    workflow_hash = "sha256:" + hashlib.sha256(",".join(STEPS).encode()).hexdigest()[:16]

    with ckptd.Client(db=args.db, binary=args.binary) as client:
        info = client.server_info
        say("== ckptd crash/resume demo: workflow %r" % args.workflow_id)
        say("   daemon: %s %s (pid %d), db %s, durability %s" % (
            info.get("serverName"), info.get("serverVersion"), client.pid, args.db,
            client.capabilities.get("durability")))
        if args.reset:
            n = client.delete(workflow_id=args.workflow_id).get("deleted", 0)
            say("   --reset: deleted %d old checkpoint(s)" % n)

        with client.workflow(args.workflow_id, workflow_hash=workflow_hash, sources=sources or None,
                             initial_state={"log": []}, drift_as_warning=True) as wf:
            plan = wf.resume()
            if plan is None:
                say("-- resume plan: no checkpoint yet, this is a fresh run starting at step 0")
                say("   (this run will crash in step %d; run the same command again to resume)" % CRASH_STEP)
            else:
                say("-- resume plan: last checkpoint is %r of step %s (%s)" % (
                    plan.get("phase"), plan.get("step"), plan.get("stepName")))
                say("   ckptd says: %s -> start at step %d%s" % (
                    plan.reason, plan.start_step, " (retry)" if plan.retry else ""))
                for w in plan.warnings:
                    if w.get("code") != "drift":  # reported in detail below
                        say("   warning: %s" % w.get("message"))
                report_drift(client, wf, sources, plan)
            if wf.start_step >= len(STEPS):
                say("-- nothing to do: all %d steps completed in earlier runs (use --reset to start over)" % len(STEPS))

            for i, name in enumerate(STEPS):
                if not wf.should_run(i):
                    say("   step %d %-10s skipped (completed in an earlier run)" % (i, name))
                    continue
                with wf.step(name, index=i) as s:
                    say("   step %d %-10s running%s ..." % (i, name, " (retry after a crash)" if s.retry else ""))
                    time.sleep(args.step_seconds)
                    if i == CRASH_STEP and not s.retry:
                        say("   step %d %-10s !!! simulated crash: sending SIGKILL to this process (pid %d)" % (
                            i, name, os.getpid()))
                        say("                   (ckptd has the 'before_step' checkpoint of step %d on disk)" % i)
                        os.kill(os.getpid(), signal.SIGKILL)
                    s.state = run_step(i, s.input, sources)
                say("   step %d %-10s completed, checkpoint saved (seq %s)" % (i, name, (s.result or {}).get("seq")))

        say("-- summary")
        say("   ran steps: %s" % (", ".join(str(i) for i in wf.ran) or "none"))
        say("   skipped steps: %s" % (", ".join(str(i) for i in wf.skipped) or "none"))
        say("   resumed at step: %s" % (plan.start_step if plan is not None else "- (fresh run)"))
        say("   final state: %s" % {k: v for k, v in (wf.state or {}).items() if k != "log"})
    return 0


def report_drift(client: "ckptd.Client", wf: "ckptd.Workflow", sources: List[str], plan: Any = None) -> None:
    if not sources:
        say("-- drift: no --sources given, nothing to compare")
        return
    if not client.has_capability("drift"):
        say("-- drift: this ckptd build does not offer drift detection (no 'drift' capability "
            "in initialize); skipping the drift report")
        return
    # resume/plan checked the checkpoint's sources already (its "drift" field); else ask.
    status = plan.get("drift") if plan is not None else None
    if not status:
        try:
            status = wf.drift_status()
        except ckptd.MethodNotFound:
            say("-- drift: the daemon does not implement drift/status; skipping the drift report")
            return
        except ckptd.CkptdError as e:
            say("-- drift: could not get the drift status: %s" % e)
            return
    changes = [(kind, c) for kind in ("changed", "added", "deleted") for c in status.get(kind) or []]
    if not status.get("drifted"):
        say("-- drift: no source file changed since checkpoint %s (%d files checked under %s)" % (
            status.get("checkpointId"), status.get("filesChecked", 0), status.get("root")))
        return
    say("-- drift: %d source file(s) changed since checkpoint %s was taken (under %s):" % (
        len(changes), status.get("checkpointId"), status.get("root")))
    for kind, c in changes:
        sizes = "%s -> %s bytes" % (c.get("oldSize") if kind != "added" else "-", c.get("newSize") if kind != "deleted" else "-")
        say("   %-8s %-30s %s" % (kind, c.get("path"), sizes))


if __name__ == "__main__":
    sys.exit(main())
