#!/usr/bin/env node
// npm's `prepare` script: builds dist/ (scripts/build.mjs), so that `npm install /path/to/clients/ts`
// and `npm pack` work from a fresh checkout. npm installs no devDependencies for a folder
// dependency, so when TypeScript is missing this first installs the two build tools, at the
// versions package-lock.json pins, into this folder's node_modules (--no-save: nothing changes).
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const req = createRequire(join(root, "package.json"));
const has = (m) => {
  try {
    req.resolve(m);
    return true;
  } catch {
    return false;
  }
};
if (!has("typescript/bin/tsc") || !has("@types/node/package.json")) {
  const lock = JSON.parse(readFileSync(join(root, "package-lock.json"), "utf8"));
  const pins = ["typescript", "@types/node"].map((n) => `${n}@${lock.packages[`node_modules/${n}`].version}`);
  console.error(`ckptd: building dist/ needs ${pins.join(" and ")}; installing them into ${join(root, "node_modules")}`);
  const npm = process.env["npm_execpath"];
  const args = ["install", "--no-save", "--no-package-lock", "--ignore-scripts", "--no-audit", "--no-fund", ...pins];
  if (npm && npm.endsWith(".js")) execFileSync(process.execPath, [npm, ...args], { cwd: root, stdio: "inherit" });
  else execFileSync(process.platform === "win32" ? "npm.cmd" : "npm", args, { cwd: root, stdio: "inherit", shell: process.platform === "win32" });
}
execFileSync(process.execPath, [join(root, "scripts", "build.mjs")], { cwd: root, stdio: "inherit" });
