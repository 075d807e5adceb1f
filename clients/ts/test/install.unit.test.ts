/**
 * Finding the binary as an installed package does (the launcher on PATH is skipped) and the
 * once-per-version warning for a daemon that speaks a newer protocol (against the fake daemon).
 */
import assert from "node:assert/strict";
import { chmodSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, describe, it } from "node:test";

import { Client, PROTOCOL_VERSION, findBinary, packagedBinary } from "../src/index.js";
import { buildDir, tempDir } from "./support/helpers.js";

const fake = join(buildDir(), "test", "fixtures", "fake_ckptd.js");
chmodSync(fake, 0o755);

describe("findBinary and the npm launcher", () => {
  const t = tempDir();
  after(t.cleanup);

  it("skips the launcher npm links as `ckptd` and takes the next ckptd on PATH", () => {
    const real = join(t.dir, "real");
    const launcherDir = join(t.dir, "launcher");
    mkdirSync(real);
    mkdirSync(launcherDir);
    writeFileSync(join(real, "ckptd"), "#!/bin/sh\nexit 0\n");
    chmodSync(join(real, "ckptd"), 0o755);
    writeFileSync(join(launcherDir, "ckptd"), "#!/usr/bin/env node\n// ckptd-npm-launcher: runs the binary\n");
    chmodSync(join(launcherDir, "ckptd"), 0o755);
    assert.equal(findBinary({ env: { PATH: `${launcherDir}:${real}` } }), join(real, "ckptd"));
    assert.throws(() => findBinary({ env: { PATH: launcherDir } }), /is the npm package's launcher, not the binary/);
  });

  it("names the platform package it looked for when it is not installed", () => {
    const p = packagedBinary();
    assert.ok("reason" in p, "no platform package is installed in a source checkout");
    assert.match(p.reason, new RegExp(`@ckptd/${process.platform}-${process.arch} is not installed`));
  });
});

describe("protocol version", () => {
  it("warns once per newer protocol version, never for the known one", async () => {
    const warnings: Error[] = [];
    const onWarning = (w: Error) => {
      if (w.name === "CkptdProtocolWarning") warnings.push(w);
    };
    process.on("warning", onWarning);
    try {
      for (const protocol of [PROTOCOL_VERSION, PROTOCOL_VERSION + 1, PROTOCOL_VERSION + 1]) {
        const c = await Client.start({ binary: fake, env: { ...process.env, FAKE_PROTOCOL: String(protocol) } });
        assert.equal(c.serverInfo?.protocolVersion, protocol);
        await c.close();
      }
      await new Promise((r) => setImmediate(r)); // 'warning' is emitted on the next tick
    } finally {
      process.off("warning", onWarning);
    }
    assert.equal(warnings.length, 1, warnings.map((w) => w.message).join("\n"));
    assert.match(warnings[0]!.message, new RegExp(`protocol version ${PROTOCOL_VERSION + 1}; this client knows version ${PROTOCOL_VERSION}`));
  });
});

describe("CommonJS", () => {
  it("require() gives the same API as import, for ckptd and ckptd/langgraph", async () => {
    const { createRequire } = await import("node:module");
    const require = createRequire(import.meta.url);
    const cjs = require("ckptd") as Record<string, unknown>;
    const esm = (await import("ckptd")) as Record<string, unknown>;
    assert.deepEqual(Object.keys(cjs).sort(), Object.keys(esm).sort());
    assert.equal(typeof cjs["Client"], "function");
    assert.match(require.resolve("ckptd"), /dist[\\/]cjs[\\/]index\.js$/);
    const lg = require("ckptd/langgraph") as Record<string, unknown>;
    assert.equal(typeof lg["CkptdSaver"], "function");
    assert.match(require.resolve("ckptd/langgraph"), /dist[\\/]cjs[\\/]langgraph\.js$/);
  });
});
