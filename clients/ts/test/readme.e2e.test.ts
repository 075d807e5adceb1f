/**
 * The README's LangGraph retention example ("### Retention"), run as printed (as JavaScript, from
 * inside the package so that `ckptd/langgraph` resolves to this build) and type-checked as
 * TypeScript; what it prints is what its comments say (issue #24).
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, describe, it } from "node:test";

import { buildDir, ckptdPath, packageRoot, tempDir } from "./support/helpers.js";

/** The first ```lang block after the line `heading` (exactly as printed). */
function readmeBlock(heading: string, lang: string): string {
  const text = readFileSync(join(packageRoot(), "README.md"), "utf8");
  const at = text.search(new RegExp(`^${heading.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}\\s*$`, "m"));
  assert.ok(at >= 0, `README.md has no heading ${heading}`);
  const m = new RegExp("^```" + lang + "\\n([\\s\\S]*?)^```", "m").exec(text.slice(at));
  assert.ok(m, `README.md: no \`\`\`${lang} block after ${heading}`);
  return m[1]!;
}

describe("README: LangGraph retention", () => {
  const t = tempDir("ckptd-readme-");
  const files: string[] = [];
  after(() => {
    for (const f of files) rmSync(f, { force: true });
    t.cleanup();
  });
  const block = readmeBlock("### Retention", "ts");

  it("runs as printed and prints what its comments say", () => {
    const script = join(buildDir(), `readme-retention-${process.pid}.mjs`);
    files.push(script);
    writeFileSync(script, block);
    const r = spawnSync(process.execPath, [script], { cwd: t.dir, encoding: "utf8", timeout: 300_000, env: { ...process.env, CKPTD_PATH: ckptdPath() } });
    assert.equal(r.status, 0, `${r.stdout}\n${r.stderr}`);
    const lines = r.stdout.trim().split("\n");
    assert.deepEqual(lines, [
      JSON.stringify({ threadId: "chat-1", retention: { keepLast: 20, maxAgeSeconds: 0, keepFirst: false, idleTtlSeconds: 2592000 }, source: "daemon" }),
      "200",
      "21",
      "thread",
      "50",
    ]);
    for (const line of lines) assert.ok(block.includes(`// ${line}`), `the README's comments do not show ${line}`);
    // the thread is in the database with its own idle TTL: ckptd threads --idle lists what would expire
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1100);
    const idle = spawnSync(ckptdPath(), ["threads", "--idle", "1s", "--json", "--db", "chat.db"], { cwd: t.dir, encoding: "utf8" });
    assert.equal(idle.status, 0, idle.stderr);
    const threads = (JSON.parse(idle.stdout) as { threads: { threadId: string; idleTtlSeconds: number }[] }).threads;
    assert.deepEqual(threads.map((x) => [x.threadId, x.idleTtlSeconds]), [["chat-1", 2592000]]);
  });

  it("type-checks as TypeScript", () => {
    const file = join(buildDir(), `readme-retention-${process.pid}.mts`);
    files.push(file);
    writeFileSync(file, block);
    const tsc = join(packageRoot(), "node_modules", "typescript", "bin", "tsc");
    const r = spawnSync(process.execPath, [tsc, "--noEmit", "--strict", "--module", "nodenext", "--moduleResolution", "nodenext", "--target", "es2022", "--skipLibCheck", file], {
      cwd: packageRoot(),
      encoding: "utf8",
      timeout: 300_000,
    });
    assert.equal(r.status, 0, `${r.stdout}\n${r.stderr}`);
  });
});
