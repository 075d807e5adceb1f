/** Test helpers: repository paths, the ckptd binary, temporary databases. */
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));

/** The repository root: the first ancestor holding testdata/framing.json. */
export function repoRoot(): string {
  let dir = here;
  for (;;) {
    if (existsSync(join(dir, "testdata", "framing.json"))) return dir;
    const up = dirname(dir);
    if (up === dir) throw new Error(`testdata/framing.json not found above ${here}`);
    dir = up;
  }
}

/** clients/ts (the package root). */
export function packageRoot(): string {
  let dir = here;
  while (!existsSync(join(dir, "package.json"))) {
    const up = dirname(dir);
    if (up === dir) throw new Error("package.json not found");
    dir = up;
  }
  return dir;
}

/** build/ (compiled tests, examples, bench). */
export function buildDir(): string {
  return join(packageRoot(), "build");
}

/**
 * The ckptd binary for end-to-end tests, from CKPTD_PATH. Throws (the test fails, it is not
 * skipped) when unset or missing.
 */
export function ckptdPath(): string {
  const p = process.env["CKPTD_PATH"];
  if (p === undefined || p === "") {
    throw new Error(
      "CKPTD_PATH is not set: the end-to-end tests need the ckptd binary. Build it with\n" +
        `  (cd ${repoRoot()} && go build -o bin/ckptd ./cmd/ckptd) && export CKPTD_PATH=${join(repoRoot(), "bin", "ckptd")}\n` +
        "or run only the unit tests with `npm run test:unit`.",
    );
  }
  if (!existsSync(p)) throw new Error(`CKPTD_PATH=${p} does not exist; build ckptd first (go build -o bin/ckptd ./cmd/ckptd)`);
  return p;
}

/** A fresh temporary directory, removed by the returned cleanup. */
export function tempDir(prefix = "ckptd-ts-"): { dir: string; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/** Resolves after ms milliseconds. */
export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** Polls fn until it returns a truthy value or the timeout expires. */
export async function waitFor<T>(fn: () => T | Promise<T>, timeoutMs = 5000, what = "condition"): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v as NonNullable<T>;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(10);
  }
}

let pgSchemas = 0;

/**
 * A URL of a fresh, empty ckptd database on the run's PostgreSQL cluster (a schema of its own
 * in `CKPTD_TEST_PG_URL`, which ./scripts/test.sh sets), or undefined without one.
 */
export function pgSchemaURL(): string | undefined {
  const base = process.env["CKPTD_TEST_PG_URL"] ?? "";
  if (base === "") return undefined;
  const schema = `t_${process.pid}_${Date.now().toString(36)}_${pgSchemas++}`;
  return `${base}${base.includes("?") ? "&" : "?"}ckptd_schema=${schema}`;
}
