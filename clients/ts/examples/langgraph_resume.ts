/**
 * A LangGraph.js graph checkpointed by ckptd (`ckptd/langgraph`), killed mid-superstep and resumed.
 *
 *   plan -> [research_a, research_b] (in parallel) -> write
 *
 * On a fresh start, research_a finishes (LangGraph saves its writes as pending writes) and then
 * research_b SIGKILLs the process, as a crash would. Run it again with the same database: LangGraph
 * resumes the thread from its last checkpoint, keeps research_a's saved result without re-running
 * it, runs research_b and write, and finishes.
 *
 *   npm run build
 *   export CKPTD_PATH=/path/to/ckptd
 *   node build/examples/langgraph_resume.js --db /tmp/lg.db   # killed mid-run
 *   node build/examples/langgraph_resume.js --db /tmp/lg.db   # resumes and finishes
 *
 * Options: --db PATH (required), --thread ID (default lg-demo), --no-crash.
 * Needs @langchain/langgraph (a dev dependency of this package).
 */
import { parseArgs } from "node:util";

import { Annotation, END, START, StateGraph } from "@langchain/langgraph";
import { CkptdSaver } from "ckptd/langgraph";

const State = Annotation.Root({
  topic: Annotation<string>,
  notes: Annotation<string[]>({ reducer: (a, b) => a.concat(b), default: () => [] }),
  report: Annotation<string>,
});

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: { db: { type: "string" }, thread: { type: "string", default: "lg-demo" }, "no-crash": { type: "boolean", default: false } },
  });
  if (values.db === undefined) throw new Error("usage: langgraph_resume --db PATH [--thread ID] [--no-crash]");
  let crash = false; // set on a fresh start unless --no-crash

  await using checkpointer = new CkptdSaver({ db: values.db });
  const config = { configurable: { thread_id: values.thread! } };

  const graph = new StateGraph(State)
    .addNode("plan", (s) => {
      console.log("run plan");
      return { notes: [`plan: ${s.topic}`] };
    })
    .addNode("research_a", () => {
      console.log("run research_a");
      return { notes: ["a: sources found"] };
    })
    .addNode("research_b", async () => {
      if (crash) {
        // Wait until research_a's result is durable (a pending write of this superstep), then die.
        for (let i = 0; i < 500; i++) {
          const t = await checkpointer.getTuple(config);
          if (t?.pendingWrites?.some(([, ch, v]) => ch === "notes" && JSON.stringify(v).includes("a: sources found"))) break;
          await new Promise((r) => setTimeout(r, 10));
        }
        console.log("simulating a crash: SIGKILL in research_b");
        process.kill(process.pid, "SIGKILL");
      }
      console.log("run research_b");
      return { notes: ["b: numbers checked"] };
    })
    .addNode("write", (s) => {
      console.log("run write");
      return { report: s.notes.join("; ") };
    })
    .addEdge(START, "plan")
    .addEdge("plan", "research_a")
    .addEdge("plan", "research_b")
    .addEdge(["research_a", "research_b"], "write")
    .addEdge("write", END)
    .compile({ checkpointer });

  const saved = await graph.getState(config);
  let result;
  if (saved.next.length > 0) {
    console.log(`resuming at step ${saved.metadata?.step} (next: ${[...saved.next].sort().join(", ")})`);
    result = await graph.invoke(null, config); // null input: continue from the checkpoint
  } else {
    console.log("fresh start");
    crash = !values["no-crash"];
    result = await graph.invoke({ topic: "durable agents" }, config);
  }
  console.log(`result: ${result.report}`);
}

main().catch((err: unknown) => {
  console.error(err);
  process.exitCode = 1;
});
