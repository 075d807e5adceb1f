/** End-to-end tests of every client method against the real ckptd binary (CKPTD_PATH). */
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";

import {
  BinaryNotFoundError,
  CheckpointCorruptError,
  CheckpointNotFoundError,
  type Client,
  ClientClosedError,
  type DriftChangedEvent,
  ConflictError,
  DaemonDiedError,
  InvalidParamsError,
  MethodNotFoundError,
  type Notification,
  ResumeValidationError,
  type SaveParams,
  ShuttingDownError,
  TooLargeError,
  Client as ClientClass,
} from "ckptd";

import { Env } from "./support/e2e.js";
import { ckptdPath, waitFor } from "./support/helpers.js";

const sha256 = (b: Uint8Array | string) => createHash("sha256").update(b).digest("hex");

describe("ckptd client end to end", () => {
  let env: Env;
  let client: Client;
  before(async () => {
    env = new Env();
    client = await env.start();
  });
  after(async () => {
    await env?.cleanup();
  });

  it("initializes on start", () => {
    const info = client.serverInfo!;
    assert.equal(info.serverName, "ckptd");
    assert.equal(info.protocolVersion, 1);
    assert.equal(info.capabilities.attachments, true);
    assert.deepEqual([...info.capabilities.stateTypes].sort(), ["bytes", "json"]);
    assert.ok(info.dbPath.endsWith("ckptd.db"), info.dbPath);
    assert.equal(typeof client.pid, "number");
  });

  it("saves and loads a JSON state (attachment both ways)", async () => {
    const state = { messages: ["hi", "naïve ☃ 𝄞"], n: 42, nested: { ok: true, nil: null } };
    const r = await client.save({ workflowId: "json-wf", step: 2, stepName: "chat", state, metadata: { source: "loop" } });
    assert.equal(typeof r.checkpointId, "string");
    assert.equal(r.seq, 1);
    const text = JSON.stringify(state);
    assert.equal(r.sizeBytes, Buffer.byteLength(text));
    assert.equal(r.sha256, sha256(text));
    assert.equal(r.deduplicated, false);
    const loaded = await client.load<typeof state>({ checkpointId: r.checkpointId });
    assert.deepEqual(loaded.state, state);
    assert.equal(loaded.stateType, "json");
    assert.equal(Buffer.from(loaded.stateBytes!).toString(), text);
    assert.equal(loaded.workflowId, "json-wf");
    assert.equal(loaded.step, 2);
    assert.equal(loaded.stepName, "chat");
    assert.equal(loaded.phase, "completed");
    assert.deepEqual(loaded.metadata, { source: "loop" });
    assert.deepEqual(loaded.completedTasks, []);
    assert.deepEqual(loaded.pendingWrites, []);
    assert.equal("stateAttachment" in loaded, false);
    assert.equal("stateBase64" in loaded, false);
  });

  it("saves and loads a 100 KB Uint8Array state as bytes", async () => {
    const bytes = new Uint8Array(randomBytes(100 * 1024));
    const r = await client.save({ workflowId: "bytes-wf", state: bytes });
    assert.equal(r.sizeBytes, bytes.length);
    assert.equal(r.sha256, sha256(bytes));
    const loaded = await client.load({ workflowId: "bytes-wf" });
    assert.equal(loaded.stateType, "bytes");
    assert.ok(loaded.state instanceof Uint8Array);
    assert.equal(Object.getPrototypeOf(loaded.state), Uint8Array.prototype);
    assert.deepEqual(loaded.state, bytes);
    const raw = await client.load({ workflowId: "bytes-wf" }, { decodeState: false });
    assert.equal(raw.state, undefined);
    assert.deepEqual(raw.stateBytes, bytes);
  });

  it("saves pre-serialized JSON bytes, no state, and deduplicates identical states", async () => {
    const r1 = await client.save({ workflowId: "misc-wf", state: Buffer.from('{"a":1}'), stateType: "json" });
    const l1 = await client.load({ checkpointId: r1.checkpointId });
    assert.equal(l1.stateType, "json");
    assert.deepEqual(l1.state, { a: 1 });
    const r2 = await client.save({ workflowId: "misc-wf", state: { a: 1 } });
    assert.equal(r2.deduplicated, true);
    assert.equal(r2.seq, r1.seq + 1);
    const r3 = await client.save({ workflowId: "misc-wf" });
    const l3 = await client.load({ checkpointId: r3.checkpointId });
    assert.equal(l3.stateType, "none");
    assert.equal(l3.state, undefined);
    assert.equal(l3.stateBytes, null);
    const rn = await client.save({ workflowId: "misc-wf", state: null });
    assert.equal((await client.load({ checkpointId: rn.checkpointId })).state, null);
  });

  it("is idempotent for identical re-saves and reports conflicts", async () => {
    const p: SaveParams = { workflowId: "idem-wf", checkpointId: "cp-fixed-1", step: 1, state: { v: 1 } };
    const a = await client.save(p);
    const b = await client.save(p);
    assert.equal(b.seq, a.seq);
    assert.equal(b.checkpointId, "cp-fixed-1");
    await assert.rejects(client.save({ ...p, state: { v: 2 } }), (e: unknown) => e instanceof ConflictError && e.code === -32003 && /cp-fixed-1/.test(e.message));
  });

  it("lists with filters, limit and before cursor", async () => {
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      const r = await client.save({ workflowId: "list-wf", step: i, phase: i % 2 === 0 ? "completed" : "before_step", metadata: { i, tag: i < 3 ? "low" : "high" } });
      ids.push(r.checkpointId);
    }
    const all = await client.list({ workflowId: "list-wf" });
    assert.deepEqual(
      all.checkpoints.map((c) => c.checkpointId),
      [...ids].reverse(),
    );
    const c0 = all.checkpoints[0]!;
    assert.equal(c0.workflowId, "list-wf");
    assert.equal(c0.stateType, "none");
    assert.equal(typeof c0.createdAt, "string");
    assert.equal((await client.list({ workflowId: "list-wf", phase: "before_step" })).checkpoints.length, 2);
    assert.deepEqual(
      (await client.list({ workflowId: "list-wf", metadata: { tag: "low" } })).checkpoints.map((c) => c.step),
      [2, 1, 0],
    );
    assert.equal((await client.list({ workflowId: "list-wf", limit: 2 })).checkpoints.length, 2);
    assert.deepEqual(
      (await client.list({ workflowId: "list-wf", before: ids[2]! })).checkpoints.map((c) => c.checkpointId),
      [ids[1], ids[0]],
    );
  });

  it("deletes checkpoints and workflows", async () => {
    const a = await client.save({ workflowId: "del-wf", state: 1 });
    await client.save({ workflowId: "del-wf", state: 2 });
    assert.deepEqual(await client.delete({ checkpointId: a.checkpointId }), { deleted: 1 });
    assert.deepEqual(await client.delete({ checkpointId: "no-such-id" }), { deleted: 0 });
    await assert.rejects(client.load({ checkpointId: a.checkpointId }), CheckpointNotFoundError);
    assert.equal((await client.delete({ workflowId: "del-wf" })).deleted, 1);
    assert.equal((await client.list({ workflowId: "del-wf" })).checkpoints.length, 0);
  });

  it("prunes (dry run and real)", async () => {
    for (let i = 0; i < 6; i++) await client.save({ workflowId: "prune-wf", step: i, state: { i } });
    const dry = await client.prune({ workflowId: "prune-wf", keepLast: 2, dryRun: true });
    assert.deepEqual([dry.deleted, dry.dryRun], [4, true]);
    assert.equal((await client.list({ workflowId: "prune-wf" })).checkpoints.length, 6);
    const real = await client.prune({ workflowId: "prune-wf", keepLast: 2 });
    assert.deepEqual([real.deleted, real.dryRun], [4, false]);
    assert.ok(real.freedBytes >= 0);
    assert.deepEqual(
      (await client.list({ workflowId: "prune-wf" })).checkpoints.map((c) => c.step),
      [5, 4],
    );
  });

  it("configures retention, completes and lists workflows", async () => {
    const cfg = await client.configure({ workflowId: "ret-wf", retention: { keepLast: 3 } });
    assert.equal(cfg.workflowId, "ret-wf");
    assert.equal(cfg.retention.keepLast, 3);
    assert.equal(typeof cfg.retention.maxAgeSeconds, "number");
    assert.equal(typeof cfg.retention.keepFirst, "boolean");
    for (let i = 0; i < 5; i++) await client.save({ workflowId: "ret-wf", step: i, state: { i } });
    assert.deepEqual(
      (await client.list({ workflowId: "ret-wf" })).checkpoints.map((c) => c.step),
      [4, 3, 2],
    );
    let wfs = await client.workflows();
    const info = wfs.workflows.find((w) => w.workflowId === "ret-wf")!;
    assert.equal(info.count, 3);
    assert.equal(info.resumable, true);
    assert.equal(info.completed, false);
    assert.equal(info.latest?.step, 4);
    const done = await client.complete({ workflowId: "ret-wf", preserve: true });
    assert.deepEqual([done.workflowId, done.deleted], ["ret-wf", 0]);
    wfs = await client.workflows({ resumableOnly: true });
    assert.equal(
      wfs.workflows.some((w) => w.workflowId === "ret-wf"),
      false,
    );
    const all = await client.workflows();
    assert.equal(all.workflows.find((w) => w.workflowId === "ret-wf")?.completed, true);
    await client.save({ workflowId: "gone-wf", state: 1 });
    assert.equal((await client.complete({ workflowId: "gone-wf" })).deleted, 1);
  });

  it("lists workflows page by page (workflow/list limit, cursor, order)", async () => {
    for (let i = 0; i < 23; i++) await client.save({ workflowId: `pg-${String(i).padStart(2, "0")}`, state: i });
    const sent: Array<Record<string, unknown>> = [];
    const request = client.request.bind(client);
    const spy = (method: string, params?: unknown, options?: unknown) => {
      if (method === "workflow/list") sent.push({ ...(params as Record<string, unknown>) });
      return (request as (m: string, p?: unknown, o?: unknown) => Promise<unknown>)(method, params, options);
    };
    (client as unknown as { request: typeof spy }).request = spy;
    try {
      const ids: string[] = [];
      for await (const w of client.workflows({ order: "id", limit: 10 })) if (w.workflowId.startsWith("pg-")) ids.push(w.workflowId);
      assert.deepEqual(ids, Array.from({ length: 23 }, (_, i) => `pg-${String(i).padStart(2, "0")}`));
      assert.ok(sent.length >= 3, "one request per page");
      assert.equal(sent[0]!.cursor, undefined);
      assert.equal(typeof sent[1]!.cursor, "string");
      // awaited without limit or cursor: every workflow, as before paging
      const all = await client.workflows();
      assert.ok(all.workflows.filter((w) => w.workflowId.startsWith("pg-")).length === 23);
      assert.equal(all.cursor, undefined);
      // one page, with its cursor
      const first = await client.workflows({ limit: 5 });
      assert.equal(first.workflows.length, 5);
      assert.equal(first.workflows[0]!.workflowId, "pg-22", "most recently updated first");
      assert.ok(first.cursor);
      const second = await client.workflows({ limit: 5, cursor: first.cursor });
      assert.equal(second.workflows[0]!.workflowId, "pg-17");
      const pages: number[] = [];
      for await (const p of client.workflows({ limit: 20 }).pages()) pages.push(p.workflows.length);
      assert.ok(pages.length >= 2 && pages[0] === 20);
      await assert.rejects(client.workflows({ cursor: "nope" }), (e: unknown) => e instanceof InvalidParamsError);
      await assert.rejects(client.workflows({ limit: 0 }).then(() => undefined), InvalidParamsError);
    } finally {
      (client as unknown as { request: typeof request }).request = request;
    }
  });

  it("puts pending writes and returns them on load", async () => {
    const cp = await client.save({ workflowId: "writes-wf", state: { x: 1 } });
    const r = await client.putWrites({
      workflowId: "writes-wf",
      checkpointId: cp.checkpointId,
      taskId: "task-1",
      writes: [
        { channel: "messages", value: { role: "user", text: "hi" } },
        { channel: "blob", value: new Uint8Array([1, 2, 3]), type: "bytes" },
      ],
    });
    assert.equal(r.stored, 2);
    const again = await client.putWrites({ workflowId: "writes-wf", checkpointId: cp.checkpointId, taskId: "task-1", writes: [{ channel: "messages", value: "other" }] });
    assert.equal(again.stored, 0, "a write with idx >= 0 is stored once");
    const loaded = await client.load({ checkpointId: cp.checkpointId });
    assert.equal(loaded.pendingWrites.length, 2);
    const [w0, w1] = loaded.pendingWrites;
    assert.deepEqual([w0!.taskId, w0!.idx, w0!.channel, w0!.value], ["task-1", 0, "messages", { role: "user", text: "hi" }]);
    assert.deepEqual([w1!.idx, w1!.channel, w1!.valueBase64, w1!.type], [1, "blob", Buffer.from([1, 2, 3]).toString("base64"), "bytes"]);
  });

  it("plans resumes and reports validation problems", async () => {
    await client.save({ workflowId: "plan-wf", step: 0, phase: "completed", state: { s: 0 }, workflowHash: "sha256:aaa", completedTasks: ["a"] });
    await client.save({ workflowId: "plan-wf", step: 1, phase: "completed", state: { s: 1 }, workflowHash: "sha256:aaa", completedTasks: ["a", "b"], pendingTasks: [{ id: "c" }] });
    const plan = await client.resumePlan<{ s: number }>({ workflowId: "plan-wf", workflowHash: "sha256:aaa" });
    assert.equal(plan.startStep, 2);
    assert.equal(plan.retry, false);
    assert.equal(plan.phase, "completed");
    assert.deepEqual(plan.state, { s: 1 });
    assert.deepEqual(plan.completedTasks, ["a", "b"]);
    assert.deepEqual(plan.pendingTasks, [{ id: "c" }]);
    assert.deepEqual(plan.warnings, []);
    assert.equal(typeof plan.reason, "string");

    await client.save({ workflowId: "plan-wf", step: 2, phase: "before_step", state: { s: 1 }, workflowHash: "sha256:aaa" });
    const retry = await client.resumePlan({ workflowId: "plan-wf" });
    assert.deepEqual([retry.startStep, retry.retry], [2, true]);

    await assert.rejects(client.resumePlan({ workflowId: "plan-wf", workflowHash: "sha256:bbb" }), (e: unknown) => {
      assert.ok(e instanceof ResumeValidationError);
      assert.equal(e.code, -32005);
      const p = e.problems.find((x) => x.code === "workflow_hash_mismatch");
      assert.ok(p, JSON.stringify(e.problems));
      assert.equal(p.expected, "sha256:aaa");
      assert.equal(p.actual, "sha256:bbb");
      return true;
    });
    const forced = await client.resumePlan({ workflowId: "plan-wf", workflowHash: "sha256:bbb", force: true });
    assert.deepEqual(
      forced.warnings.map((w) => w.code),
      ["workflow_hash_mismatch"],
    );

    await client.save({ workflowId: "plan-wf", step: 2, phase: "failed", error: { message: "boom", retryable: false }, workflowHash: "sha256:aaa" });
    await assert.rejects(client.resumePlan({ workflowId: "plan-wf" }), (e: unknown) => e instanceof ResumeValidationError && e.problems.some((p) => p.code === "not_retryable"));
    await client.save({ workflowId: "plan-wf", step: 2, phase: "failed", error: { message: "flaky", retryable: true }, workflowHash: "sha256:aaa" });
    const r = await client.resumePlan({ workflowId: "plan-wf" });
    assert.deepEqual([r.startStep, r.retry], [2, true]);
    await assert.rejects(client.resumePlan({ workflowId: "no-such-wf" }), CheckpointNotFoundError);
  });

  it("returns stats", async () => {
    const s = await client.stats();
    assert.ok(s.uptimeSeconds >= 0);
    assert.ok(s.counters.saves > 0);
    assert.ok(s.counters.loads > 0);
    assert.ok(s.latency.save.count > 0);
    assert.equal(typeof s.latency.load.p99Ms, "number");
    assert.ok(s.db.checkpoints > 0);
    assert.ok(s.db.path.endsWith("ckptd.db"));
  });

  it("maps server errors to typed errors", async () => {
    await assert.rejects(client.save({} as SaveParams), (e: unknown) => {
      assert.ok(e instanceof InvalidParamsError, String(e));
      assert.equal(e.code, -32602);
      assert.equal(e.field, "workflowId");
      assert.match(e.message, /workflowId/);
      assert.equal(e.method, "checkpoint/save");
      return true;
    });
    await assert.rejects(client.save({ workflowId: "w", step: -1 }), InvalidParamsError);
    await assert.rejects(client.request("no/such/method"), (e: unknown) => e instanceof MethodNotFoundError && e.methodName === "no/such/method");
    await assert.rejects(client.load({ checkpointId: "does-not-exist" }), (e: unknown) => e instanceof CheckpointNotFoundError && e.code === -32001);
    await assert.rejects(client.load({ workflowId: "does-not-exist" }), CheckpointNotFoundError);
  });

  // docs/protocol.md promises `data` for -32001 ({checkpointId} or {workflowId}) and -32003
  // ({checkpointId}); the typed errors expose it.
  it("puts the ids in error data as docs/protocol.md promises", async () => {
    await assert.rejects(client.load({ checkpointId: "does-not-exist" }), (e: unknown) => e instanceof CheckpointNotFoundError && e.checkpointId === "does-not-exist");
    await assert.rejects(client.load({ workflowId: "does-not-exist" }), (e: unknown) => e instanceof CheckpointNotFoundError && e.workflowId === "does-not-exist");
    await client.save({ workflowId: "data-wf", checkpointId: "cp-data-1", state: 1 });
    await assert.rejects(client.save({ workflowId: "data-wf", checkpointId: "cp-data-1", state: 2 }), (e: unknown) => e instanceof ConflictError && e.checkpointId === "cp-data-1");
  });

  it("checks and watches source drift (drift/status, drift/watch, drift/unwatch)", async () => {
    const src = join(env.dir, "src");
    mkdirSync(src, { recursive: true });
    writeFileSync(join(src, "step.py"), "print('v1')\n");
    const saved = await client.save({ workflowId: "drift-wf", step: 0, state: { v: 1 }, sources: { root: src } });
    const status = await client.driftStatus({ workflowId: "drift-wf" });
    assert.equal(status.drifted, false);
    const watch = await client.driftWatch({ workflowId: "drift-wf", debounceMs: 50 });
    assert.equal(typeof watch.watchId, "string");
    const changed = new Promise<DriftChangedEvent>((resolve) => client.on("drift/changed", (p) => p.watchId === watch.watchId && resolve(p)));
    writeFileSync(join(src, "step.py"), "print('v2')\n");
    const ev = await changed;
    assert.equal(ev.drifted, true);
    assert.ok(ev.changes.some((c) => c.path.endsWith("step.py")), JSON.stringify(ev.changes));
    assert.equal((await client.driftStatus({ checkpointId: saved.checkpointId })).drifted, true);
    await client.driftUnwatch({ watchId: watch.watchId });
  });

  it("matches 200 concurrent (pipelined) saves and loads", async () => {
    for (let w = 0; w < 7; w++) await client.configure({ workflowId: `pipe-wf-${w}`, retention: { keepLast: 0 } });
    const states = Array.from({ length: 200 }, (_, i) => ({ i, pad: "x".repeat(i * 13) }));
    const saves = await Promise.all(states.map((state, i) => client.save({ workflowId: `pipe-wf-${i % 7}`, step: i, state })));
    assert.equal(new Set(saves.map((s) => s.checkpointId)).size, 200);
    saves.forEach((s, i) => assert.equal(s.sha256, sha256(JSON.stringify(states[i]))));
    const loads = await Promise.all(saves.map((s) => client.load<{ i: number }>({ checkpointId: s.checkpointId })));
    loads.forEach((l, i) => {
      assert.equal(l.state?.i, i);
      assert.equal(l.step, i);
    });
    for (let w = 0; w < 7; w++) {
      const seqs = saves.filter((_, i) => i % 7 === w).map((s) => s.seq);
      assert.deepEqual(
        seqs,
        [...seqs].sort((a, b) => a - b),
        "seq strictly increasing in submission order",
      );
    }
  });
});

describe("notifications", () => {
  let env: Env;
  before(() => {
    env = new Env();
  });
  after(async () => {
    await env?.cleanup();
  });

  it("delivers checkpoint/saved as events and via notifications()", async () => {
    const client = await env.start({ events: ["checkpoint/saved", "checkpoint/pruned"] });
    const events: string[] = [];
    client.on("checkpoint/saved", (p) => events.push(p.checkpointId));
    const iter = client.notifications({ methods: ["checkpoint/saved"] });
    const r1 = await client.save({ workflowId: "n-wf", step: 3, phase: "before_step", state: { a: 1 } });
    const r2 = await client.save({ workflowId: "n-wf", step: 3, state: { a: 2 } });
    const got: Notification<"checkpoint/saved">[] = [];
    for await (const n of iter) {
      got.push(n);
      if (got.length === 2) break;
    }
    assert.deepEqual(
      got.map((n) => [n.method, n.params.checkpointId, n.params.workflowId, n.params.seq, n.params.phase, n.params.step, n.params.namespace]),
      [
        ["checkpoint/saved", r1.checkpointId, "n-wf", r1.seq, "before_step", 3, ""],
        ["checkpoint/saved", r2.checkpointId, "n-wf", r2.seq, "completed", 3, ""],
      ],
    );
    await waitFor(() => events.length === 2, 2000, "two saved events");
    assert.deepEqual(events, [r1.checkpointId, r2.checkpointId]);

    const pruned = new Promise<unknown>((resolve) => client.once("checkpoint/pruned", resolve));
    await client.prune({ workflowId: "n-wf", keepLast: 1 });
    const p = (await pruned) as { workflowId: string; checkpointIds: string[]; reason: string };
    assert.deepEqual([p.workflowId, p.checkpointIds, p.reason], ["n-wf", [r1.checkpointId], "prune"]);
    await client.close();
  });

  it("sends nothing when not opted in", async () => {
    const client = await env.start();
    let n = 0;
    client.on("notification", () => n++);
    await client.save({ workflowId: "quiet-wf", state: 1 });
    await client.stats();
    assert.equal(n, 0);
    await client.close();
  });
});

describe("lifecycle", () => {
  let env: Env;
  before(() => {
    env = new Env();
  });
  after(async () => {
    await env?.cleanup();
  });

  it("close() commits, exits 0, and later calls reject; data survives a restart", async () => {
    const client = await env.start();
    const exits: unknown[] = [];
    client.on("exit", (i) => exits.push(i));
    const saves = Array.from({ length: 20 }, (_, i) => client.save({ workflowId: "close-wf", step: i, state: { i } }));
    await client.close();
    const results = await Promise.all(saves);
    assert.equal(results.length, 20);
    assert.deepEqual(exits, [{ exitCode: 0, signal: null, expected: true }]);
    await assert.rejects(client.stats(), ClientClosedError);
    await client.close();
    const again = await env.start();
    const latest = await again.load<{ i: number }>({ workflowId: "close-wf" });
    assert.equal(latest.state?.i, 19);
    await again.close();
  });

  it("Symbol.asyncDispose closes the client", async () => {
    let pid: number | undefined;
    let ref: Client | undefined;
    {
      await using client = await env.start();
      pid = client.pid;
      ref = client;
      await client.save({ workflowId: "dispose-wf", state: 1 });
    }
    assert.equal(ref.isOpen, false);
    assert.throws(() => process.kill(pid!, 0), /ESRCH/);
  });

  it("rejects every pending request at once when the daemon is SIGKILLed, with its stderr tail", async () => {
    const client = await env.start({ args: ["--log-level", "debug"] });
    await client.save({ workflowId: "kill-wf", state: 1 });
    await waitFor(() => client.stderr.length > 0, 5000, "some stderr output");
    const big = new Uint8Array(100 * 1024);
    const pending = Array.from({ length: 100 }, (_, i) => client.save({ workflowId: "kill-wf", step: i, state: big }));
    process.kill(client.pid!, "SIGKILL");
    const t0 = Date.now();
    const settled = await Promise.allSettled(pending);
    const elapsed = Date.now() - t0;
    const rejected = settled.filter((s): s is PromiseRejectedResult => s.status === "rejected");
    assert.ok(rejected.length > 0, "some saves were still pending when the daemon died");
    for (const r of rejected) {
      assert.ok(r.reason instanceof DaemonDiedError, String(r.reason));
      assert.equal(r.reason.signal, "SIGKILL");
      assert.equal(r.reason.exitCode, null);
      assert.ok(r.reason.stderr.length > 0);
      assert.match(r.reason.message, /was killed by SIGKILL/);
      assert.match(r.reason.message, /ckptd stderr/);
    }
    assert.equal(new Set(rejected.map((r) => r.reason)).size, 1, "one error for all");
    assert.ok(elapsed < 5000, `rejections took ${elapsed} ms`);
    // Later calls reject immediately: before the next turn of the event loop.
    for (const call of [() => client.stats(), () => client.load({ workflowId: "kill-wf" })]) {
      const outcome = await Promise.race([call().then(() => "resolved", (e: unknown) => e), new Promise((r) => setImmediate(() => r("still pending")))]);
      assert.ok(outcome instanceof DaemonDiedError, String(outcome));
    }
    await client.close();
  });

  it("answers requests after shutdown with ShuttingDownError", async () => {
    const client = await env.start();
    // shutdown waits for the in-flight save (an incompressible 16 MB state), so the daemon is
    // still there to answer the stats request that follows it.
    const big = client.save({ workflowId: "shutdown-wf", state: new Uint8Array(randomBytes(16 << 20)) });
    const [s, a, b] = await Promise.allSettled([big, client.shutdown(), client.stats()]);
    assert.equal(s.status, "fulfilled", "the save accepted before shutdown is committed");
    assert.equal(a.status, "fulfilled");
    assert.equal(b.status, "rejected");
    assert.ok((b as PromiseRejectedResult).reason instanceof ShuttingDownError, String((b as PromiseRejectedResult).reason));
    await client.close();
    await assert.rejects(client.stats(), ClientClosedError);
  });

  it("reports states over --max-state-size as TooLargeError", async () => {
    const client = await env.start({ args: ["--max-state-size", "1KiB"] });
    await assert.rejects(client.save({ workflowId: "big-wf", state: new Uint8Array(4096) }), (e: unknown) => {
      assert.ok(e instanceof TooLargeError, String(e));
      assert.equal(e.limit, 1024);
      assert.equal(e.size, 4096);
      return true;
    });
    assert.equal((await client.save({ workflowId: "big-wf", state: new Uint8Array(100) })).sizeBytes, 100);
    await client.close();
  });

  it("reports a daemon that fails at start-up (bad flag) with its stderr", async () => {
    await assert.rejects(env.start({ args: ["--no-such-flag"] }), (e: unknown) => {
      assert.ok(e instanceof DaemonDiedError, String(e));
      assert.equal(e.exitCode, 2);
      assert.match(e.stderr, /no-such-flag/);
      return true;
    });
  });

  it("reports a missing binary with every place tried", async () => {
    await assert.rejects(ClientClass.start({ binary: "/nonexistent/ckptd" }), (e: unknown) => {
      assert.ok(e instanceof BinaryNotFoundError);
      assert.match(e.message, /\/nonexistent\/ckptd: does not exist/);
      return true;
    });
    await assert.rejects(ClientClass.start({ env: { CKPTD_PATH: "", PATH: "/nonexistent-dir" } }), (e: unknown) => {
      assert.ok(e instanceof BinaryNotFoundError);
      assert.match(e.message, /\$CKPTD_PATH: not set/);
      assert.match(e.message, /\$PATH: \/nonexistent-dir\/ckptd: does not exist/);
      return true;
    });
    const viaEnv = await ClientClass.start({ db: env.db, env: { ...process.env, CKPTD_PATH: ckptdPath() } });
    assert.equal(viaEnv.binary, ckptdPath());
    await viaEnv.close();
  });

  it("detects a corrupted stored state and falls back to the newest intact checkpoint", async () => {
    const marker = `CORRUPT-ME-${Date.now()}-${Math.random().toString(36).slice(2)}`;
    const client = await env.start({ events: ["checkpoint/corrupted"] });
    const good = await client.save({ workflowId: "corrupt-wf", step: 0, state: { ok: "intact" } });
    const bad = await client.save({ workflowId: "corrupt-wf", step: 1, state: { marker } });
    await client.close();
    let patched = 0;
    for (const f of [env.db, `${env.db}-wal`]) {
      if (!existsSync(f)) continue;
      const buf = readFileSync(f);
      let at = buf.indexOf(marker);
      while (at >= 0) {
        buf[at] = "X".charCodeAt(0);
        patched++;
        at = buf.indexOf(marker, at + 1);
      }
      writeFileSync(f, buf);
    }
    assert.ok(patched > 0, "the state bytes were found in the database file (states < 4 KiB are stored uncompressed)");
    const c2 = await env.start({ events: ["checkpoint/corrupted"] });
    const corrupted: string[] = [];
    c2.on("checkpoint/corrupted", (p) => corrupted.push(p.checkpointId));
    await assert.rejects(c2.load({ checkpointId: bad.checkpointId }), (e: unknown) => e instanceof CheckpointCorruptError && e.checkpointId === bad.checkpointId);
    const latest = await c2.load<{ ok: string }>({ workflowId: "corrupt-wf" });
    assert.equal(latest.checkpointId, good.checkpointId);
    assert.deepEqual(latest.state, { ok: "intact" });
    assert.deepEqual(
      latest.recoveredFrom?.map((r) => r.checkpointId),
      [bad.checkpointId],
    );
    await waitFor(() => corrupted.includes(bad.checkpointId), 2000, "checkpoint/corrupted notification");
    await c2.close();
  });
});
