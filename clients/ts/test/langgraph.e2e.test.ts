/**
 * End-to-end tests of the LangGraph saver (`ckptd/langgraph`) against the real ckptd binary
 * (CKPTD_PATH), for what the official conformance suite (npm run test:conformance) does not cover.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, describe, it } from "node:test";

import {
  JsonPlusSerializer,
  emptyCheckpoint,
  uuid6,
  type Checkpoint,
  type CheckpointMetadata,
  type SerializerProtocol,
} from "@langchain/langgraph-checkpoint";
import type { RunnableConfig } from "@langchain/core/runnables";
import { ClientClosedError, type Client } from "ckptd";
import { CkptdSaver } from "ckptd/langgraph";

import { Env } from "./support/e2e.js";

const meta = (step: number, extra: Record<string, unknown> = {}): CheckpointMetadata => ({ source: "loop", step, parents: {}, ...extra });

function checkpoint(values: Record<string, unknown>, versions: Record<string, number>): Checkpoint {
  return { ...emptyCheckpoint(), id: uuid6(3), channel_values: values, channel_versions: versions };
}

async function collect<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const x of it) out.push(x);
  return out;
}

describe("CkptdSaver end to end", () => {
  let env: Env;
  let client: Client;
  let saver: CkptdSaver;
  before(async () => {
    env = new Env();
    client = await env.start();
    saver = new CkptdSaver({ client });
  });
  after(async () => {
    await saver?.close();
    await env?.cleanup();
  });

  it("stores only the channels named in newVersions and rebuilds the others from ancestors", async () => {
    const thread = { configurable: { thread_id: "delta-" + uuid6(3), checkpoint_ns: "" } };
    const big = { messages: Array.from({ length: 200 }, (_, i) => ({ role: i % 2 ? "ai" : "user", content: randomBytes(64).toString("hex") })) };
    const v1 = saver.getNextVersion(undefined);
    const c1 = await saver.put(thread, checkpoint({ messages: big.messages, step: 1 }, { messages: v1, step: v1 }), meta(0), { messages: v1, step: v1 });
    const v2 = saver.getNextVersion(v1);
    // Only `step` changed: the messages blob is not sent again, yet the tuple has it.
    const c2 = await saver.put(c1, checkpoint({ messages: big.messages, step: 2 }, { messages: v1, step: v2 }), meta(1), { step: v2 });
    const t2 = await saver.getTuple(c2);
    assert.deepEqual(t2?.checkpoint.channel_values, { messages: big.messages, step: 2 });
    assert.deepEqual(t2?.parentConfig, c1);
    // A channel whose version was never stored is absent, not an error.
    const c3 = await saver.put(c2, checkpoint({ messages: big.messages, step: 3 }, { messages: v1, step: saver.getNextVersion(v2) }), meta(2), {});
    assert.deepEqual((await saver.getTuple(c3))?.checkpoint.channel_values, { messages: big.messages });
  });

  it("keeps forks apart: versions from getNextVersion never collide", async () => {
    const thread = { configurable: { thread_id: "fork-" + uuid6(3), checkpoint_ns: "" } };
    const v1 = saver.getNextVersion(undefined);
    const root = await saver.put(thread, checkpoint({ x: "root" }, { x: v1 }), meta(0), { x: v1 });
    const va = saver.getNextVersion(v1);
    const a = await saver.put(root, checkpoint({ x: "branch a" }, { x: va }), meta(1), { x: va });
    // Time travel: fork from root again; the same step makes a different version.
    const vb = saver.getNextVersion(v1);
    assert.notEqual(va, vb);
    const b = await saver.put(root, checkpoint({ x: "branch b" }, { x: vb }), meta(1), { x: vb });
    assert.equal((await saver.getTuple(a))?.checkpoint.channel_values["x"], "branch a");
    assert.equal((await saver.getTuple(b))?.checkpoint.channel_values["x"], "branch b");
  });

  it("round-trips bytes, class instances and undefined through serde, with pending writes in writesSortKey order", async () => {
    const thread = { configurable: { thread_id: "types-" + uuid6(3), checkpoint_ns: "sub:1" } };
    const bytes = new Uint8Array(randomBytes(300_000));
    const values = { raw: bytes, set: new Set([1, 2]), map: new Map([["k", { d: new Date(0).toISOString() }]]), nothing: undefined, text: "naïve ☃ 𝄞" };
    const versions = Object.fromEntries(Object.keys(values).map((k) => [k, 1]));
    const cfg = await saver.put(thread, checkpoint(values, versions), meta(0, { user: { nested: [1, "two"] }, u: undefined }), versions);
    await saver.putWrites(cfg, [["a", 1], ["b", bytes.subarray(0, 10)]], "task-b", "~pull, z");
    await saver.putWrites(cfg, [["c", { u: undefined }]], "task-a", "~pull, a");
    await saver.putWrites(cfg, [["d", 4]], "task-c"); // no path: sorts first
    await saver.putWrites(cfg, [["a", "ignored: idx 0 of task-b is stored once"]], "task-b", "~pull, z");
    await saver.putWrites(cfg, [["__error__", "first"]], "task-e");
    await saver.putWrites(cfg, [["__error__", "replaced"]], "task-e");
    const t = await saver.getTuple(cfg);
    assert.ok(t);
    assert.deepEqual(t.checkpoint.channel_values["raw"], bytes);
    assert.deepEqual(t.checkpoint.channel_values["set"], new Set([1, 2]));
    assert.deepEqual(t.checkpoint.channel_values["map"], values.map);
    assert.ok("nothing" in t.checkpoint.channel_values && t.checkpoint.channel_values["nothing"] === undefined);
    assert.equal(t.checkpoint.channel_values["text"], values.text);
    assert.deepEqual(t.metadata, { source: "loop", step: 0, parents: {}, user: { nested: [1, "two"] }, u: undefined });
    assert.deepEqual(t.pendingWrites, [
      ["task-c", "d", 4],
      ["task-e", "__error__", "replaced"],
      ["task-a", "c", { u: undefined }],
      ["task-b", "a", 1],
      ["task-b", "b", bytes.subarray(0, 10)],
    ]);
  });

  it("uses a custom serde for every byte string", async () => {
    const calls = { dumps: 0, loads: 0 };
    const inner = new JsonPlusSerializer();
    const serde: SerializerProtocol = {
      async dumpsTyped(data: unknown) {
        calls.dumps++;
        const [type, bytes] = await inner.dumpsTyped(data);
        return [`x-${type}`, bytes];
      },
      async loadsTyped(type: string, data: Uint8Array | string) {
        calls.loads++;
        assert.ok(type.startsWith("x-"), type);
        return inner.loadsTyped(type.slice(2), data);
      },
    };
    const custom = new CkptdSaver({ client, serde });
    const thread = { configurable: { thread_id: "serde-" + uuid6(3) } };
    const cfg = await custom.put(thread, checkpoint({ a: [1] }, { a: 1 }), meta(0), { a: 1 });
    await custom.putWrites(cfg, [["a", 2]], "t");
    const t = await custom.getTuple(cfg);
    assert.deepEqual(t?.checkpoint.channel_values, { a: [1] });
    assert.deepEqual(t?.pendingWrites, [["t", "a", 2]]);
    assert.equal(calls.dumps, 3); // checkpoint, blob, write
    assert.equal(calls.loads, 3);
    await custom.close(); // does not close a client it was given
    assert.ok(client.isOpen);
  });

  it("lists across pages (responses over 16 MiB continue with a cursor)", async () => {
    const thread_id = "pages-" + uuid6(3);
    let cfg: RunnableConfig = { configurable: { thread_id, checkpoint_ns: "" } };
    const ids: string[] = [];
    for (let i = 0; i < 20; i++) {
      const v = i + 1;
      const blob = new Uint8Array(1024 * 1024).fill(i); // 1 MiB, one per checkpoint
      const cp = checkpoint({ blob }, { blob: v });
      ids.push(cp.id);
      cfg = await saver.put(cfg, cp, meta(i, { even: i % 2 === 0 }), { blob: v });
    }
    const all = await collect(saver.list({ configurable: { thread_id } }));
    assert.deepEqual(
      all.map((t) => t.checkpoint.id),
      [...ids].reverse(),
    );
    assert.equal((all[0]!.checkpoint.channel_values["blob"] as Uint8Array)[0], 19);
    const even = await collect(saver.list({ configurable: { thread_id } }, { filter: { even: true }, limit: 3 }));
    assert.deepEqual(
      even.map((t) => t.metadata?.step),
      [18, 16, 14],
    );
    // Stopping early is fine (the prefetched page is dropped).
    for await (const t of saver.list({ configurable: { thread_id } })) {
      assert.equal(t.checkpoint.id, ids.at(-1));
      break;
    }
    const before = await collect(saver.list({ configurable: { thread_id } }, { before: { configurable: { checkpoint_id: ids[2] } } }));
    assert.deepEqual(
      before.map((t) => t.checkpoint.id),
      [ids[1], ids[0]],
    );
  });

  it("deleteThread removes every namespace of one thread only; copyThread copies", async () => {
    const a = "del-a-" + uuid6(3);
    const b = "del-b-" + uuid6(3);
    for (const [thread_id, ns] of [
      [a, ""],
      [a, "child:1"],
      [b, ""],
    ] as const) {
      await saver.put({ configurable: { thread_id, checkpoint_ns: ns } }, checkpoint({ x: ns }, { x: 1 }), meta(0), { x: 1 });
    }
    await saver.copyThread(a, a + "-copy");
    await saver.deleteThread(a);
    assert.equal(await saver.getTuple({ configurable: { thread_id: a, checkpoint_ns: "" } }), undefined);
    assert.equal(await saver.getTuple({ configurable: { thread_id: a, checkpoint_ns: "child:1" } }), undefined);
    assert.ok(await saver.getTuple({ configurable: { thread_id: b, checkpoint_ns: "" } }));
    const copy = await saver.getTuple({ configurable: { thread_id: a + "-copy", checkpoint_ns: "child:1" } });
    assert.equal(copy?.checkpoint.channel_values["x"], "child:1");
  });

  it("prune keeps the latest checkpoint; deleteForRuns deletes by metadata.run_id", async () => {
    const thread_id = "prune-" + uuid6(3);
    let cfg: RunnableConfig = { configurable: { thread_id, checkpoint_ns: "" } };
    for (let i = 0; i < 4; i++) {
      const v = saver.getNextVersion(undefined) + i;
      cfg = await saver.put(cfg, checkpoint({ x: i }, { x: v }), meta(i, { run_id: i < 2 ? "run-1" : "run-2" }), { x: v });
    }
    await saver.deleteForRuns(["run-2"]);
    let left = await collect(saver.list({ configurable: { thread_id } }));
    assert.deepEqual(
      left.map((t) => t.metadata?.step),
      [1, 0],
    );
    await saver.prune([thread_id]);
    left = await collect(saver.list({ configurable: { thread_id } }));
    assert.equal(left.length, 1);
    assert.equal(left[0]!.checkpoint.channel_values["x"], 1);
    await saver.prune([thread_id], "delete");
    assert.deepEqual(await collect(saver.list({ configurable: { thread_id } })), []);
  });

  it("starts its own daemon from {db} lazily and closes it", async () => {
    const own = new CkptdSaver({ db: env.dir + "/own.db", binary: env.binary });
    const cfg = await own.put({ configurable: { thread_id: "own" } }, checkpoint({ a: 1 }, { a: 1 }), meta(0), { a: 1 });
    const c = await own.client();
    assert.equal((await own.getTuple(cfg))?.checkpoint.channel_values["a"], 1);
    await own.close();
    await own.close();
    await assert.rejects(c.request("stats"), ClientClosedError);
    await assert.rejects(own.getTuple(cfg), /closed/);
  });

  it("rejects bad configs like the other savers", async () => {
    await assert.rejects(saver.put({}, checkpoint({}, {}), meta(0), {}), /configurable/);
    await assert.rejects(saver.put({ configurable: {} }, checkpoint({}, {}), meta(0), {}), /thread_id/);
    await assert.rejects(saver.putWrites({ configurable: { thread_id: "x" } }, [["a", 1]], "t"), /checkpoint_id/);
    assert.equal(await saver.getTuple({ configurable: {} }), undefined);
    assert.deepEqual(await collect(saver.list({}, { limit: 0 })), []);
  });
});
