#!/usr/bin/env node
// Builds the package from src/ with TypeScript: dist/esm (ES modules, the primary build) and
// dist/cjs (CommonJS, for require("ckptd")), each with its .d.ts types. The CommonJS build
// compiles a copy of src/ marked {"type": "commonjs"}, with src/here.ts (which uses import.meta)
// swapped for src/cjs/here.cts.txt. Build-time only; the package has no runtime dependencies.
import { execFileSync } from "node:child_process";
import { copyFileSync, mkdirSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const tsc = createRequire(join(root, "package.json")).resolve("typescript/bin/tsc");
const run = (...args) => execFileSync(process.execPath, [tsc, ...args], { cwd: root, stdio: "inherit" });

rmSync(join(root, "dist"), { recursive: true, force: true });
run("-p", "tsconfig.json");

const stage = join(root, ".cjs-src");
rmSync(stage, { recursive: true, force: true });
mkdirSync(stage);
try {
  for (const f of readdirSync(join(root, "src"))) {
    if (f.endsWith(".ts")) copyFileSync(join(root, "src", f), join(stage, f));
  }
  copyFileSync(join(root, "src", "cjs", "here.cts.txt"), join(stage, "here.ts"));
  writeFileSync(join(stage, "package.json"), '{"type": "commonjs"}\n');
  run("-p", "tsconfig.cjs.json");
} finally {
  rmSync(stage, { recursive: true, force: true });
}
writeFileSync(join(root, "dist", "cjs", "package.json"), '{"type": "commonjs"}\n');
