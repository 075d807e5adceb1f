/**
 * Value deltas (docs/protocol.md, lg/put "Value deltas") through the real daemon: a channel value
 * that grew from the channel's previous version goes as a few bytes and reads back whole; a JSON
 * list that grew, and a list whose header changed too (copies); a base the daemon lacks makes the
 * saver send the put again whole.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, describe, it } from "node:test";

import { emptyCheckpoint, uuid6, type Checkpoint } from "@langchain/langgraph-checkpoint";
import { valueDelta, type Client } from "ckptd";
import { CkptdSaver } from "ckptd/langgraph";

import { Env } from "./support/e2e.js";

function checkpoint(values: Record<string, unknown>, versions: Record<string, string | number>): Checkpoint {
  return { ...emptyCheckpoint(), id: uuid6(3), channel_values: values, channel_versions: versions };
}

describe("CkptdSaver value deltas", () => {
  let env: Env;
  let client: Client;
  let saver: CkptdSaver;
  const sent: { bytes: number; deltas: number }[] = [];
  before(async () => {
    env = new Env();
    client = await env.start();
    const call = client.call.bind(client);
    client.call = ((method: string, params?: unknown, options: { attachment?: Uint8Array | null } = {}) => {
      if (method === "lg/put") {
        const blobs = (params as { blobs: { delta?: unknown }[] }).blobs;
        sent.push({ bytes: options.attachment?.byteLength ?? 0, deltas: blobs.filter((b) => b.delta !== undefined).length });
      }
      return call(method, params, options);
    }) as Client["call"];
    saver = new CkptdSaver({ client });
  });
  after(async () => {
    await saver?.close();
    await env?.cleanup();
  });

  it("sends a growing channel as deltas and reads every version back", async () => {
    let config = { configurable: { thread_id: "grow-" + uuid6(3), checkpoint_ns: "" } };
    const messages: unknown[] = [];
    let v: number | undefined;
    const ids: [typeof config, unknown[]][] = [];
    sent.length = 0;
    for (let i = 0; i < 40; i++) {
      messages.push({ role: i % 2 ? "ai" : "user", content: `message ${i} ` + randomBytes(200).toString("hex") });
      const nv = saver.getNextVersion(v);
      v = nv;
      config = (await saver.put(config, checkpoint({ messages: [...messages], step: i }, { messages: nv, step: nv }), { source: "loop", step: i, parents: {} },
        { messages: nv, step: nv })) as typeof config;
      ids.push([config, [...messages]]);
    }
    for (const [c, want] of ids) assert.deepEqual((await saver.getTuple(c))?.checkpoint.channel_values["messages"], want);
    const deltas = sent.filter((s) => s.deltas > 0);
    assert.ok(deltas.length >= 30, `${deltas.length} puts sent deltas`);
    assert.ok(Math.max(...deltas.map((s) => s.bytes)) < 2048, `a delta put carried ${Math.max(...deltas.map((s) => s.bytes))} bytes`);
  });

  it("sends the put whole when the daemon lacks the base", async () => {
    const thread = "gone-" + uuid6(3);
    let config = { configurable: { thread_id: thread, checkpoint_ns: "" } };
    const big = Array.from({ length: 80 }, (_, i) => `item ${i} ${randomBytes(40).toString("hex")}`);
    const v1 = saver.getNextVersion(undefined);
    // the saver believes it put version "0…9" of the channel: the daemon never stored it
    (saver as unknown as { values: { remember: (...a: unknown[]) => void } }).values.remember(
      JSON.stringify([thread, "messages"]), "", JSON.stringify("00000000000000000000000000000009.1"), Buffer.from(JSON.stringify(big)));
    sent.length = 0;
    config = (await saver.put(config, checkpoint({ messages: [...big, "new"] }, { messages: v1 }), { source: "loop", step: 0, parents: {} },
      { messages: v1 })) as typeof config;
    assert.deepEqual(sent.map((s) => s.deltas), [1, 0], "a delta, refused, then the put whole");
    assert.deepEqual((await saver.getTuple(config))?.checkpoint.channel_values["messages"], [...big, "new"]);
  });

  it("computes copies for a header that changed with an append", () => {
    const body = randomBytes(20_000);
    const base = Buffer.concat([Buffer.from([0xdc, 0x00, 0x10]), body]);
    const next = Buffer.concat([Buffer.from([0xdc, 0x00, 0x11]), body, Buffer.from("appended")]);
    const d = valueDelta(base, next);
    assert.ok(d !== null);
    assert.deepEqual([d.keepPrefix, d.keepSuffix, d.copies], [2, 0, [[1, 3, body.length]]]);
    const mid = Buffer.concat([Buffer.from(d.segment.subarray(0, 1)), base.subarray(3, 3 + body.length), Buffer.from(d.segment.subarray(1))]);
    assert.deepEqual(Buffer.concat([base.subarray(0, 2), mid]), next);
    assert.equal(valueDelta(base, randomBytes(next.length)), null, "unrelated bytes: no delta");
  });
});
