/**
 * ckptd validation checkpoints and compensations: three steps write files, the third fails its
 * validation, and the rollback deletes the files that step wrote before the step runs again.
 *
 *   npm run build
 *   export CKPTD_PATH=/path/to/ckptd
 *   node build/examples/saga_rollback.js --db /tmp/saga.db --out /tmp/report
 *
 * Each step registers how to undo a file write (`s.compensate`) *before* writing the file, so even
 * a crash right after the write leaves the undo on record in ckptd, and scores its own result
 * (`s.validate`). ckptd classifies the score under the workflow's thresholds: "gather" passes,
 * "draft" gets a warning, "publish" fails (two dead links on the first attempt). A failed
 * validation recommends rolling back to the newest checkpoint whose validation did not fail (here
 * "draft"); `wf.rollback(undo)` runs the compensations registered since, newest first, marking each
 * done in ckptd as it goes (a rollback killed half-way picks up where it stopped), and the workflow
 * resumes after "draft": "publish" runs again, fixed.
 */
import { existsSync, mkdirSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";

import { Client, type RollbackAction } from "ckptd";

const WORKFLOW = "saga-demo";
/** name -> the files it writes */
const STEPS: [string, string[]][] = [
  ["gather", ["data.json"]],
  ["draft", ["draft.md"]],
  ["publish", ["report.md", "index.html"]],
];

/** The step's own check of its result (deterministic, for the demo). */
function score(step: string, attempt: number): [number, string] {
  if (step === "gather") return [0.95, "12 of 12 sources fetched"];
  if (step === "draft") return [0.78, "two claims cite a single source"];
  return attempt === 1 ? [0.31, "2 of 5 links are dead"] : [0.93, "5 of 5 links resolve"];
}

function listing(dir: string): string {
  const names = existsSync(dir) ? readdirSync(dir).sort() : [];
  return names.length > 0 ? names.join(", ") : "(empty)";
}

const { values } = parseArgs({ options: { db: { type: "string" }, out: { type: "string" } } });
if (values.db === undefined || values.out === undefined) {
  console.error("usage: saga_rollback.js --db PATH --out DIR");
  process.exit(2);
}
const out = resolve(values.out);
mkdirSync(out, { recursive: true });

/** The rollback handler: runs one registered action (only one kind in this demo). */
function undo(act: RollbackAction): void {
  const a = act.action as { kind: string; path: string };
  if (a.kind !== "delete_file") throw new Error(`unknown compensation kind ${a.kind}`);
  rmSync(a.path, { force: true }); // already gone is fine: idempotent
  console.log(`  undo: ${act.description}`);
}

const client = await Client.start({ db: values.db });
try {
  // Thresholds (these are the defaults) and the steps that must register a compensation.
  await client.configure({
    workflowId: WORKFLOW,
    validation: { minConfidence: 0.7, warningThreshold: 0.85 },
    compensation: { required: STEPS.map(([name]) => name) },
  });
  const wf = await client.workflow<{ files: string[] }>(WORKFLOW, { initialState: { files: [] } });
  await wf.resume();
  if (wf.rollbackRecommended) {
    console.log("finishing the rollback an earlier run left unfinished");
    await wf.rollback(undo);
  }
  let attempt = 1;
  let finished = false;
  while (!finished) {
    finished = true;
    for (const [i, [name, files]] of STEPS.entries()) {
      if (!wf.shouldRun(i)) {
        console.log(`step ${i} ${name.padEnd(8)} skipped (done before)`);
        continue;
      }
      const [confidence, why] = score(name, attempt);
      await wf.step(name, i, async (s) => {
        for (const f of files) {
          const path = join(out, f);
          await s.compensate({ kind: "delete_file", path }, `remove ${f}`); // before the write
          writeFileSync(path, `${f} (attempt ${attempt})\n`);
        }
        s.validate(confidence, { message: why });
        s.state = { files: [...(s.state?.files ?? []), ...files] };
      });
      console.log(`step ${i} ${name.padEnd(8)} wrote ${files.join(", ")}; validation ${wf.lastValidation?.status} (${confidence}: ${why})`);
      if (wf.rollbackRecommended) {
        const rec = wf.recommendation;
        if (rec?.kind === "to_checkpoint") {
          // the newest checkpoint whose validation did not fail
          const good = await client.load({ checkpointId: rec.checkpointId });
          console.log(`rollback recommended: back to the end of step ${good.step} ${good.stepName} (its validation: ${good.validation?.status})`);
        } else {
          console.log("rollback recommended: all the way back (no step passed its validation)");
        }
        const r = await wf.rollback(undo);
        console.log(`rolled back ${r.ran.length} file writes; files now: ${listing(out)}`);
        console.log(`resuming at step ${wf.startStep}`);
        attempt++;
        finished = false;
        break;
      }
    }
  }
  console.log(`done: ${listing(out)}`);
  console.log(`state: ${JSON.stringify(wf.state)}`);
  for (const st of ["passed", "warning", "failed"] as const) {
    const n = (await client.list({ workflowId: WORKFLOW, validation: st })).checkpoints.length;
    console.log(`checkpoints ${(st + ":").padEnd(7)} ${n}`);
  }
} finally {
  await client.close();
}
