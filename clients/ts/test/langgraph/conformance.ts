/**
 * Shared initializer for the LangGraph conformance suite
 * (@langchain/langgraph-checkpoint-validation): every `createCheckpointer()` starts a fresh ckptd
 * process on a fresh, empty database; `destroyCheckpointer()` closes it and removes the database.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import type { CheckpointSaverTestInitializer } from "@langchain/langgraph-checkpoint-validation";
import { describe, it } from "vitest";
import { CkptdSaver, type CkptdRetention } from "ckptd/langgraph";

const dirs = new WeakMap<CkptdSaver, string>();

function binary(): string {
  const p = process.env["CKPTD_PATH"];
  if (p === undefined || p === "") {
    throw new Error("CKPTD_PATH is not set: the LangGraph conformance suite needs the ckptd binary (go build -o bin/ckptd ./cmd/ckptd)");
  }
  return p;
}

/** An initializer of savers on fresh SQLite databases, with retention (default: none). */
export function sqliteInitializer(name: string, retention?: CkptdRetention): CheckpointSaverTestInitializer<CkptdSaver> & {
  createCheckpointer(saverClass?: typeof CkptdSaver): Promise<CkptdSaver>;
} {
  return {
    checkpointerName: name,
    async createCheckpointer(saverClass: typeof CkptdSaver = CkptdSaver) {
      const dir = mkdtempSync(join(tmpdir(), "ckptd-lg-"));
      const saver = new saverClass({ db: join(dir, "ckptd.db"), binary: binary(), ...(retention ? { retention } : {}) });
      await saver.setup();
      dirs.set(saver, dir);
      return saver;
    },
    async destroyCheckpointer(saver) {
      await saver.close();
      const dir = dirs.get(saver);
      if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
    },
  };
}

export const initializer = sqliteInitializer("ckptd");

/**
 * The same on PostgreSQL: every checkpointer on a fresh schema (`ckptd_schema`) of the run's
 * test database, `CKPTD_TEST_PG_URL` (./scripts/test.sh starts a throwaway cluster). Undefined
 * when there is none: see {@link pgMissing}.
 */
export const pgInitializer: (CheckpointSaverTestInitializer<CkptdSaver> & {
  createCheckpointer(saverClass?: typeof CkptdSaver): Promise<CkptdSaver>;
}) | undefined = (() => {
  const base = process.env["CKPTD_TEST_PG_URL"] ?? "";
  if (base === "") return undefined;
  let n = 0;
  return {
    checkpointerName: "ckptd (postgres)",
    async createCheckpointer(saverClass: typeof CkptdSaver = CkptdSaver) {
      const schema = `t_${process.pid}_${Date.now().toString(36)}_${n++}`;
      const saver = new saverClass({ db: `${base}${base.includes("?") ? "&" : "?"}ckptd_schema=${schema}`, binary: binary() });
      await saver.setup();
      return saver;
    },
    async destroyCheckpointer(saver: CkptdSaver) {
      await saver.close();
    },
  };
})();

/** Registers what runs instead of the PostgreSQL suite without a database: a skip, or under CI=true a failure. */
export function pgMissing(name: string): void {
  const why = "CKPTD_TEST_PG_URL is not set: the PostgreSQL conformance run needs the throwaway cluster ./scripts/test.sh starts";
  describe(`${name} (postgres)`, () => {
    if (process.env["CI"] === "true") {
      it("needs PostgreSQL under CI=true", () => {
        throw new Error(why);
      });
    } else {
      it.skip(`PostgreSQL tests skipped: ${why}`, () => {});
    }
  });
}
