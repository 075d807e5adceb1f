#!/usr/bin/env python3
"""LangGraph on ckptd: a graph that is killed mid-run and resumes from its thread.

Run it twice with the same --db:

    python3 langgraph_resume.py --db /tmp/lg-demo.db   # run 1: SIGKILLs itself inside node "review"
    python3 langgraph_resume.py --db /tmp/lg-demo.db   # run 2: resumes at "review", finishes

A five-node StateGraph (research -> outline -> draft -> review -> publish) checkpoints every
super-step through ``ckptd.langgraph.CkptdSaver``, with ``durability="sync"``: each checkpoint is
on disk before the next super-step starts. (LangGraph's default, ``"async"``, overlaps the save with
the next step, so a crash may lose the last step or two: they would simply run again.) On the first run the "review" node kills its
own process with SIGKILL, so nothing gets a chance to clean up. The second run finds the thread's
latest checkpoint (next node: "review"), calls ``graph.invoke(None, config)`` and LangGraph carries
on from there: the nodes that completed before the crash do not run again (each node appends to
``runs`` in a marker file, which the output shows).

Needs ``pip install 'ckptd[langgraph]' langgraph`` and the ckptd binary ($CKPTD_PATH or on PATH).
"""

import argparse
import operator
import os
import signal
import sys
from typing import Annotated, Any, Dict, List, TypedDict

try:
    from ckptd.langgraph import CkptdSaver
except ImportError:  # running from a checkout without installing the client
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
    from ckptd.langgraph import CkptdSaver

from langgraph.graph import END, START, StateGraph

NODES = ["research", "outline", "draft", "review", "publish"]
CRASH_NODE = "review"


class State(TypedDict):
    topic: str
    notes: Annotated[List[str], operator.add]
    done: Annotated[List[str], operator.add]


def say(msg: str = "") -> None:
    print(msg, flush=True)


def make_node(name: str, marker: str, crash: bool):
    def node(state: State) -> Dict[str, Any]:
        with open(marker, "a") as f:  # which nodes really ran, across both processes
            f.write(name + "\n")
        say("  node %-8s runs (it has seen: %s)" % (name, ", ".join(state["done"]) or "-"))
        if crash and name == CRASH_NODE:
            say("  node %-8s: simulating a crash: SIGKILL to my own process" % name)
            os.kill(os.getpid(), signal.SIGKILL)
        return {"notes": ["%s about %s" % (name, state["topic"])], "done": [name]}

    return node


def build(saver: CkptdSaver, marker: str, crash: bool):
    b = StateGraph(State)
    for name in NODES:
        b.add_node(name, make_node(name, marker, crash))
    b.add_edge(START, NODES[0])
    for a, c in zip(NODES, NODES[1:]):
        b.add_edge(a, c)
    b.add_edge(NODES[-1], END)
    return b.compile(checkpointer=saver)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", required=True, help="ckptd database file (same for both runs)")
    ap.add_argument("--thread", default="lg-demo", help="LangGraph thread id")
    ap.add_argument("--binary", default=None, help="ckptd executable (default $CKPTD_PATH / PATH)")
    ap.add_argument("--no-crash", action="store_true", help="never crash")
    args = ap.parse_args()
    marker = args.db + ".runs"
    config = {"configurable": {"thread_id": args.thread}}

    with CkptdSaver(db=args.db, binary=args.binary) as saver:
        state = saver.get_tuple(config)
        if state is None:
            say("run 1: new thread %r: starting the graph (it will crash in %r)" % (args.thread, CRASH_NODE))
            graph = build(saver, marker, crash=not args.no_crash)
            out = graph.invoke({"topic": "checkpoints", "notes": [], "done": []}, config, durability="sync")
        else:
            graph = build(saver, marker, crash=False)
            snap = graph.get_state(config)
            if not snap.next and not snap.tasks:
                say("thread %r is already finished: %s" % (args.thread, ", ".join(snap.values["done"])))
                return 0
            say("run 2: resuming thread %r at checkpoint %s" % (args.thread, snap.config["configurable"]["checkpoint_id"]))
            say("  already done: %s; next: %s" % (", ".join(snap.values["done"]), ", ".join(t.name for t in snap.tasks)))
            out = graph.invoke(None, config, durability="sync")
    with open(marker) as f:
        runs = f.read().split()
    say("finished: done=%s" % ",".join(out["done"]))
    say("node executions across runs: %s" % ",".join(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
