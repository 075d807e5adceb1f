/**
 * The client never sends a param the daemon does not know.
 *
 * ckptd refuses any param a method does not take, or spells otherwise (docs/protocol.md, "Strict
 * params"). These tests drive every public method of Client, Workflow and CkptdSaver against the
 * real daemon (CKPTD_PATH), every option of each given at least once, and fail if the daemon
 * refused a param anywhere, even where a helper swallows the error (a failed step's save only
 * warns). The methods and their options are enumerated by the type checker: a public method or
 * an option added without being exercised here fails to compile (or, if not called, the test).
 */
import assert from "node:assert/strict";
import type { EventEmitter } from "node:events";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, afterEach, before, describe, it } from "node:test";

import { emptyCheckpoint, uuid6, type Checkpoint, type CheckpointListOptions, type CheckpointMetadata } from "@langchain/langgraph-checkpoint";
import {
  CheckpointNotFoundError,
  Claim,
  Client,
  CkptdError,
  InvalidParamsError,
  Workflow,
  type CallOptions,
  type ClaimOptions,
  type ClaimParams,
  type ConfigureParams,
  type DeleteParams,
  type DriftStatusParams,
  type DriftUnwatchParams,
  type DriftWatchParams,
  type InitializeParams,
  type LayerParams,
  type ListParams,
  type LoadParams,
  type PruneParams,
  type PutWritesParams,
  type ReleaseParams,
  type RenewParams,
  type Reply,
  type ResumePlanParams,
  type Retention,
  type SaveParams,
  type SourcesSpec,
  type StepError,
  type StepOptions,
  type Write,
  type WorkflowListParams,
  type WorkflowOptions,
  type CompleteParams,
  type CompensationDoneParams,
  type RegisterCompensationParams,
  type RollbackCompleteParams,
  type RollbackOptions,
  type RollbackPlanParams,
  type ValidationParams,
} from "ckptd";
import { CkptdSaver } from "ckptd/langgraph";

import { Env } from "./support/e2e.js";

// ---------------------------------------------------------------------------------------------
// What must be exercised, enumerated by the type checker

/** The names of the public methods of T (symbols aside). */
type MethodsOf<T> = { [K in keyof T]-?: T[K] extends (...args: never[]) => unknown ? K : never }[keyof T] & string;
/** Every key of every member of a union. */
type Keys<T> = T extends unknown ? keyof T & string : never;
/** An object with exactly the keys of T (the compiler rejects a missing or an extra one). */
type Exactly<T> = { [K in Keys<T>]: true };

const names = <T>(k: Exactly<T>): string[] => Object.keys(k);

/** Client's own public methods (EventEmitter's are not the client's). */
type ClientMethod = Exclude<MethodsOf<Client>, keyof EventEmitter>;
/** CkptdSaver's public methods, LangGraph's base class ones included (get, getTuple, ...). */
type SaverMethod = Exclude<MethodsOf<CkptdSaver>, "toJSON">;
type WorkflowMethod = MethodsOf<Workflow>;
type ClaimMethod = MethodsOf<Claim>;

/**
 * Per method: which argument holds its options object, and the option names every call of the
 * test together must give (all of the type's, client-side CallOptions aside). `null`: no options
 * object (its arguments are all required, or client-side only).
 */
type Options = { arg: number; keys: string[] } | null;

const clientOptions: Record<ClientMethod, Options> = {
  call: null, // raw: method, params, options
  request: null,
  notifications: null, // client-side
  initialize: { arg: 0, keys: names<InitializeParams>({ clientName: true, events: true }) },
  shutdown: null,
  close: null,
  save: {
    arg: 0,
    keys: names<SaveParams>({
      workflowId: true, namespace: true, checkpointId: true, parentId: true, phase: true, step: true, stepName: true,
      error: true, state: true, stateType: true, completedTasks: true, pendingTasks: true, workflowHash: true,
      metadata: true, sources: true, validation: true, fencingToken: true,
    }),
  },
  load: { arg: 0, keys: names<LoadParams>({ checkpointId: true, workflowId: true, namespace: true }) },
  list: { arg: 0, keys: names<ListParams>({ workflowId: true, namespace: true, phase: true, metadata: true, before: true, limit: true, validation: true }) },
  delete: { arg: 0, keys: names<DeleteParams>({ checkpointId: true, workflowId: true }) },
  prune: { arg: 0, keys: names<PruneParams>({ workflowId: true, keepLast: true, olderThanSeconds: true, dryRun: true }) },
  configure: { arg: 0, keys: names<ConfigureParams>({ workflowId: true, retention: true, sources: true, validation: true, compensation: true }) },
  complete: { arg: 0, keys: names<CompleteParams>({ workflowId: true, preserve: true, fencingToken: true }) },
  workflows: { arg: 0, keys: names<WorkflowListParams>({ resumableOnly: true, claimable: true, limit: true, cursor: true, order: true }) },
  putWrites: {
    arg: 0,
    keys: names<PutWritesParams>({ workflowId: true, namespace: true, checkpointId: true, taskId: true, taskPath: true, writes: true, fencingToken: true }),
  },
  claimWorkflow: { arg: 0, keys: names<ClaimParams>({ workflowId: true, owner: true, leaseSeconds: true }) },
  renewClaim: { arg: 0, keys: names<RenewParams>({ workflowId: true, fencingToken: true, leaseSeconds: true }) },
  releaseClaim: { arg: 0, keys: names<ReleaseParams>({ workflowId: true, fencingToken: true }) },
  claim: { arg: 1, keys: names<ClaimOptions>({ owner: true, leaseSeconds: true, renewEveryMs: true }) },
  withClaim: { arg: 1, keys: names<ClaimOptions>({ owner: true, leaseSeconds: true, renewEveryMs: true }) },
  resumePlan: {
    arg: 0,
    keys: names<ResumePlanParams>({
      workflowId: true, namespace: true, checkpointId: true, workflowHash: true, force: true, driftAsWarning: true, rollback: true,
      toCheckpointId: true, sourcesRoot: true,
    }),
  },
  registerCompensation: {
    arg: 0,
    keys: names<RegisterCompensationParams>({
      workflowId: true, namespace: true, checkpointId: true, stepName: true, taskId: true, action: true, description: true,
    }),
  },
  rollbackPlan: { arg: 0, keys: names<RollbackPlanParams>({ workflowId: true, namespace: true, toCheckpointId: true, full: true }) },
  compensationDone: { arg: 0, keys: names<CompensationDoneParams>({ compensationId: true, rollbackId: true, ok: true, error: true }) },
  rollbackComplete: { arg: 0, keys: names<RollbackCompleteParams>({ rollbackId: true, prune: true }) },
  stats: null,
  driftStatus: { arg: 0, keys: names<DriftStatusParams>({ workflowId: true, namespace: true, checkpointId: true, limits: true, sourcesRoot: true }) },
  driftWatch: { arg: 0, keys: names<DriftWatchParams>({ workflowId: true, namespace: true, checkpointId: true, debounceMs: true, limits: true }) },
  driftUnwatch: { arg: 0, keys: names<DriftUnwatchParams>({ watchId: true }) },
  workflow: {
    arg: 1,
    keys: names<WorkflowOptions>({
      namespace: true, workflowHash: true, sources: true, retention: true, retryableErrors: true, metadata: true,
      initialState: true, signals: true, claim: true, sourcesRoot: true,
    }),
  },
};

const claimOptions: Record<ClaimMethod, Options> = {
  acquire: null,
  renew: null,
  release: null,
  check: null,
  noteRefusal: null,
};

const workflowOptions: Record<WorkflowMethod, Options> = {
  shouldRun: null,
  isTaskDone: null,
  resume: { arg: 0, keys: names<Omit<Parameters<Workflow["resume"]>[0] & {}, keyof CallOptions>>({ force: true, checkpointId: true }) },
  save: {
    arg: 0,
    keys: names<Omit<SaveParams, "workflowId" | "namespace">>({
      checkpointId: true, parentId: true, phase: true, step: true, stepName: true, error: true, state: true,
      stateType: true, completedTasks: true, pendingTasks: true, workflowHash: true, metadata: true, sources: true, validation: true,
      fencingToken: true,
    }),
  },
  rollback: { arg: 1, keys: names<RollbackOptions>({ toCheckpointId: true, full: true, prune: true }) },
  step: { arg: 3, keys: names<StepOptions>({ retryable: true, metadata: true }) },
  layer: { arg: 1, keys: names<LayerParams>({ completedTasks: true, pendingTasks: true, state: true, phase: true, stepName: true, metadata: true }) },
  complete: { arg: 0, keys: names<Omit<Parameters<Workflow["complete"]>[0] & {}, keyof CallOptions>>({ preserve: true }) },
};

const saverOptions: Record<SaverMethod, Options> = {
  setup: null,
  client: null,
  close: null,
  get: null,
  getTuple: null,
  list: { arg: 1, keys: names<CheckpointListOptions>({ limit: true, before: true, filter: true }) },
  put: null,
  putWrites: null, // taskPath: covered by the calls below (checked on the wire)
  deleteThread: null,
  copyThread: null,
  prune: null,
  deleteForRuns: null,
  getDeltaChannelHistory: null,
  getNextVersion: null,
  configureRetention: { arg: 0, keys: names<Parameters<CkptdSaver["configureRetention"]>[0] & {}>({ threadId: true, retention: true, inherit: true }) },
};

// Nested objects sent as they are given: their types are checked the same way.
const nested = {
  error: names<StepError>({ message: true, retryable: true }),
  retention: names<Retention>({ keepLast: true, maxAgeSeconds: true, keepFirst: true, idleTtlSeconds: true }),
  sources: names<SourcesSpec>({ root: true, include: true, exclude: true, gitignore: true, editorFiles: true, limits: true }),
  validation: names<ValidationParams>({ confidence: true, message: true, details: true }),
  write: names<Write>({ channel: true, value: true, valueBase64: true, type: true, idx: true }),
};

// ---------------------------------------------------------------------------------------------
// Recording

interface Sent {
  method: string;
  params: unknown;
  error?: unknown;
}

/** Wraps the public methods of a prototype, recording the calls and the option names given. */
class Recorder {
  readonly called = new Map<string, Set<string>>(); // "Class.method" -> option names given
  readonly sent: Sent[] = [];
  private readonly restore: (() => void)[] = [];

  wrap(label: string, proto: object, table: Record<string, Options>): void {
    for (const [name, opts] of Object.entries(table)) {
      const key = `${label}.${name}`;
      const original = (proto as Record<string, unknown>)[name];
      assert.equal(typeof original, "function", `${key} is not a method`);
      const had = Object.prototype.hasOwnProperty.call(proto, name);
      const called = this.called;
      const wrapper = function (this: unknown, ...args: unknown[]): unknown {
        const given = called.get(key) ?? new Set<string>();
        called.set(key, given);
        const o = opts === null ? undefined : args[opts.arg];
        if (o !== null && typeof o === "object") for (const [k, v] of Object.entries(o)) if (v !== undefined) given.add(k);
        return (original as (...a: unknown[]) => unknown).apply(this, args);
      };
      Object.defineProperty(proto, name, { value: wrapper, writable: true, configurable: true });
      this.restore.push(() => {
        if (had) Object.defineProperty(proto, name, { value: original, writable: true, configurable: true });
        else delete (proto as Record<string, unknown>)[name];
      });
    }
  }

  /** Records every request at Client.call (which every request goes through) and its error. */
  wrapTransport(): void {
    const proto = Client.prototype as unknown as { call: (m: string, p?: unknown, o?: unknown) => Promise<Reply> };
    const original = proto.call;
    const sent = this.sent;
    proto.call = function (this: unknown, method: string, params?: unknown, options?: unknown): Promise<Reply> {
      const entry: Sent = { method, params };
      sent.push(entry);
      const p = original.call(this, method, params, options);
      p.catch((e: unknown) => {
        entry.error = e;
      });
      return p;
    };
    this.restore.push(() => {
      proto.call = original;
    });
  }

  undo(): void {
    for (const r of this.restore.reverse()) r();
    this.restore.length = 0;
  }

  /** No param refused; every method called; every option given; every nested name sent. */
  check(tables: [string, Record<string, Options>][], methods: string[]): void {
    const refused = this.sent.filter((s) => s.error instanceof InvalidParamsError);
    assert.deepEqual(
      refused.map((s) => `${s.method} ${JSON.stringify(s.params)}: ${(s.error as Error).message}`),
      [],
      "the daemon refused params the client sent",
    );
    const others = this.sent.filter(
      (s) => s.error !== undefined && !(s.method === "resume/plan" && s.error instanceof CheckpointNotFoundError) && s.method !== "shutdown",
    );
    assert.deepEqual(others.map((s) => `${s.method}: ${String(s.error)}`), [], "unexpected errors");
    const missing: string[] = [];
    for (const [label, table] of tables) {
      for (const [name, opts] of Object.entries(table)) {
        const given = this.called.get(`${label}.${name}`);
        if (given === undefined) {
          missing.push(`${label}.${name}: never called`);
          continue;
        }
        for (const k of opts?.keys ?? []) if (!given.has(k)) missing.push(`${label}.${name}: option ${k} never given`);
      }
    }
    assert.deepEqual(missing, [], "not exercised against the daemon");
    const sentMethods = new Set(this.sent.map((s) => s.method));
    assert.deepEqual(methods.filter((m) => !sentMethods.has(m)), [], "daemon methods never sent");
  }

  /** Every name of a nested object was sent at least once under `field` (of any request). */
  checkNested(field: string, keys: string[]): void {
    const seen = new Set<string>();
    const visit = (v: unknown): void => {
      if (Array.isArray(v)) v.forEach(visit);
      else if (v !== null && typeof v === "object") {
        for (const [k, x] of Object.entries(v)) {
          if (k === field && x !== null && typeof x === "object") {
            for (const o of Array.isArray(x) ? x : [x]) if (o !== null && typeof o === "object") Object.keys(o).forEach((n) => seen.add(n));
          }
        }
      }
    };
    this.sent.forEach((s) => visit(s.params));
    assert.deepEqual(keys.filter((k) => !seen.has(k)), [], `names of ${field} never sent`);
  }
}

/** Every method docs/protocol.md documents (its ### `method` headings), notifications aside. */
function daemonMethods(): string[] {
  const text = readFileSync(join(import.meta.dirname, "..", "..", "..", "..", "docs", "protocol.md"), "utf8");
  const out = [...text.matchAll(/^### `([a-z]+(?:\/[a-zA-Z]+)?)`\s*$/gm)].map((m) => m[1]!);
  assert.ok(out.includes("checkpoint/save") && out.includes("lg/put") && out.includes("shutdown"), out.join(" "));
  return out;
}

const meta = (step: number, run: string): CheckpointMetadata => ({ source: "loop", step, parents: {}, run_id: run }) as CheckpointMetadata;

const cfg = (thread: string, ns = "", id?: string) => ({
  configurable: { thread_id: thread, checkpoint_ns: ns, ...(id !== undefined ? { checkpoint_id: id } : {}) },
});

function checkpoint(values: Record<string, unknown>, versions: Record<string, number>): Checkpoint {
  return { ...emptyCheckpoint(), id: uuid6(3), channel_values: values, channel_versions: versions };
}

// ---------------------------------------------------------------------------------------------

describe("the client sends only params the daemon knows", () => {
  let env: Env;
  let rec: Recorder;
  let src: string;
  before(() => {
    env = new Env();
    src = join(env.dir, "src");
    mkdirSync(src);
    writeFileSync(join(src, "main.ts"), "export {};\n");
  });
  afterEach(() => rec?.undo());
  after(async () => {
    await env?.cleanup();
  });

  it("Client and Workflow: every method, every option", async () => {
    rec = new Recorder();
    rec.wrapTransport();
    rec.wrap("Client", Client.prototype, clientOptions);
    rec.wrap("Workflow", Workflow.prototype, workflowOptions);
    rec.wrap("Claim", Claim.prototype, claimOptions);

    const c = await env.start({ args: ["--keep-last", "0"] });
    const info = await c.initialize({ clientName: "wire", events: ["checkpoint/saved", "checkpoint/pruned"] });
    assert.equal(info.serverName, "ckptd");
    const spec: Required<SourcesSpec> = {
      root: src, include: ["*.ts"], exclude: ["build"], gitignore: false, editorFiles: true,
      limits: { maxFiles: 100000, maxBytes: 1 << 30, timeoutMs: 60000 },
    };

    const r1 = await c.save({
      workflowId: "wf", namespace: "", checkpointId: "c1", phase: "completed", step: 1, stepName: "one",
      state: Buffer.from('{"n":1}'), stateType: "json", completedTasks: ["a"], pendingTasks: [{ id: "b" }],
      workflowHash: "sha256:h", metadata: { k: "v" }, sources: { root: src },
    });
    assert.equal(r1.checkpointId, "c1");
    await c.save({
      workflowId: "wf", checkpointId: "c2", parentId: "c1", phase: "failed", step: 2, error: { message: "boom", retryable: true },
      state: { n: 2 }, sources: spec,
    });
    await c.save({ workflowId: "wf", checkpointId: "c3", step: 3, state: new Uint8Array([1, 2]), stateType: "bytes", error: null, sources: spec });
    assert.equal((await c.load({ checkpointId: "c1" })).checkpointId, "c1");
    assert.equal((await c.load({ workflowId: "wf", namespace: "" })).checkpointId, "c3");
    const listed = await c.list({ workflowId: "wf", namespace: "", phase: "completed", metadata: { k: "v" }, before: "c3", limit: 5 });
    assert.deepEqual(listed.checkpoints.map((s) => s.checkpointId), ["c1"]);
    await c.putWrites({
      workflowId: "wf", namespace: "", checkpointId: "c3", taskId: "t1", taskPath: "p",
      writes: [{ channel: "ch", value: 1, type: "json", idx: 0 }, { channel: "ch2", value: new Uint8Array([7]), idx: 1 }],
    });
    const plan = await c.resumePlan({
      workflowId: "wf", namespace: "", checkpointId: "c1", workflowHash: "sha256:h", force: true, driftAsWarning: true, sourcesRoot: src,
    });
    assert.equal(plan.checkpointId, "c1");
    assert.equal((await c.driftStatus({ workflowId: "wf", namespace: "", sourcesRoot: src })).drifted, false);
    assert.equal((await c.driftStatus({ checkpointId: "c1", limits: { maxFiles: 100000 } })).checkpointId, "c1");
    const w1 = await c.driftWatch({ workflowId: "wf", namespace: "", debounceMs: 20, limits: { maxFiles: 100000 } });
    await c.driftUnwatch({ watchId: w1.watchId });
    const w2 = await c.driftWatch({ checkpointId: "c1", limits: { timeoutMs: 60000 } });
    await c.driftUnwatch({ watchId: w2.watchId });
    const retention: Required<Retention> = { keepLast: 5, maxAgeSeconds: 86400, keepFirst: true, idleTtlSeconds: 86400 };
    assert.equal((await c.configure({ workflowId: "wf", retention, sources: spec })).retention.keepLast, 5);
    await c.configure({ workflowId: "wf", sources: null });
    assert.ok((await c.workflows({ resumableOnly: true })).workflows.some((w) => w.workflowId === "wf"));
    await c.save({ workflowId: "wf-page-1", state: 1 });
    await c.save({ workflowId: "wf-page-2", state: 1 });
    const ids: string[] = [];
    for await (const w of c.workflows({ order: "id", limit: 1 })) ids.push(w.workflowId);
    assert.deepEqual(ids, [...ids].sort());
    const page = await c.workflows({ resumableOnly: true, claimable: true, order: "id", limit: 1 });
    assert.equal(page.workflows.length, 1);
    assert.ok(page.cursor);
    assert.equal((await c.workflows({ claimable: true, order: "id", limit: 1, cursor: page.cursor })).workflows.length, 1);
    assert.equal((await c.prune({ workflowId: "wf", keepLast: 1, olderThanSeconds: 3600, dryRun: true })).dryRun, true);
    await c.save({ workflowId: "wf-empty" });
    // a state that grows: the second save goes as a wire delta (stateDelta)
    const grown = { messages: Array.from({ length: 200 }, (_, i) => `message ${i} ${"x".repeat(60)}`) };
    await c.save({ workflowId: "wf-delta", checkpointId: "d1", state: grown });
    grown.messages.push("one more");
    await c.save({ workflowId: "wf-delta", checkpointId: "d2", state: grown });
    assert.ok((await c.stats()).counters.deltaSaves >= 1);
    const fp = await c.stats({ workflowId: "wf-delta" });
    assert.ok(fp.workflow!.ratio > 1 && fp.db.storage!.storedBytes > 0);
    assert.equal((await c.complete({ workflowId: "wf-empty", preserve: true })).workflowId, "wf-empty");
    // claims by hand: every write takes the token
    const k = await c.claimWorkflow({ workflowId: "wf-claim", owner: "wire", leaseSeconds: 30 });
    await c.save({ workflowId: "wf-claim", checkpointId: "k1", state: 1, fencingToken: k.fencingToken });
    await c.putWrites({ workflowId: "wf-claim", checkpointId: "k1", taskId: "t", writes: [{ channel: "ch", value: 1 }], fencingToken: k.fencingToken });
    assert.equal((await c.renewClaim({ workflowId: "wf-claim", fencingToken: k.fencingToken, leaseSeconds: 60 })).fencingToken, k.fencingToken);
    await c.complete({ workflowId: "wf-claim", preserve: true, fencingToken: k.fencingToken });
    assert.equal((await c.releaseClaim({ workflowId: "wf-claim", fencingToken: k.fencingToken })).released, true);
    await c.save({ workflowId: "wf-claimable", state: 1 });
    assert.ok((await c.workflows({ claimable: true })).workflows.some((w) => w.workflowId === "wf-claimable"));
    const manual = await c.claim("wf-manual", { owner: "wire", leaseSeconds: 30, renewEveryMs: 5000 });
    assert.equal((await manual.renew()).fencingToken, manual.fencingToken);
    manual.check();
    manual.noteRefusal(new Error("not a refusal"));
    assert.equal(await manual.release(), true);
    assert.equal((await c.delete({ checkpointId: "c2" })).deleted, 1);
    const stats = await c.stats();
    assert.ok(stats.counters.saves >= 4);
    assert.equal((await c.request<{ seq: number }>("checkpoint/save", { workflowId: "raw", stateAttachment: true }, { attachment: Buffer.from("{}") })).seq, 1);
    assert.equal((await c.delete({ workflowId: "raw" })).deleted, 1);
    assert.equal(((await c.call("checkpoint/list", { workflowId: "raw" })).result as { checkpoints: unknown[] }).checkpoints.length, 0);
    const it = c.notifications({ methods: ["checkpoint/saved"] });
    await it.return?.();

    // Validation checkpoints and the compensation log, every option.
    const vcfg = await c.configure({
      workflowId: "wf-saga",
      validation: { minConfidence: 0.6, warningThreshold: 0.8, rollbackOnFailure: true, steps: { s: { minConfidence: 0.2 } } },
      compensation: { required: ["write"] },
    });
    assert.equal(vcfg.validation?.minConfidence, 0.6);
    await c.save({ workflowId: "wf-saga", checkpointId: "v1", stepName: "plan", validation: { confidence: 0.9, message: "ok", details: { k: 1 } } });
    const reg = await c.registerCompensation({
      workflowId: "wf-saga", namespace: "", checkpointId: "v1", stepName: "write", taskId: "t", action: { kind: "noop" }, description: "nothing",
    });
    await c.save({ workflowId: "wf-saga", checkpointId: "v2", stepName: "write", validation: { confidence: 0.1 } });
    assert.deepEqual((await c.list({ workflowId: "wf-saga", validation: "failed" })).checkpoints.map((x) => x.checkpointId), ["v2"]);
    assert.equal((await c.resumePlan({ workflowId: "wf-saga", rollback: true })).checkpointId, "v1");
    assert.equal((await c.resumePlan({ workflowId: "wf-saga", toCheckpointId: "v1" })).rollback?.actions[0]?.compensationId, reg.compensationId);
    const rb = await c.rollbackPlan({ workflowId: "wf-saga", namespace: "", toCheckpointId: "v1" });
    assert.equal((await c.compensationDone({ compensationId: reg.compensationId, rollbackId: rb.rollbackId, ok: false, error: "EACCES" })).status, "failed");
    assert.equal((await c.compensationDone({ compensationId: reg.compensationId, rollbackId: rb.rollbackId, ok: true })).status, "done");
    assert.equal((await c.rollbackComplete({ rollbackId: rb.rollbackId, prune: true })).pruned, 1);
    const full = await c.rollbackPlan({ workflowId: "wf-saga", full: true });
    assert.equal((await c.rollbackComplete({ rollbackId: full.rollbackId })).progress.total, 0);

    // The workflow helper, every option, under a claim.
    await c.withClaim("wf-helper", { owner: "wire", leaseSeconds: 45, renewEveryMs: 5000 }, async (claim) => {
      const wf = await c.workflow<{ n: number }>("wf-helper", {
        namespace: "ns", workflowHash: "h", sources: { root: src }, retention: { keepLast: 10 }, retryableErrors: [RangeError],
        metadata: { owner: "wire" }, initialState: { n: 0 }, signals: [], claim, sourcesRoot: src,
      });
      assert.equal(await wf.resume({ force: true }), null);
      assert.ok(wf.shouldRun(0) && !wf.isTaskDone("x"));
      await wf.step("one", 0, (s) => {
        s.state = { n: 1 };
      }, { metadata: { k: 1 } });
      await assert.rejects(
        wf.step("two", 1, () => {
          throw new RangeError("boom");
        }, { retryable: false, metadata: { k: 2 } }),
        RangeError,
      );
      await wf.layer(2, { completedTasks: ["a"], pendingTasks: ["b"], state: { n: 2 }, phase: "before_step", stepName: "layer", metadata: { l: 1 } });
      const saved = await wf.save({
        checkpointId: "wfh-9", parentId: "wfh-x", phase: "failed", step: 9, stepName: "nine", error: { message: "m", retryable: false },
        state: Buffer.from("[9]"), stateType: "json", completedTasks: [], pendingTasks: [], workflowHash: "h2", metadata: { m: 1 }, sources: { root: src },
        fencingToken: claim.fencingToken,
      });
      assert.equal(saved.checkpointId, "wfh-9");
      const plan2 = await wf.resume({ checkpointId: "wfh-9", force: true });
      assert.equal(plan2?.checkpointId, "wfh-9");
      await wf.complete({ preserve: true });
    });
    const wf3 = await c.workflow("wf-saga-helper", { initialState: {} });
    await wf3.step("a", 0, (s) => s.validate(0.9, { message: "m", details: { d: 1 } }));
    const good = wf3.lastCheckpointId!;
    await wf3.step("b", 1, async (s) => {
      await s.compensate({ kind: "noop" }, "nothing", { taskId: "t" });
      s.validate(0.1);
    });
    assert.ok(wf3.rollbackRecommended);
    assert.equal((await wf3.rollback(() => undefined, { toCheckpointId: good, prune: false })).toCheckpointId, good);
    assert.equal((await wf3.rollback(() => undefined, { full: true })).full, true);
    await wf3.save({ validation: { confidence: 0.5 } });

    await c.shutdown();
    await c.close();
    // close on a client that was not shut down (sends shutdown itself)
    const c2 = await env.start();
    await c2.close();

    rec.check(
      [
        ["Client", clientOptions],
        ["Workflow", workflowOptions],
        ["Claim", claimOptions],
      ],
      daemonMethods().filter((m) => !m.startsWith("lg/") && !m.startsWith("thread/")),
    );
    rec.checkNested("error", nested.error);
    rec.checkNested("retention", nested.retention);
    rec.checkNested("sources", nested.sources);
    rec.checkNested("validation", nested.validation);
    rec.checkNested("writes", nested.write);
  });

  it("CkptdSaver: every method, every option", async () => {
    rec = new Recorder();
    rec.wrapTransport();
    rec.wrap("CkptdSaver", CkptdSaver.prototype, saverOptions);

    const saver = new CkptdSaver({ db: join(env.dir, "lg.db"), binary: env.binary, args: ["--durability", "normal"] });
    await saver.setup();
    const client = await saver.client();
    assert.ok(client instanceof Client);
    const v1 = saver.getNextVersion(undefined);
    const v2 = saver.getNextVersion(v1);
    const c1 = await saver.put(cfg("t1"), checkpoint({ a: 1, b: "x" }, { a: v1, b: v1 }), meta(0, "r1"), { a: v1, b: v1 });
    await saver.putWrites(c1, [["a", 2], ["__error__", "e"]], "task-1", "path/1");
    const c2 = await saver.put(c1, checkpoint({ a: 2 }, { a: v2, b: v1 }), meta(1, "r2"), { a: v2 });
    await saver.putWrites(c2, [["a", 3]], "task-2");
    assert.ok((await saver.getTuple(c1)) !== undefined && (await saver.get(cfg("t1"))) !== undefined);
    const listed: string[] = [];
    for await (const t of saver.list(cfg("t1"), { filter: { source: "loop" }, before: c2, limit: 5 })) listed.push(t.config.configurable!["checkpoint_id"] as string);
    assert.deepEqual(listed, [c1.configurable!["checkpoint_id"]]);
    const hist = await saver.getDeltaChannelHistory({ config: c2, channels: ["a"] });
    assert.ok("a" in hist);
    await saver.copyThread("t1", "t2");
    await saver.deleteForRuns(["r1"]);
    await saver.prune(["t2"], "keep_latest");
    await saver.prune(["t2"], "delete");
    await saver.deleteThread("t1");
    await saver.close();
    await saver.close(); // idempotent

    // values over the daemon's limit together go ahead (lg/putValue); retention (lg/configure)
    const small = new CkptdSaver({
      db: join(env.dir, "lg3.db"), binary: env.binary, args: ["--max-state-size", "64KiB"],
      retention: { keepLast: 5, keepFirst: true, maxAgeSeconds: 0, idleTtlSeconds: 3600 },
    });
    const big = { a: "x".repeat(40000), b: "y".repeat(40000) };
    const cb = await small.put(cfg("big"), checkpoint(big, { a: v1, b: v1 }), meta(0, "rb"), { a: v1, b: v1 });
    await small.putWrites(cb, [["a", "z".repeat(40000)], ["b", "w".repeat(40000)]], "task-big");
    assert.deepEqual((await small.getTuple(cb))?.checkpoint.channel_values, big);
    assert.equal((await small.configureRetention({ threadId: "big" })).source, "thread");
    assert.equal((await small.configureRetention({ retention: { keepLast: 10 } })).source, "database");
    assert.equal((await small.configureRetention({ inherit: true })).retention.keepLast, 0);
    await small.close();

    const shared = new CkptdSaver({ client: await env.start() });
    assert.equal(await shared.getTuple(cfg("none")), undefined);
    await shared.close();

    rec.check([["CkptdSaver", saverOptions]], daemonMethods().filter((m) => m.startsWith("lg/") || m.startsWith("thread/")));
    const taskPaths = rec.sent.filter((s) => s.method === "lg/putWrites").map((s) => (s.params as { taskPath?: string }).taskPath);
    assert.ok(taskPaths.includes("path/1"), "putWrites' taskPath never sent");
  });

  it("a refused param is visible to the recorder (the test can fail)", async () => {
    rec = new Recorder();
    rec.wrapTransport();
    const c = await env.start();
    await assert.rejects(c.request("checkpoint/save", { workflowId: "x", stepname: "typo" }), (e: unknown) => {
      assert.ok(e instanceof InvalidParamsError && e instanceof CkptdError);
      assert.match((e as Error).message, /unknown param "stepname" \(did you mean "stepName"\?\)/);
      return true;
    });
    assert.throws(() => rec.check([], []), /refused params/);
    await c.close();
  });
});
