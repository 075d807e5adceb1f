/**
 * Validation checkpoints and the compensation log against the real ckptd binary: classification,
 * the list filter, -32602 for NaN, required compensations, a rollback killed half-way and resumed
 * (each action exactly once, in reverse registration order), a failing handler, and
 * examples/saga_rollback. Every suite runs on SQLite and on PostgreSQL (a fresh schema of the run's
 * throwaway cluster, CKPTD_TEST_PG_URL: skipped without one, a failure under CI=true).
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";

import { Client, InvalidParamsError, ResumeValidationError, RollbackFailedError } from "ckptd";

import { Env } from "./support/e2e.js";
import { buildDir, ckptdPath, pgSchemaURL, tempDir } from "./support/helpers.js";

/** The backends the suites run on: db names a fresh database (a file of dir, or a PostgreSQL schema). */
const backends: { name: string; db: (dir: string, file: string) => string }[] = [{ name: "sqlite", db: (dir, file) => join(dir, file) }];
if ((process.env["CKPTD_TEST_PG_URL"] ?? "") !== "") {
  backends.push({ name: "postgres", db: () => pgSchemaURL()! });
} else {
  const why = "CKPTD_TEST_PG_URL is not set: the PostgreSQL run needs the throwaway cluster ./scripts/test.sh starts";
  describe("validation checkpoints and compensations (postgres)", () => {
    if (process.env["CI"] === "true") {
      it("needs PostgreSQL under CI=true", () => {
        throw new Error(why);
      });
    } else {
      it.skip(`PostgreSQL tests skipped: ${why}`, () => {});
    }
  });
}

function node(script: string, args: string[]) {
  const r = spawnSync(process.execPath, [join(buildDir(), script), ...args], {
    encoding: "utf8",
    timeout: 60_000,
    env: { ...process.env, CKPTD_PATH: ckptdPath() },
  });
  return { status: r.status, signal: r.signal, out: r.stdout, err: r.stderr, lines: r.stdout.trim().split("\n") };
}

for (const backend of backends) {
  describe(`validation checkpoints and compensations (${backend.name})`, () => {
    let env: Env;
    let client: Client;
    before(async () => {
      env = new Env((dir) => backend.db(dir, "ckptd.db"));
      client = await env.start();
    });
    after(async () => {
      await env?.cleanup();
    });

    it("classifies each step's validation under per-step rules, stores it and filters on it", async () => {
      const cfg = await client.configure({
        workflowId: "wf-v",
        validation: { minConfidence: 0.6, steps: { search: { minConfidence: 0.3, warningThreshold: 0.5 } } },
      });
      assert.deepEqual(cfg.validation, { minConfidence: 0.6, warningThreshold: 0.85, rollbackOnFailure: true, steps: { search: { minConfidence: 0.3, warningThreshold: 0.5 } } });
      const wf = await client.workflow("wf-v");
      const seen: unknown[] = [];
      for (const [i, [name, conf]] of ([["plan", 0.85], ["search", 0.3], ["edit", 0.59]] as const).entries()) {
        await wf.step(name, i, (s) => s.validate(conf, { message: `scored ${name}`, details: { i } }));
        seen.push(wf.lastValidation?.status);
      }
      assert.deepEqual(seen, ["passed", "warning", "failed"]);
      const warned = (await client.list({ workflowId: "wf-v", validation: "warning" })).checkpoints;
      assert.deepEqual(warned.map((c) => c.stepName), ["search"]);
      assert.ok(wf.rollbackRecommended);
      assert.deepEqual(wf.recommendation, { kind: "to_checkpoint", checkpointId: warned[0]!.checkpointId });
      assert.deepEqual(wf.lastValidation?.thresholds, { min: 0.6, warning: 0.85 });
      const failed = (await client.list({ workflowId: "wf-v", validation: "failed" })).checkpoints;
      assert.deepEqual(failed.map((c) => c.stepName), ["edit"]);
      assert.deepEqual(failed[0]!.validation, { status: "failed", confidence: 0.59, thresholds: { min: 0.6, warning: 0.85 }, message: "scored edit", details: { i: 2 } });
      // a new helper resuming the workflow sees the recommendation again
      const wf2 = await client.workflow("wf-v");
      await wf2.resume();
      assert.ok(wf2.rollbackRecommended);
      assert.equal(wf2.recommendation?.checkpointId, warned[0]!.checkpointId);
    });

    it("refuses a confidence outside [0, 1] with -32602 naming validation.confidence", async () => {
      const wf = await client.workflow("wf-bad");
      // NaN and the infinities travel as their names (JSON.stringify would send null): the daemon
      // names the field for them like for any number outside [0, 1]
      for (const [bad, reason] of [
        [Number.NaN, "NaN is not a number in [0, 1]"],
        [1.5, "1.5 is out of range [0, 1]"],
        [-0.1, "-0.1 is out of range [0, 1]"],
        [Infinity, "Infinity is not a number in [0, 1]"],
      ] as const) {
        await assert.rejects(
          wf.step("s", 0, (s) => s.validate(bad)),
          (e: unknown) => e instanceof InvalidParamsError && e.field === "validation.confidence" && e.reason === reason,
        );
      }
      const phases = (await client.list({ workflowId: "wf-bad" })).checkpoints.map((c) => c.phase);
      assert.deepEqual(phases, ["before_step", "before_step", "before_step", "before_step"], "no completed checkpoint stored");
    });

    it("refuses a required step's completed save without a compensation (-32005 naming the step)", async () => {
      await client.configure({ workflowId: "wf-req", compensation: { required: ["write"] } });
      const wf = await client.workflow("wf-req");
      await assert.rejects(
        wf.step("write", 0, () => undefined),
        (e: unknown) => e instanceof ResumeValidationError && e.problems.length === 1 && e.problems[0]!.code === "compensation_required" && e.problems[0]!.stepName === "write",
      );
      await wf.step("write", 0, async (s) => {
        const r = await s.compensate({ kind: "noop" }, "nothing to undo");
        assert.equal(r.seq, 1);
      });
      await wf.step("read", 1, () => undefined);
    });

    it("records a failing handler and runs that action again on the next rollback", async () => {
      const t = tempDir("ckptd-saga-fail-");
      try {
        const wf = await client.workflow("wf-fail", { initialState: {} });
        await wf.step("ok", 0, (s) => s.validate(0.9));
        await wf.step("write", 1, async (s) => {
          for (const n of ["g0", "g1", "g2"]) {
            await s.compensate({ path: join(t.dir, n) }, `remove ${n}`);
            writeFileSync(join(t.dir, n), "x");
          }
          s.validate(0.2);
        });
        assert.ok(wf.rollbackRecommended);
        let broken = true;
        const undo = (a: { action: unknown }) => {
          const p = (a.action as { path: string }).path;
          if (broken && p.endsWith("g1")) throw new Error("read-only file system");
          rmSync(p);
        };
        await assert.rejects(wf.rollback(undo), (e: unknown) => e instanceof RollbackFailedError && e.action.description === "remove g1");
        assert.deepEqual(readdirSync(t.dir).sort(), ["g0", "g1"]);
        const plan = await client.rollbackPlan({ workflowId: "wf-fail" });
        assert.deepEqual(plan.actions.map((a) => [a.description, a.status]), [["remove g1", "failed"], ["remove g0", "pending"]]);
        assert.match(plan.actions[0]!.error ?? "", /read-only/);
        broken = false;
        const r = await wf.rollback(undo);
        assert.deepEqual(r.ran.map((a) => a.description), ["remove g1", "remove g0"]);
        assert.deepEqual(readdirSync(t.dir), []);
        assert.equal(wf.startStep, 1);
        assert.ok(!wf.rollbackRecommended);
      } finally {
        t.cleanup();
      }
    });
  });

  describe(`a rollback killed half-way (${backend.name})`, () => {
    const t = tempDir("ckptd-saga-crash-");
    after(t.cleanup);

    it("is resumed by another process and runs each remaining action exactly once, newest first", async () => {
      const db = backend.db(t.dir, "rb.db");
      const out = join(t.dir, "out");
      const log = join(t.dir, "undo.log");
      mkdirSync(out);
      const readLog = () => (existsSync(log) ? readFileSync(log, "utf8").trim().split("\n") : []);

      const first = node("test/fixtures/rollback_child.js", [db, out, log, "crash"]);
      assert.equal(first.signal, "SIGKILL", `status ${first.status}\n${first.out}\n${first.err}`);
      assert.match(first.out, /ROLLING BACK/);
      assert.doesNotMatch(first.out, /NOT REACHED/);
      assert.deepEqual(readLog(), ["undo f4.txt", "undo f3.txt"], "the third action never started");
      assert.deepEqual(readdirSync(out).sort(), ["f1.txt", "f2.txt"]);

      const second = node("test/fixtures/rollback_child.js", [db, out, log, "resume"]);
      assert.equal(second.status, 0, `${second.out}\n${second.err}`);
      const [before, done] = second.lines.map((l) => JSON.parse(l) as Record<string, unknown>);
      assert.equal(before!["recommended"], true);
      assert.ok(before!["unfinished"]);
      assert.deepEqual(done!["ran"], done!["calls"]);
      assert.equal((done!["ran"] as string[]).length, 2);
      assert.deepEqual(done!["progress"], { total: 4, done: 4, failed: 0, pending: 0 });
      assert.equal(done!["startStep"], 1);
      assert.deepEqual(done!["state"], { files: [] });
      assert.equal(done!["recommended"], false);
      assert.equal(done!["pruned"], 10);
      // each action exactly once, in reverse registration order, across both processes
      assert.deepEqual(readLog(), ["undo f4.txt", "undo f3.txt", "undo f2.txt", "undo f1.txt"]);
      assert.deepEqual(readdirSync(out), []);

      const c = await Client.start({ db, binary: ckptdPath() });
      try {
        const plan = await c.resumePlan({ workflowId: "rb-crash" });
        assert.equal(plan.rollback, undefined, "nothing left: a third run resumes after step 0");
        assert.equal(plan.startStep, 1);
        assert.equal(plan.stepName, "plan");
      } finally {
        await c.close();
      }
    });
  });

  describe(`examples/saga_rollback (${backend.name})`, () => {
    const t = tempDir("ckptd-saga-example-");
    after(t.cleanup);

    it("writes files in three steps, fails validation at the third and rolls its writes back", () => {
      const out = join(t.dir, "report");
      const r = node("examples/saga_rollback.js", ["--db", backend.db(t.dir, "saga.db"), "--out", out]);
      assert.equal(r.status, 0, `${r.out}\n${r.err}`);
      assert.deepEqual(r.lines, [
        "step 0 gather   wrote data.json; validation passed (0.95: 12 of 12 sources fetched)",
        "step 1 draft    wrote draft.md; validation warning (0.78: two claims cite a single source)",
        "step 2 publish  wrote report.md, index.html; validation failed (0.31: 2 of 5 links are dead)",
        "rollback recommended: back to the end of step 1 draft (its validation: warning)",
        "  undo: remove index.html",
        "  undo: remove report.md",
        "rolled back 2 file writes; files now: data.json, draft.md",
        "resuming at step 2",
        "step 0 gather   skipped (done before)",
        "step 1 draft    skipped (done before)",
        "step 2 publish  wrote report.md, index.html; validation passed (0.93: 5 of 5 links resolve)",
        "done: data.json, draft.md, index.html, report.md",
        'state: {"files":["data.json","draft.md","report.md","index.html"]}',
        "checkpoints passed: 2",
        "checkpoints warning: 1",
        "checkpoints failed: 0",
      ]);
      assert.equal(readFileSync(join(out, "report.md"), "utf8"), "report.md (attempt 2)\n");
    });
  });
}
