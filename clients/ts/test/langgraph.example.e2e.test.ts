/** Runs examples/langgraph_resume twice: killed in the middle of a superstep, then resumed. */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { after, describe, it } from "node:test";

import { buildDir, ckptdPath, tempDir } from "./support/helpers.js";

const script = join(buildDir(), "examples", "langgraph_resume.js");

function run(db: string, ...extra: string[]) {
  const r = spawnSync(process.execPath, [script, "--db", db, ...extra], {
    encoding: "utf8",
    timeout: 60_000,
    env: { ...process.env, CKPTD_PATH: ckptdPath() },
  });
  return { status: r.status, signal: r.signal, out: r.stdout, err: r.stderr, lines: r.stdout.trim().split("\n") };
}

describe("examples/langgraph_resume", () => {
  const t = tempDir("ckptd-lg-example-");
  after(t.cleanup);

  it("is killed mid-superstep, then resumes without re-running the finished parallel task", () => {
    const db = join(t.dir, "lg.db");
    const first = run(db);
    assert.equal(first.signal, "SIGKILL", `status ${first.status}\n${first.out}\n${first.err}`);
    assert.deepEqual(first.lines, ["fresh start", "run plan", "run research_a", "simulating a crash: SIGKILL in research_b"]);

    const second = run(db);
    assert.equal(second.status, 0, `${second.out}\n${second.err}`);
    assert.deepEqual(second.lines, [
      "resuming at step 1 (next: research_b)",
      "run research_b",
      "run write",
      "result: plan: durable agents; a: sources found; b: numbers checked",
    ]);

    const clean = run(join(t.dir, "clean.db"), "--no-crash");
    assert.equal(clean.status, 0, clean.err);
    assert.equal(clean.lines.at(-1), second.lines.at(-1));
  });
});
