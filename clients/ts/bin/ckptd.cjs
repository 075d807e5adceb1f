#!/usr/bin/env node
// ckptd-npm-launcher: the `ckptd` command of the npm package (`npx ckptd ls`). Runs the ckptd
// binary (the one shipped in @ckptd/<platform>-<arch>, unless CKPTD_PATH names another; see
// findBinary) with the same arguments, stdio and exit status.
"use strict";
const { spawnSync } = require("node:child_process");
const { findBinary } = require("../dist/cjs/binary.js");

let binary;
try {
  binary = findBinary();
} catch (e) {
  process.stderr.write(`${e.message}\n`);
  process.exit(127);
}
const r = spawnSync(binary, process.argv.slice(2), { stdio: "inherit", windowsHide: false });
if (r.error) {
  process.stderr.write(`ckptd: cannot run ${binary}: ${r.error.message}\n`);
  process.exit(127);
}
if (r.signal) process.kill(process.pid, r.signal);
process.exit(r.status ?? 1);
