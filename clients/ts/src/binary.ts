/** Locating the ckptd binary: the `binary` option, then `$CKPTD_PATH`, then `$PATH`. */
import { accessSync, constants, statSync } from "node:fs";
import { delimiter, isAbsolute, join, resolve } from "node:path";

import { BinaryNotFoundError } from "./errors.js";

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
  for (const dir of dirs) {
    for (const c of candidates(dir, name, env)) {
      const why = unusable(c);
      if (why === null) return resolve(c);
      if (why !== "does not exist" || c === join(dir, name)) tried.push({ place, path: c, reason: why });
    }
  }
  return null;
}

function fail(tried: Attempt[], hint: string): never {
  const lines = tried.map((t) => `  - ${t.place}${t.path === undefined ? "" : `: ${t.path}`}: ${t.reason}`);
  throw new BinaryNotFoundError(`ckptd binary not found. Tried:\n${lines.join("\n")}\n${hint}`, tried);
}

const HINT =
  "Build it with `go build -o bin/ckptd ./cmd/ckptd` (in the ckptd repository) and pass " +
  "`binary: '/path/to/ckptd'`, set CKPTD_PATH, or put it on PATH.";

/**
 * Returns the absolute path of the ckptd binary to run, or throws {@link BinaryNotFoundError}
 * listing each place tried. An explicit `binary` option or a set `CKPTD_PATH` is used exclusively:
 * if it is wrong, that is an error rather than a silent fallback to another ckptd on `PATH`.
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
    fail(tried, "The `binary` option was given, so CKPTD_PATH and PATH were not searched for `ckptd`.");
  }
  tried.push({ place: "option `binary`", reason: "not given" });

  const fromEnv = env["CKPTD_PATH"];
  if (fromEnv !== undefined && fromEnv !== "") {
    const p = resolve(fromEnv);
    const why = unusable(p);
    if (why === null) return p;
    tried.push({ place: "$CKPTD_PATH", path: p, reason: why });
    fail(tried, "CKPTD_PATH is set, so PATH was not searched; fix or unset it.");
  }
  tried.push({ place: "$CKPTD_PATH", reason: "not set" });

  const found = searchPath("ckptd", env, "$PATH", tried);
  if (found !== null) return found;
  fail(tried, HINT);
}
