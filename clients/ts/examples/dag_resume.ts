/**
 * A small DAG run layer by layer with ckptd checkpoints.
 *
 * On a fresh start it SIGKILLs itself in the middle of layer 1 (after `parse_b` finished), as a
 * crash would. Run it again with the same database: it resumes inside layer 1, skipping layer 0
 * and the tasks of layer 1 that already finished, and completes the DAG.
 *
 *   npm run build
 *   export CKPTD_PATH=/path/to/ckptd
 *   node build/examples/dag_resume.js --db /tmp/dag.db   # killed mid-run
 *   node build/examples/dag_resume.js --db /tmp/dag.db   # resumes and finishes
 *
 * Options: --db PATH (required), --workflow ID (default dag-demo), --no-crash.
 */
import { createHash } from "node:crypto";
import { parseArgs } from "node:util";

import { Client } from "ckptd";

interface Task {
  id: string;
  deps: string[];
  /** Computes the task's output from its dependencies' outputs. */
  run: (inputs: number[]) => number;
}

/** The DAG, as layers: every task depends only on tasks of earlier layers. */
const layers: Task[][] = [
  [
    { id: "fetch_a", deps: [], run: () => 3 },
    { id: "fetch_b", deps: [], run: () => 4 },
  ],
  [
    { id: "parse_a", deps: ["fetch_a"], run: ([a]) => a! * 10 },
    { id: "parse_b", deps: ["fetch_b"], run: ([b]) => b! * 10 },
    { id: "parse_c", deps: ["fetch_a", "fetch_b"], run: ([a, b]) => a! + b! },
  ],
  [{ id: "merge", deps: ["parse_a", "parse_b", "parse_c"], run: (xs) => xs.reduce((s, x) => s + x, 0) }],
  [{ id: "report", deps: ["merge"], run: ([m]) => m! * 2 }],
];

/** The state checkpointed after every task: each finished task's output. */
interface DagState {
  outputs: Record<string, number>;
}

const CRASH_AFTER = "parse_b";

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: { db: { type: "string" }, workflow: { type: "string", default: "dag-demo" }, "no-crash": { type: "boolean", default: false } },
  });
  if (values.db === undefined) throw new Error("usage: dag_resume --db PATH [--workflow ID] [--no-crash]");

  // The workflow hash ties checkpoints to this DAG's definition: a changed DAG refuses to resume.
  const definition = JSON.stringify(layers.map((l) => l.map((t) => ({ id: t.id, deps: t.deps, run: t.run.toString() }))));
  const workflowHash = "sha256:" + createHash("sha256").update(definition).digest("hex");

  await using client = await Client.start({ db: values.db, clientName: "dag_resume example" });
  const wf = await client.workflow<DagState>(values.workflow!, { workflowHash, initialState: { outputs: {} } });
  const plan = await wf.resume();
  const firstRun = plan === null;
  if (plan === null) console.log("fresh start");
  else console.log(`resuming at layer ${plan.startStep} (${plan.reason}); done: ${wf.completedTasks.join(", ") || "-"}`);

  const all = layers.flat().map((t) => t.id);
  for (const [k, layer] of layers.entries()) {
    if (!wf.shouldRun(k)) {
      console.log(`skip layer ${k} (completed before)`);
      continue;
    }
    for (const task of layer) {
      if (wf.isTaskDone(task.id)) {
        console.log(`skip task ${task.id} (completed before)`);
        continue;
      }
      const outputs = { ...wf.state!.outputs };
      outputs[task.id] = task.run(task.deps.map((d) => outputs[d]!));
      console.log(`run task ${task.id} -> ${outputs[task.id]}`);
      const completedTasks = [...wf.completedTasks, task.id];
      // Progress inside layer k: phase before_step means "layer k in progress" to resume/plan.
      await wf.layer(k, { phase: "before_step", completedTasks, pendingTasks: all.filter((id) => !completedTasks.includes(id)), state: { outputs } });
      if (firstRun && !values["no-crash"] && task.id === CRASH_AFTER) {
        console.log(`simulating a crash: SIGKILL after ${task.id}`);
        process.kill(process.pid, "SIGKILL");
        await new Promise(() => {}); // never resumes
      }
    }
    await wf.layer(k, { completedTasks: [...wf.completedTasks], pendingTasks: all.filter((id) => !wf.isTaskDone(id)) });
    console.log(`layer ${k} completed`);
  }

  const result = wf.state!.outputs["report"];
  console.log(`result: ${JSON.stringify({ report: result, outputs: wf.state!.outputs })}`);
  await wf.complete();
}

main().catch((err: unknown) => {
  console.error(err);
  process.exitCode = 1;
});
