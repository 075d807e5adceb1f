/** End-to-end tests of the Workflow helper against the real ckptd binary (CKPTD_PATH). */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";

import { type Client, ResumeValidationError, StepInterruptedError } from "ckptd";

import { Env } from "./support/e2e.js";
import { buildDir, ckptdPath } from "./support/helpers.js";

class TransientError extends Error {}

describe("workflow helper", () => {
  let env: Env;
  let client: Client;
  before(async () => {
    env = new Env();
    client = await env.start();
  });
  after(async () => {
    await env?.cleanup();
  });

  it("saves before_step and completed around a step and chains parents", async () => {
    const wf = await client.workflow<{ n: number }>("wf-steps", { workflowHash: "sha256:h1", initialState: { n: 0 }, metadata: { runner: "test" } });
    assert.equal(await wf.resume(), null);
    assert.equal(wf.startStep, 0);
    const v = await wf.step("inc", 0, (s) => {
      s.state = { n: s.state!.n + 1 };
      return "value-0";
    });
    assert.equal(v, "value-0");
    assert.deepEqual(wf.state, { n: 1 });
    await wf.step("double", 1, async (s) => {
      s.state = { n: s.state!.n * 10 };
    });
    const list = (await client.list({ workflowId: "wf-steps" })).checkpoints.reverse();
    assert.deepEqual(
      list.map((c) => [c.phase, c.step, c.stepName]),
      [
        ["before_step", 0, "inc"],
        ["completed", 0, "inc"],
        ["before_step", 1, "double"],
        ["completed", 1, "double"],
      ],
    );
    for (const c of list) {
      assert.equal(c.workflowHash, "sha256:h1");
      assert.deepEqual(c.metadata, { runner: "test" });
    }
    for (let i = 1; i < list.length; i++) assert.equal(list[i]!.parentId, list[i - 1]!.checkpointId);
    assert.deepEqual((await client.load({ checkpointId: list[2]!.checkpointId })).state, { n: 1 }, "before_step carries the input state");
    assert.deepEqual((await client.load({ checkpointId: list[3]!.checkpointId })).state, { n: 10 });

    const wf2 = await client.workflow<{ n: number }>("wf-steps", { workflowHash: "sha256:h1" });
    const plan = await wf2.resume();
    assert.ok(plan);
    assert.equal(plan.startStep, 2);
    assert.equal(wf2.startStep, 2);
    assert.deepEqual(wf2.state, { n: 10 });
    assert.equal(wf2.shouldRun(1), false);
    assert.equal(wf2.shouldRun(2), true);
    assert.equal(wf2.lastCheckpointId, list[3]!.checkpointId);
  });

  it("saves failed (non-retryable by default) with the input state and rethrows", async () => {
    const wf = await client.workflow<{ n: number }>("wf-fail", { initialState: { n: 5 } });
    const boom = new Error("boom");
    await assert.rejects(
      wf.step("explode", 0, (s) => {
        s.state = { n: 999 };
        throw boom;
      }),
      (e) => e === boom,
    );
    const latest = await client.load<{ n: number }>({ workflowId: "wf-fail" });
    assert.equal(latest.phase, "failed");
    assert.deepEqual(latest.error, { message: "boom", retryable: false });
    assert.deepEqual(latest.state, { n: 5 });
    await assert.rejects(
      (await client.workflow("wf-fail")).resume(),
      (e: unknown) => e instanceof ResumeValidationError && e.problems.some((p) => p.code === "not_retryable"),
    );
  });

  it("classifies retryable failures (retryable flag, configured classes, per-step override)", async () => {
    const wf = await client.workflow<number>("wf-retry", { initialState: 1, retryableErrors: [TransientError] });
    const flagged = Object.assign(new Error("rate limited"), { retryable: true });
    await assert.rejects(wf.step("a", 0, () => Promise.reject(flagged)));
    assert.deepEqual((await client.load({ workflowId: "wf-retry" })).error, { message: "rate limited", retryable: true });
    await assert.rejects(wf.step("a", 0, () => Promise.reject(new TransientError("timeout"))));
    assert.deepEqual((await client.load({ workflowId: "wf-retry" })).error, { message: "timeout", retryable: true });
    await assert.rejects(wf.step("a", 0, () => Promise.reject(new TransientError("nope")), { retryable: false }));
    assert.equal((await client.load({ workflowId: "wf-retry" })).error?.retryable, false);
    await assert.rejects(wf.step("a", 0, () => Promise.reject("a string"), { retryable: (e) => e === "a string" }));
    assert.deepEqual((await client.load({ workflowId: "wf-retry" })).error, { message: "a string", retryable: true });

    const wf2 = await client.workflow<number>("wf-retry");
    const plan = await wf2.resume();
    assert.ok(plan);
    assert.deepEqual([plan.startStep, plan.retry, plan.phase], [0, true, "failed"]);
    assert.equal(wf2.state, 1);
    let retried = false;
    await wf2.step("a", 0, (s) => {
      retried = s.retry;
      s.state = 2;
    });
    assert.equal(retried, true);
  });

  it("saves layer checkpoints with completed task ids and resumes inside a layer", async () => {
    const wf = await client.workflow<{ out: Record<string, number> }>("wf-dag", { workflowHash: "sha256:dag", initialState: { out: {} } });
    await wf.layer(0, { completedTasks: ["a", "b"], pendingTasks: ["c", "d", "e"], state: { out: { a: 1, b: 2 } } });
    await wf.layer(1, { phase: "before_step", completedTasks: ["a", "b", "c"], pendingTasks: ["d", "e"], state: { out: { a: 1, b: 2, c: 3 } } });
    assert.deepEqual(wf.completedTasks, ["a", "b", "c"]);

    const again = await client.workflow<{ out: Record<string, number> }>("wf-dag", { workflowHash: "sha256:dag" });
    const plan = await again.resume();
    assert.ok(plan);
    assert.deepEqual([plan.startStep, plan.retry], [1, true]);
    assert.deepEqual(again.completedTasks, ["a", "b", "c"]);
    assert.deepEqual(again.pendingTasks, ["d", "e"]);
    assert.equal(again.shouldRun(0), false);
    assert.equal(again.shouldRun(1), true);
    assert.deepEqual(
      ["a", "b", "c", "d", "e"].filter((t) => !again.isTaskDone(t)),
      ["d", "e"],
    );
    assert.deepEqual(again.state, { out: { a: 1, b: 2, c: 3 } });
    const cp = await client.load({ workflowId: "wf-dag" });
    assert.deepEqual([cp.completedTaskCount, cp.pendingTaskCount, cp.stepName], [3, 2, "layer-1"]);

    await assert.rejects(
      (await client.workflow("wf-dag", { workflowHash: "sha256:changed" })).resume(),
      (e: unknown) => e instanceof ResumeValidationError && e.problems.some((p) => p.code === "workflow_hash_mismatch"),
    );
    const forced = await (await client.workflow("wf-dag", { workflowHash: "sha256:changed" })).resume({ force: true });
    assert.ok(forced !== null && forced.warnings.length === 1);
    const done = await again.complete();
    assert.equal(done.workflowId, "wf-dag");
  });

  it("applies retention when given and works with byte states", async () => {
    const wf = await client.workflow<Uint8Array>("wf-bytes", { retention: { keepLast: 2 }, initialState: new Uint8Array([1]) });
    await wf.step("grow", 0, (s) => {
      s.state = new Uint8Array([...s.state!, 2]);
    });
    assert.deepEqual((await client.load({ workflowId: "wf-bytes" })).state, new Uint8Array([1, 2]));
    assert.equal((await client.list({ workflowId: "wf-bytes" })).checkpoints.length, 2);
  });

  it("leaves no signal handlers installed outside steps", async () => {
    const before = [process.listenerCount("SIGINT"), process.listenerCount("SIGTERM")];
    const wf = await client.workflow("wf-handlers");
    await wf.step("check", 0, () => {
      assert.equal(process.listenerCount("SIGINT"), before[0]! + 1);
      assert.equal(process.listenerCount("SIGTERM"), before[1]! + 1);
    });
    await assert.rejects(wf.step("check", 1, () => Promise.reject(new Error("x"))));
    assert.deepEqual([process.listenerCount("SIGINT"), process.listenerCount("SIGTERM")], before);
    assert.ok(new StepInterruptedError("SIGINT").message.includes("SIGINT"));
  });

  for (const group of [false, true]) {
    const how = group ? "to its whole process group (a terminal's Ctrl-C)" : "to the child process";
    it(`saves \`interrupted\` when a real SIGINT is sent ${how} mid-step, then dies of SIGINT`, async () => {
      const wfId = group ? "sigint-wf-group" : "sigint-wf";
      const script = join(buildDir(), "test", "fixtures", "sigint_step.js");
      const child = spawn(process.execPath, [script, env.db, wfId], {
        env: { ...process.env, CKPTD_PATH: ckptdPath() },
        stdio: ["ignore", "pipe", "pipe"],
        detached: group, // its own process group, so the test can signal the group
      });
      let out = "";
      let err = "";
      child.stderr.on("data", (d: Buffer) => (err += d.toString()));
      await new Promise<void>((resolve, reject) => {
        child.stdout.on("data", (d: Buffer) => {
          out += d.toString();
          if (out.includes("STEP-RUNNING")) resolve();
        });
        child.on("exit", () => reject(new Error(`child exited early: ${out}\n${err}`)));
      });
      if (group) process.kill(-child.pid!, "SIGINT");
      else child.kill("SIGINT");
      const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve) => child.on("exit", (c, s) => resolve([c, s])));
      assert.equal(signal, "SIGINT", `exit code ${code}; stdout: ${out}; stderr: ${err}`);
      assert.match(out, /ABORTED StepInterruptedError/);
      assert.doesNotMatch(out, /NOT-REACHED/);
      const phases = (await client.list({ workflowId: wfId })).checkpoints.map((c) => [c.phase, c.step]);
      assert.deepEqual(phases[0], ["interrupted", 1]);
      const latest = await client.load<{ done: string[] }>({ workflowId: wfId });
      assert.deepEqual(latest.state, { done: ["first"] }, "interrupted carries the step's input state");
      const plan = await (await client.workflow(wfId, { workflowHash: "sha256:sig" })).resume();
      assert.ok(plan);
      assert.deepEqual([plan.startStep, plan.retry, plan.phase], [1, true, "interrupted"]);
    });
  }
});
