#!/usr/bin/env node
// Stages the npm packages for scripts/dist.sh: `ckptd` (the built client from clients/ts, its
// package.json without scripts and devDependencies, plus one optionalDependency per platform
// package) and `@ckptd/<platform>-<arch>` (the binary, with os/cpu so npm installs only the
// matching one: the esbuild model).
//   node scripts/dist_npm.mjs STAGE_DIR BIN_DIR   (BIN_DIR/<goos>-<goarch>/ckptd[.exe])
import { chmodSync, cpSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const [stage, binDir] = process.argv.slice(2);
if (!stage || !binDir) throw new Error("usage: dist_npm.mjs STAGE_DIR BIN_DIR");
const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const ts = join(root, "clients", "ts");
const pkg = JSON.parse(readFileSync(join(ts, "package.json"), "utf8"));

// Go target -> npm's process.platform / process.arch names.
const targets = [
  ["linux-amd64", "linux", "x64"],
  ["linux-arm64", "linux", "arm64"],
  ["darwin-amd64", "darwin", "x64"],
  ["darwin-arm64", "darwin", "arm64"],
  ["windows-amd64", "win32", "x64"],
];
const osName = { linux: "Linux", darwin: "macOS", win32: "Windows" };
const json = (v) => JSON.stringify(v, null, 2) + "\n";

for (const [goTarget, os, cpu] of targets) {
  const name = `@ckptd/${os}-${cpu}`;
  const dir = join(stage, `${os}-${cpu}`);
  const exe = os === "win32" ? "ckptd.exe" : "ckptd";
  mkdirSync(join(dir, "bin"), { recursive: true });
  cpSync(join(binDir, goTarget, exe), join(dir, "bin", exe));
  chmodSync(join(dir, "bin", exe), 0o755);
  writeFileSync(
    join(dir, "package.json"),
    json({
      name,
      version: pkg.version,
      description: `The ckptd binary for ${osName[os]} ${cpu} (installed by the ckptd package as an optional dependency)`,
      license: pkg.license,
      os: [os],
      cpu: [cpu],
      files: ["bin"],
      preferUnplugged: true,
    }),
  );
  writeFileSync(
    join(dir, "README.md"),
    `# ${name}\n\nThe static ckptd ${pkg.version} binary for ${osName[os]} ${cpu}. You do not install this package yourself: ` +
      "`npm install ckptd` pulls in the one for your platform, and the client and `npx ckptd` run its `bin/" + exe + "`.\n",
  );
}

const main = join(stage, "ckptd");
mkdirSync(main, { recursive: true });
for (const f of ["dist", "bin", "src", "README.md"]) cpSync(join(ts, f), join(main, f), { recursive: true });
const { scripts: _s, devDependencies: _d, ...published } = pkg;
published.optionalDependencies = Object.fromEntries(targets.map(([, os, cpu]) => [`@ckptd/${os}-${cpu}`, pkg.version]));
writeFileSync(join(main, "package.json"), json(published));
