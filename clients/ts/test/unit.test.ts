/**
 * Unit tests that need no ckptd binary: error mapping, binary lookup, and the client's transport
 * against a fake daemon (test/fixtures/fake_ckptd.ts) that can misbehave on demand.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { chmodSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";

import {
  BinaryNotFoundError,
  CheckpointCorruptError,
  CheckpointNotFoundError,
  CkptdError,
  Client,
  ClientClosedError,
  ConflictError,
  DaemonDiedError,
  InternalError,
  InvalidParamsError,
  MethodNotFoundError,
  ProtocolError,
  ResumeValidationError,
  ShuttingDownError,
  StorageUnavailableError,
  TooLargeError,
  errorFromRpc,
  findBinary,
} from "ckptd";

import { buildDir, sleep, tempDir } from "./support/helpers.js";

const fake = join(buildDir(), "test", "fixtures", "fake_ckptd.js");
chmodSync(fake, 0o755);

function startFake(options: Parameters<typeof Client.start>[0] = {}): Promise<Client> {
  return Client.start({ binary: fake, ...options });
}

describe("errorFromRpc", () => {
  const cases: [number, new (...a: never[]) => CkptdError][] = [
    [-32700, ProtocolError],
    [-32600, ProtocolError],
    [-32601, MethodNotFoundError],
    [-32602, InvalidParamsError],
    [-32603, InternalError],
    [-32001, CheckpointNotFoundError],
    [-32002, CheckpointCorruptError],
    [-32003, ConflictError],
    [-32004, TooLargeError],
    [-32005, ResumeValidationError],
    [-32006, StorageUnavailableError],
    [-32007, ShuttingDownError],
  ];
  for (const [code, cls] of cases) {
    it(`${code} → ${cls.name}`, () => {
      const e = errorFromRpc({ code, message: "m", data: { x: 1 } }, "checkpoint/save");
      assert.ok(e instanceof cls);
      assert.ok(e instanceof CkptdError && e instanceof Error);
      assert.equal(e.code, code);
      assert.equal(e.message, "m");
      assert.deepEqual(e.data, { x: 1 });
      assert.equal(e.method, "checkpoint/save");
      assert.equal(e.name, cls.name);
    });
  }
  it("keeps unknown codes as CkptdError and exposes typed data", () => {
    const e = errorFromRpc({ code: -32099, message: "new" });
    assert.equal(e.constructor, CkptdError);
    const p = errorFromRpc({ code: -32005, message: "bad", data: { problems: [{ code: "corrupt", message: "x" }] } });
    assert.ok(p instanceof ResumeValidationError);
    assert.deepEqual(p.problems, [{ code: "corrupt", message: "x" }]);
    const ip = errorFromRpc({ code: -32602, message: "invalid params: workflowId: required", data: { field: "workflowId", reason: "required" } });
    assert.ok(ip instanceof InvalidParamsError);
    assert.equal(ip.field, "workflowId");
    const tl = errorFromRpc({ code: -32004, message: "too large", data: { limit: 10, size: 20 } });
    assert.ok(tl instanceof TooLargeError && tl.limit === 10 && tl.size === 20);
  });
});

describe("findBinary", () => {
  const t = tempDir();
  after(t.cleanup);
  const exe = join(t.dir, "ckptd");
  const notExe = join(t.dir, "not-exec");
  before(() => {
    writeFileSync(exe, "#!/bin/sh\nexit 0\n");
    chmodSync(exe, 0o755);
    writeFileSync(notExe, "x");
    chmodSync(notExe, 0o644);
  });

  it("uses the binary option, CKPTD_PATH, then PATH", () => {
    assert.equal(findBinary({ binary: exe, env: {} }), exe);
    assert.equal(findBinary({ env: { CKPTD_PATH: exe } }), exe);
    assert.equal(findBinary({ env: { PATH: `/nonexistent-dir:${t.dir}` } }), exe);
    assert.equal(findBinary({ binary: "ckptd", env: { PATH: t.dir } }), exe);
  });

  it("lists every place tried when nothing is found", () => {
    assert.throws(
      () => findBinary({ env: { PATH: `/nonexistent-a:/nonexistent-b` } }),
      (e: unknown) => {
        assert.ok(e instanceof BinaryNotFoundError);
        assert.match(e.message, /option `binary`: not given/);
        assert.match(e.message, /\$CKPTD_PATH: not set/);
        assert.match(e.message, /\$PATH: \/nonexistent-a\/ckptd: does not exist/);
        assert.match(e.message, /\$PATH: \/nonexistent-b\/ckptd: does not exist/);
        assert.match(e.message, /package @ckptd\/\S+: @ckptd\/\S+ is not installed/);
        assert.equal(e.tried.length, 5);
        return true;
      },
    );
  });

  it("does not fall back when the option or CKPTD_PATH is wrong", () => {
    assert.throws(() => findBinary({ binary: join(t.dir, "missing"), env: { CKPTD_PATH: exe, PATH: t.dir } }), (e: unknown) => {
      assert.ok(e instanceof BinaryNotFoundError);
      assert.match(e.message, /missing: does not exist/);
      assert.match(e.message, /CKPTD_PATH, the platform package and PATH were not used/);
      return true;
    });
    assert.throws(() => findBinary({ env: { CKPTD_PATH: notExe, PATH: t.dir } }), (e: unknown) => {
      assert.ok(e instanceof BinaryNotFoundError);
      assert.match(e.message, /\$CKPTD_PATH: .*not-exec: is not executable/);
      return true;
    });
    assert.throws(() => findBinary({ env: { CKPTD_PATH: t.dir } }), /is not a regular file/);
  });

  it("Client.start rejects with BinaryNotFoundError", async () => {
    await assert.rejects(Client.start({ env: { PATH: "/nonexistent" } }), BinaryNotFoundError);
  });
});

describe("Client transport (fake daemon)", () => {
  it("matches pipelined replies that come back out of order", async () => {
    await using client = await startFake();
    const delays = Array.from({ length: 50 }, (_, i) => (i * 37) % 50);
    const got = await Promise.all(delays.map((ms) => client.request<{ slept: number }>("test/sleep", { ms })));
    assert.deepEqual(
      got.map((g) => g.slept),
      delays,
    );
  });

  it("sends states as attachments and decodes them per stateType", async () => {
    await using client = await startFake();
    const r = await client.save({ workflowId: "w", state: { a: [1, "é"] } });
    assert.equal((r as Record<string, unknown>)["echo"] !== undefined, true);
    const echo = (r as unknown as { echo: Record<string, unknown> }).echo;
    assert.equal(echo["stateAttachment"], true);
    assert.equal(echo["stateType"], "json");
    assert.equal("state" in echo, false);
    const loaded = await client.load<{ a: unknown[] }>({ checkpointId: r.checkpointId });
    assert.deepEqual(loaded.state, { a: [1, "é"] });
    const bytes = new Uint8Array([0, 1, 2, 255]);
    const rb = await client.save({ workflowId: "w", state: bytes });
    const lb = await client.load({ checkpointId: rb.checkpointId });
    assert.equal(lb.stateType, "bytes");
    assert.ok(lb.state instanceof Uint8Array);
    assert.deepEqual(lb.state, bytes);
    const none = await client.save({ workflowId: "w" });
    const ln = await client.load({ checkpointId: none.checkpointId });
    assert.equal(ln.stateType, "none");
    assert.equal(ln.state, undefined);
    assert.equal(ln.stateBytes, null);
  });

  it("maps error replies to typed errors", async () => {
    await using client = await startFake();
    await assert.rejects(client.load({ checkpointId: "nope" }), (e: unknown) => e instanceof CheckpointNotFoundError && e.checkpointId === "nope");
    await assert.rejects(client.request("no/such"), MethodNotFoundError);
    await assert.rejects(client.request("test/error", { code: -32005, message: "bad", data: { problems: [{ code: "corrupt", message: "x" }] } }), (e: unknown) => {
      return e instanceof ResumeValidationError && e.problems.length === 1 && e.method === "test/error";
    });
  });

  it("delivers notifications as events and through the async iterator", async () => {
    await using client = await startFake({ events: ["checkpoint/saved"] });
    const seen: unknown[] = [];
    client.on("checkpoint/saved", (p) => seen.push(p.checkpointId));
    const it = client.notifications({ methods: ["checkpoint/saved"] });
    const all: string[] = [];
    client.on("notification", (n) => all.push(n.method));
    await client.save({ workflowId: "w", checkpointId: "a" });
    await client.save({ workflowId: "w", checkpointId: "b" });
    await client.request("test/notify", { method: "future/thing", params: { x: 1 } });
    const first = await it.next();
    const second = await it.next();
    assert.equal(first.done, false);
    assert.deepEqual(
      [first.value, second.value].map((n) => (n && n.method === "checkpoint/saved" ? n.params.checkpointId : null)),
      ["a", "b"],
    );
    assert.deepEqual(seen, ["a", "b"]);
    assert.deepEqual(all, ["checkpoint/saved", "checkpoint/saved", "future/thing"]);
    await client.close();
    assert.deepEqual(await it.next(), { value: undefined, done: true });
  });

  it("rejects every pending request at once when the daemon dies, with its stderr tail", async () => {
    const client = await startFake();
    await client.request("test/stderr", { text: "early log line\n" });
    const pending = Array.from({ length: 20 }, () => client.request("test/sleep", { ms: 60_000 }));
    const exits: unknown[] = [];
    client.on("exit", (info) => exits.push(info));
    const t0 = Date.now();
    void client.request("test/crash", { stderr: "panic: something broke\n", code: 3 }).catch(() => {});
    const results = await Promise.allSettled(pending);
    assert.ok(Date.now() - t0 < 5000);
    for (const r of results) {
      assert.equal(r.status, "rejected");
      const e = (r as PromiseRejectedResult).reason;
      assert.ok(e instanceof DaemonDiedError, String(e));
      assert.equal(e.exitCode, 3);
      assert.match(e.stderr, /early log line\npanic: something broke/);
      assert.match(e.message, /exited with code 3; 21 pending requests failed/);
      assert.match(e.message, /panic: something broke/);
    }
    await assert.rejects(client.stats(), DaemonDiedError);
    assert.equal(exits.length, 1);
    assert.equal(client.isOpen, false);
    await client.close(); // no-op, does not throw
  });

  it("treats a garbled reply stream as fatal ProtocolError", async () => {
    const client = await startFake();
    const p = client.request("test/sleep", { ms: 10_000 });
    void client.request("test/garbage").catch(() => {});
    await assert.rejects(p, (e: unknown) => e instanceof ProtocolError && /not a valid frame stream \(header\)/.test(e.message));
    await assert.rejects(client.stats(), ProtocolError);
    await client.close();
  });

  it("close() shuts down cleanly, is idempotent, and later calls reject", async () => {
    const client = await startFake();
    const exits: { expected: boolean; exitCode: number | null }[] = [];
    client.on("exit", (i) => exits.push(i));
    const inflight = client.request("test/sleep", { ms: 50 });
    await Promise.all([client.close(), client.close()]);
    assert.deepEqual(await inflight, { slept: 50 });
    assert.deepEqual(exits.map((e) => [e.expected, e.exitCode]), [[true, 0]]);
    await assert.rejects(client.stats(), ClientClosedError);
  });

  it("await using closes the client at the end of the scope", async () => {
    let ref: Client;
    {
      await using client = await startFake();
      ref = client;
      assert.equal(client.isOpen, true);
    }
    assert.equal(ref.isOpen, false);
    await assert.rejects(ref.stats(), ClientClosedError);
  });

  it("supports per-call timeouts and abort signals", async () => {
    await using client = await startFake();
    await assert.rejects(client.request("test/sleep", { ms: 400 }, { timeoutMs: 50 }), /no reply to test\/sleep within 50 ms/);
    const ac = new AbortController();
    const p = client.request("test/sleep", { ms: 400 }, { signal: ac.signal });
    ac.abort(new Error("stop"));
    await assert.rejects(p, /stop/);
    assert.equal(client.pendingCount, 2 - 2);
    assert.deepEqual(await client.request("test/sleep", { ms: 1 }), { slept: 1 });
  });

  it("does not hold the event loop when idle (a script that forgets close() exits)", async () => {
    const script = `
      import { Client } from "ckptd";
      const c = await Client.start({ binary: ${JSON.stringify(fake)} });
      const r = await c.request("test/sleep", { ms: 100 });
      console.log(JSON.stringify(r));
    `;
    const file = join(buildDir(), "test", "fixtures", "forgets_close.mjs");
    writeFileSync(file, script);
    const r = spawnSync(process.execPath, [file], { encoding: "utf8", timeout: 20_000 });
    assert.equal(r.status, 0, r.stderr);
    assert.equal(r.stdout.trim(), '{"slept":100}');
  });

  it("reports a daemon that dies during start-up with its stderr", async () => {
    await assert.rejects(Client.start({ binary: "/bin/sh", args: ["-c", "echo 'ckptd: cannot open database' >&2; exit 1"] }), (e: unknown) => {
      assert.ok(e instanceof DaemonDiedError);
      assert.match(e.message, /cannot open database/);
      return true;
    });
  });

  it("still works after a long idle period and many small writes", async () => {
    await using client = await startFake();
    await sleep(50);
    for (let i = 0; i < 200; i++) await client.save({ workflowId: "w", state: { i } });
  });
});
