/** Runs examples/dag_resume twice end to end: killed mid-run, then resumed to completion. */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { after, describe, it } from "node:test";

import { buildDir, ckptdPath, tempDir } from "./support/helpers.js";

const script = join(buildDir(), "examples", "dag_resume.js");

function run(db: string, ...extra: string[]) {
  const r = spawnSync(process.execPath, [script, "--db", db, ...extra], {
    encoding: "utf8",
    timeout: 30_000,
    env: { ...process.env, CKPTD_PATH: ckptdPath() },
  });
  return { status: r.status, signal: r.signal, out: r.stdout, err: r.stderr, lines: r.stdout.trim().split("\n") };
}

describe("examples/dag_resume", () => {
  const t = tempDir("ckptd-dag-");
  after(t.cleanup);

  it("is killed mid-run the first time and resumes, skipping completed layers and tasks, the second", () => {
    const db = join(t.dir, "dag.db");
    const first = run(db);
    assert.equal(first.signal, "SIGKILL", `status ${first.status}\n${first.out}\n${first.err}`);
    assert.deepEqual(first.lines, [
      "fresh start",
      "run task fetch_a -> 3",
      "run task fetch_b -> 4",
      "layer 0 completed",
      "run task parse_a -> 30",
      "run task parse_b -> 40",
      "simulating a crash: SIGKILL after parse_b",
    ]);

    const second = run(db);
    assert.equal(second.status, 0, `${second.out}\n${second.err}`);
    assert.match(second.lines[0]!, /^resuming at layer 1 \(.*\); done: fetch_a, fetch_b, parse_a, parse_b$/);
    assert.deepEqual(second.lines.slice(1), [
      "skip layer 0 (completed before)",
      "skip task parse_a (completed before)",
      "skip task parse_b (completed before)",
      "run task parse_c -> 7",
      "layer 1 completed",
      "run task merge -> 77",
      "layer 2 completed",
      "run task report -> 154",
      "layer 3 completed",
      'result: {"report":154,"outputs":{"fetch_a":3,"fetch_b":4,"parse_a":30,"parse_b":40,"parse_c":7,"merge":77,"report":154}}',
    ]);

    // Same result as an uninterrupted run on a fresh database.
    const clean = run(join(t.dir, "clean.db"), "--no-crash");
    assert.equal(clean.status, 0, clean.err);
    assert.equal(clean.lines.at(-1), second.lines.at(-1));
    assert.ok(!clean.out.includes("skip"));
  });
});
