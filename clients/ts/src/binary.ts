/**
 * Locating the ckptd binary: the `binary` option, then `$CKPTD_PATH`, then the binary shipped in
 * the platform package (`@ckptd/<platform>-<arch>`, an optional dependency of `ckptd`), then `$PATH`.
 */
import { accessSync, closeSync, constants, openSync, readSync, statSync } from "node:fs";
import { delimiter, dirname, isAbsolute, join, resolve } from "node:path";

import { BinaryNotFoundError } from "./errors.js";
import { localRequire } from "./here.js";

export interface FindBinaryOptions {
  /** A path, or a bare command name looked up on `$PATH`. When given, nothing else is tried. */
  binary?: string | undefined;
  /** Environment to read `CKPTD_PATH` and `PATH` from (default `process.env`). */
  env?: NodeJS.ProcessEnv | undefined;
}

interface Attempt {
  place: string;
  path?: string;
  reason: string;
}

const isWindows = process.platform === "win32";

/** Marks the npm package's launcher script (bin/ckptd.cjs), which is not the binary itself. */
const LAUNCHER_MARK = "ckptd-npm-launcher";

/** Why `path` is not a runnable file, or null if it is. */
function unusable(path: string): string | null {
  let st;
  try {
    st = statSync(path);
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "ENOENT" ? "does not exist" : `cannot stat: ${(e as Error).message}`;
  }
  if (!st.isFile()) return "is not a regular file";
  if (!isWindows) {
    try {
      accessSync(path, constants.X_OK);
    } catch {
      return "is not executable";
    }
  }
  return null;
}

/** True for the `ckptd` command npm links to bin/ckptd.cjs (a small script, not the ~10 MB binary). */
function isLauncher(path: string): boolean {
  try {
    if (statSync(path).size > 1 << 16) return false;
    const fd = openSync(path, "r");
    try {
      const buf = Buffer.alloc(4096);
      const n = readSync(fd, buf, 0, buf.length, 0);
      return buf.subarray(0, n).toString("latin1").includes(LAUNCHER_MARK);
    } finally {
      closeSync(fd);
    }
  } catch {
    return false;
  }
}

function candidates(dir: string, name: string, env: NodeJS.ProcessEnv): string[] {
  if (!isWindows) return [join(dir, name)];
  const exts = (env["PATHEXT"] ?? ".EXE;.CMD;.BAT;.COM").split(";").filter(Boolean);
  return [join(dir, name), ...exts.map((e) => join(dir, name + e.toLowerCase()))];
}

function hasSeparator(p: string): boolean {
  return p.includes("/") || (isWindows && p.includes("\\"));
}

function searchPath(name: string, env: NodeJS.ProcessEnv, place: string, tried: Attempt[]): string | null {
  const dirs = (env["PATH"] ?? env["Path"] ?? "").split(delimiter).filter(Boolean);
  if (dirs.length === 0) {
    tried.push({ place, reason: "PATH is empty or not set" });
    return null;
  }
  const before = tried.length;
  for (const dir of dirs) {
    for (const c of candidates(dir, name, env)) {
      const why = unusable(c);
      if (why === null) {
        if (name === "ckptd" && isLauncher(c)) {
          tried.push({ place, path: c, reason: "is the npm package's launcher, not the binary" });
          continue;
        }
        return resolve(c);
      }
      if (why !== "does not exist" || c === join(dir, name)) tried.push({ place, path: c, reason: why });
    }
  }
  if (tried.length === before) tried.push({ place, reason: "no directories searched" });
  return null;
}

function fail(tried: Attempt[], hint: string): never {
  const lines = tried.map((t) => `  - ${t.place}${t.path === undefined ? "" : `: ${t.path}`}: ${t.reason}`);
  throw new BinaryNotFoundError(`ckptd binary not found. Tried:\n${lines.join("\n")}\n${hint}`, tried);
}

/** The platform package for this machine, e.g. `@ckptd/linux-x64`. */
export function platformPackage(platform: string = process.platform, arch: string = process.arch): string {
  return `@ckptd/${platform}-${arch}`;
}

/**
 * The binary shipped in this machine's platform package (`@ckptd/<platform>-<arch>/bin/ckptd`,
 * installed with `ckptd` as an optional dependency), or why there is none.
 */
export function packagedBinary(): { path: string } | { reason: string } {
  const pkg = platformPackage();
  let manifest: string;
  try {
    manifest = localRequire.resolve(`${pkg}/package.json`);
  } catch {
    return {
      reason:
        `${pkg} is not installed (npm installs it with ckptd on Linux, macOS and Windows x64 and on Linux and macOS arm64; ` +
        "not with --omit=optional or --no-optional, nor from a source checkout)",
    };
  }
  const p = join(dirname(manifest), "bin", isWindows ? "ckptd.exe" : "ckptd");
  const why = unusable(p);
  return why === null ? { path: p } : { reason: `${p} ${why}` };
}

const HINT =
  "Install the ckptd npm package with its optional dependencies (they carry the binary), or build it with " +
  "`go build -o bin/ckptd ./cmd/ckptd` (in the ckptd repository) and pass `binary: '/path/to/ckptd'`, " +
  "set CKPTD_PATH, or put it on PATH.";

/**
 * Returns the absolute path of the ckptd binary to run, or throws {@link BinaryNotFoundError}
 * listing each place tried: the `binary` option, `$CKPTD_PATH`, the binary shipped in the platform
 * package, `$PATH`. An explicit `binary` option or a set `CKPTD_PATH` is used exclusively: if it is
 * wrong, that is an error rather than a silent fallback to another ckptd.
 */
export function findBinary(options: FindBinaryOptions = {}): string {
  const env = options.env ?? process.env;
  const tried: Attempt[] = [];
  if (options.binary !== undefined && options.binary !== "") {
    const b = options.binary;
    if (hasSeparator(b) || isAbsolute(b)) {
      const p = resolve(b);
      const why = unusable(p);
      if (why === null) return p;
      tried.push({ place: "option `binary`", path: p, reason: why });
    } else {
      const found = searchPath(b, env, `option \`binary\` (${b}) on PATH`, tried);
      if (found !== null) return found;
    }
    fail(tried, "The `binary` option was given, so CKPTD_PATH, the platform package and PATH were not used.");
  }
  tried.push({ place: "option `binary`", reason: "not given" });

  const fromEnv = env["CKPTD_PATH"];
  if (fromEnv !== undefined && fromEnv !== "") {
    const p = resolve(fromEnv);
    const why = unusable(p);
    if (why === null) return p;
    tried.push({ place: "$CKPTD_PATH", path: p, reason: why });
    tried.push({ place: `package ${platformPackage()}`, reason: "not used because CKPTD_PATH is set" });
    tried.push({ place: "$PATH", reason: "not used because CKPTD_PATH is set" });
    fail(tried, "CKPTD_PATH is set, so nothing else was used; fix or unset it.");
  }
  tried.push({ place: "$CKPTD_PATH", reason: "not set" });

  const shipped = packagedBinary();
  if ("path" in shipped) return shipped.path;
  tried.push({ place: `package ${platformPackage()}`, reason: shipped.reason });

  const found = searchPath("ckptd", env, "$PATH", tried);
  if (found !== null) return found;
  fail(tried, HINT);
}
