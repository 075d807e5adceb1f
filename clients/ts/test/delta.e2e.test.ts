/**
 * Wire deltas (docs/protocol.md, "Wire deltas") through the real daemon: a state that is an edit of
 * the last one saved of the workflow goes as its changed middle only and is rebuilt byte for byte;
 * a base that is gone makes the client send the state whole.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, describe, it } from "node:test";

import { CheckpointNotFoundError, InvalidParamsError, computeDelta, deltaPays, type Client } from "ckptd";

import { Env } from "./support/e2e.js";

const grown = (n: number) => ({
  messages: Array.from({ length: n }, (_, i) => ({ role: "user", content: `message ${i} ${"lorem ipsum ".repeat(80)}` })),
  step: n,
});

async function counters(c: Client) {
  return (await c.stats()).counters;
}

describe("wire deltas", () => {
  const envs: Env[] = [];
  const start = async (options = {}) => {
    const env = new Env();
    envs.push(env);
    return env.start({ args: ["--keep-last", "0"], ...options });
  };
  after(async () => {
    for (const e of envs) await e.cleanup();
  });

  it("computes the longest common prefix, then suffix", () => {
    const plain = (a: Uint8Array, b: Uint8Array) => {
      let p = 0;
      while (p < Math.min(a.length, b.length) && a[p] === b[p]) p++;
      let s = 0;
      while (s < Math.min(a.length, b.length) - p && a[a.length - 1 - s] === b[b.length - 1 - s]) s++;
      return [p, s];
    };
    for (let t = 0; t < 200; t++) {
      const a = Uint8Array.from(randomBytes(Math.floor(Math.random() * 3000)), (x) => x % 3);
      const b = Array.from(a);
      const p = Math.floor(Math.random() * (b.length + 1));
      if (t % 3 === 0) b.splice(p, 0, ...Array.from(randomBytes(1 + (t % 40)), (x) => x % 3));
      else if (t % 3 === 1) b.splice(p, 1 + (t % 40));
      else b.splice(p, 3, 7, 8, 9);
      const next = Uint8Array.from(b);
      const d = computeDelta(a, next);
      assert.deepEqual([d.keepPrefix, d.keepSuffix], plain(a, next), `case ${t}`);
      assert.deepEqual(Buffer.concat([a.subarray(0, d.keepPrefix), d.middle, a.subarray(a.length - d.keepSuffix)]), Buffer.from(next));
    }
    const big = randomBytes(300_000);
    const next = Buffer.concat([big.subarray(0, 1000), Buffer.from("changed"), big.subarray(1000)]);
    const d = computeDelta(big, next);
    assert.deepEqual([d.keepPrefix, d.keepSuffix, Buffer.from(d.middle).toString()], [1000, big.length - 1000, "changed"]);
    assert.ok(deltaPays(next.length, d.middle.length) && !deltaPays(4096, 1) && !deltaPays(10_000, 5_000));
  });

  it("sends a growing state as deltas and loads it back byte for byte", async () => {
    const c = await start();
    const saved: Array<[string, unknown]> = [];
    for (let step = 1; step <= 7; step++) {
      const st = grown(50 + step);
      const r = await c.save({ workflowId: "wf", state: st, step });
      saved.push([r.checkpointId, st]);
    }
    const k = await counters(c);
    assert.equal(k.deltaSaves, 6);
    assert.ok(k.bytesIn < JSON.stringify(saved[0]![1]).length + 6 * 2000, `bytesIn ${k.bytesIn}`);
    for (const [id, st] of saved) assert.deepEqual((await c.load({ checkpointId: id })).state, st);
  });

  it("sends a Uint8Array state changed in place after the save as the new bytes", async () => {
    const c = await start();
    const blob = randomBytes(100_000);
    await c.save({ workflowId: "wf", state: blob });
    blob[50_000] = blob[50_000]! ^ 0xff; // the caller reuses its buffer: the client remembered a copy
    const r = await c.save({ workflowId: "wf", state: blob });
    assert.deepEqual(Buffer.from((await c.load({ checkpointId: r.checkpointId })).stateBytes!), blob);
    assert.equal((await counters(c)).deltaSaves, 1);
  });

  it("sends the state whole when the base is gone", async () => {
    const c = await start();
    const st = grown(60);
    const first = await c.save({ workflowId: "wf", state: st });
    await c.delete({ checkpointId: first.checkpointId });
    st.messages.push({ role: "assistant", content: "after the delete" });
    const r = await c.save({ workflowId: "wf", state: st });
    assert.deepEqual((await c.load({ checkpointId: r.checkpointId })).state, st);
    assert.equal((await counters(c)).deltaSaves, 0);
    st.messages.push({ role: "assistant", content: "and again" });
    await c.save({ workflowId: "wf", state: st });
    assert.equal((await counters(c)).deltaSaves, 1);
  });

  it("never sends deltas with deltas: false", async () => {
    const c = await start({ deltas: false });
    const st = grown(60);
    await c.save({ workflowId: "wf", state: st });
    st.step = 61;
    await c.save({ workflowId: "wf", state: st });
    assert.equal((await counters(c)).deltaSaves, 0);
  });

  it("the daemon refuses a wrong delta", async () => {
    const c = await start();
    const r = await c.save({ workflowId: "wf", state: grown(60) });
    const params = {
      workflowId: "wf",
      stateAttachment: true,
      stateDelta: { baseCheckpointId: r.checkpointId, keepPrefix: 10, keepSuffix: 10, sha256: "0".repeat(64) },
    };
    await assert.rejects(c.call("checkpoint/save", params, { attachment: Buffer.from("middle") }), (e: unknown) => {
      assert.ok(e instanceof InvalidParamsError);
      assert.equal((e.data as { field: string }).field, "stateDelta.sha256");
      return true;
    });
    params.stateDelta.baseCheckpointId = "gone";
    await assert.rejects(c.call("checkpoint/save", params, { attachment: Buffer.from("middle") }), CheckpointNotFoundError);
  });
});
